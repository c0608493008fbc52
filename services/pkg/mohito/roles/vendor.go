package roles

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// VendorConfig configures a vendor's services (its own account).
type VendorConfig struct {
	Deployment Deployment
	Vendor     int
	NC         *nats.Conn
	JS         jetstream.JetStream
	Keys       *mohito.KeyRing    // sk_V by epoch (shuffler)
	Integrator mohito.KeySet      // pk_I by epoch as announced (fake pools; later epochs are watched)
	Devices    []RegisteredDevice // the vendor's devices (agent)
	FakePool   int                // fakes kept per vendor in the pool
	ID         string             // replica id for the agent's leader lease (agent)
	// DeviceRate and DeviceBurst limit what each device may publish to the agent (answers
	// per second, and at once); 0 means DeviceRate(Deployment.Round) and DefaultDeviceBurst.
	DeviceRate  float64
	DeviceBurst int
	Log         *slog.Logger
	Metrics     *Metrics
}

// RegisteredDevice is what a vendor knows about one device: its id on the
// vendor's channel and k_D^prf (never k_D^ae, spec G4).
type RegisteredDevice struct {
	ID  string
	PRF [mohito.KeySize]byte
}

// EnsureVendorStreams creates vendor v's inbox streams (inbox.go): the round messages on
// memory storage, kept two whole rounds, and the integrator's key announcements on file storage.
func EnsureVendorStreams(ctx context.Context, js jetstream.JetStream, v int, d *Deployment) error {
	return ensureInbox(ctx, js, d, contract.StreamVendorIn, contract.VendorRoundSubjects(v), contract.VendorInbox(v)+".>",
		contract.StreamVendorKeys, contract.IntegratorKeySubject(v))
}
