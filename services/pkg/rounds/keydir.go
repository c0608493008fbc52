package rounds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// The key directory (spec §3.2, simplified): each party announces its public
// key into the other side's inbox stream, on a subject only it can publish
// to — the account exports give vendor v exactly mohito.i.in.v{v}.> and the
// integrator exactly mohito.v{v}.in.> — so the sender of a key is
// authenticated by the account boundary. Streams keep messages for
// natsx.DefaultMaxAge, so the daemons re-announce every KeyAnnounceInterval;
// readers take the last message on the subject.
const KeyAnnounceInterval = time.Minute

// VendorKeySubject carries pk_V of vendor v into the integrator's StreamIntegratorIn.
func VendorKeySubject(v int) string { return natsx.IntegratorInbox(v) + ".key" }

// IntegratorKeySubject carries pk_I into vendor v's StreamVendorIn.
func IntegratorKeySubject(v int) string { return natsx.VendorInbox(v) + ".key" }

func announce(ctx context.Context, js jetstream.JetStream, subject string, pk *mohito.PublicKey) error {
	b := pk.Bytes()
	h := sha256.Sum256(b)
	id := fmt.Sprintf("key-%s-%d", hex.EncodeToString(h[:8]), time.Now().Unix()/int64(KeyAnnounceInterval/time.Second))
	return natsx.Publish(ctx, js, subject, id, b, nil)
}

// AnnounceVendorKey publishes vendor v's public key to the integrator (vendor account).
func AnnounceVendorKey(ctx context.Context, js jetstream.JetStream, v int, pk *mohito.PublicKey) error {
	return announce(ctx, js, VendorKeySubject(v), pk)
}

// AnnounceIntegratorKey publishes pk_I to vendor v (integrator account).
func AnnounceIntegratorKey(ctx context.Context, js jetstream.JetStream, v int, pk *mohito.PublicKey) error {
	return announce(ctx, js, IntegratorKeySubject(v), pk)
}

func lastKey(ctx context.Context, js jetstream.JetStream, stream, subject string, suite mohito.Suite) (*mohito.PublicKey, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", stream, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("no key announced on %s: %w", subject, err)
	}
	pk, err := mohito.ParsePublicKey(suite, m.Data)
	if err != nil {
		return nil, fmt.Errorf("key on %s: %w", subject, err)
	}
	return pk, nil
}

// FetchVendorKeys reads every vendor's last announced key (integrator account).
func FetchVendorKeys(ctx context.Context, js jetstream.JetStream, p mohito.Params) ([]*mohito.PublicKey, error) {
	out := make([]*mohito.PublicKey, p.Vendors)
	for v := range out {
		pk, err := lastKey(ctx, js, StreamIntegratorIn, VendorKeySubject(v), p.Suite)
		if err != nil {
			return nil, fmt.Errorf("vendor %d: %w", v, err)
		}
		out[v] = pk
	}
	return out, nil
}

// FetchIntegratorKey reads pk_I as announced to vendor v (vendor account).
func FetchIntegratorKey(ctx context.Context, js jetstream.JetStream, v int, p mohito.Params) (*mohito.PublicKey, error) {
	return lastKey(ctx, js, StreamVendorIn, IntegratorKeySubject(v), p.Suite)
}

// EnsureIntegratorStreams creates the integrator's two streams (idempotent),
// so integrator roles can start in any order.
func EnsureIntegratorStreams(ctx context.Context, js jetstream.JetStream) error {
	if _, err := natsx.EnsureStream(ctx, js, StreamIntegratorIn, "mohito.i.in.>"); err != nil {
		return err
	}
	_, err := natsx.EnsureStream(ctx, js, StreamWork, "mohito.r.>")
	return err
}
