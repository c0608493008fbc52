package contract

import "time"

// DeploymentKey is the ConfigMap key (and file name) of the deployment document.
const DeploymentKey = "deployment.json"

// DeploymentFile is the deployment document the operator renders into ConfigMap
// <round>-deployment, key DeploymentKey, and every role reads at start (docs/services.md).
// Durations are Go duration strings. The services decode it strictly: an unknown field is an
// error.
type DeploymentFile struct {
	Series           string `json:"series"`
	Mode             string `json:"mode"`  // Hardened (default) | PaperLiteral (rejected: benchmark-only, not served)
	Suite            string `json:"suite"` // X25519 (default) | MLKEM768X25519
	CommandsPerUser  int    `json:"commandsPerUser"`
	Delta            uint64 `json:"delta"`
	CommandSize      int    `json:"commandSize"`
	ResponseSize     int    `json:"responseSize"`
	Period           string `json:"period"`
	ShufflerTimeout  string `json:"shufflerTimeout"`
	ResponseDeadline string `json:"responseDeadline"`
	// DeviceAnswerAfter is the devices' fixed answer offset after a delivery
	// (G7); empty means responseDeadline/4, at most responseDeadline/2.
	DeviceAnswerAfter string `json:"deviceAnswerAfter,omitempty"`
	AsyncWindow       int    `json:"asyncWindow"`
	Encoders          int    `json:"encoders"`
	OutBatch          int    `json:"outBatch"`
	ResponseQuantum   int    `json:"responseQuantum"`
	CapacityDraw      string `json:"capacityDraw"` // Random (default) | Fixed
	// CapacityClasses lets the coordinator move every vendor's C_v between size classes
	// from what the integrator observes (bursts, fakes); absent keeps base as set.
	CapacityClasses *CapacityClasses   `json:"capacityClasses,omitempty"`
	Vendors         []DeploymentVendor `json:"vendors"`
}

// DefaultDeviceAnswerAfter is the devices' answer offset when DeviceAnswerAfter is empty: a
// quarter of the response deadline (the rest is the devices' transit slack).
func DefaultDeviceAnswerAfter(responseDeadline time.Duration) time.Duration {
	return responseDeadline / 4
}

// CapacityClasses is the policy that moves the targets C_v with demand (spec §3.8, App. B, G5):
// each round C_v = base_v × percent[class] / 100 + δ + U{0..jitter}. The class is one for the
// whole series, because the integrator observes demand only in aggregate (which rounds burst, the
// share of fakes), never per vendor. It rises one step when more than burstRate of the rounds
// since the last change burst, and falls one step when none of them burst and each had at least
// lowerFakeRatio fakes — and only once hold has passed since the last change.
type CapacityClasses struct {
	Percent        []int   `json:"percent"`        // ascending multipliers of base, the first 100
	Hold           string  `json:"hold"`           // Go duration, at least 10 periods
	BurstRate      float64 `json:"burstRate"`      // in (0, 1)
	LowerFakeRatio float64 `json:"lowerFakeRatio"` // in [1 − min step ratio, 1)
}

// DeploymentVendor is one vendor of a DeploymentFile.
type DeploymentVendor struct {
	Index                 int    `json:"index"`
	Name                  string `json:"name"`
	Devices               int    `json:"devices"`
	Base                  uint64 `json:"base"`
	Jitter                uint64 `json:"jitter"`
	PaddedEntries         int    `json:"paddedEntries"`
	ResponsePaddedEntries int    `json:"responsePaddedEntries"`
	// ShufflerWeight is the vendor's weight in the shuffler rotation (spec
	// O4): the sum of its Shufflers' weights; absent means its devices, 0
	// keeps it out of the rotation (it never shuffles).
	ShufflerWeight *int `json:"shufflerWeight,omitempty"`
}

// Roles: one image runs every role as `mohito <role>`.
const (
	RoleCoordinator   = "coordinator"
	RoleGateway       = "gateway"
	RoleDecryptWorker = "decrypt-worker"
	RoleEncoder       = "encoder"
	RoleResponder     = "responder"
	RoleShuffler      = "shuffler"
	RoleVendorAgent   = "vendor-agent"
)

// DefaultKeyActivationDelay is the roles' --key-activation-delay default: how long a new key
// epoch is held by every decrypting role before it is announced (the operator reports it in
// its KeyEpochRotated Events).
const DefaultKeyActivationDelay = 3 * time.Minute
