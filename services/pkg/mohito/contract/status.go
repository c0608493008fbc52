package contract

import (
	"strconv"
	"time"
)

// Status the coordinator writes after every round event and the operator's Round, Vendor
// and Shuffler controllers read (docs/services.md).
const BucketStatus = "mohito_status"

// StatusSeriesKey, StatusVendorKey and StatusShufflerKey are the keys of BucketStatus.
func StatusSeriesKey(series string) string { return "series." + series }
func StatusVendorKey(v int) string         { return "vendor." + strconv.Itoa(v) }
func StatusShufflerKey(v int) string       { return "shuffler." + strconv.Itoa(v) }

// SeriesStatus is the value of series.<series>.
type SeriesStatus struct {
	CurrentRound     uint64  `json:"currentRound"`
	OpenedRounds     int64   `json:"openedRounds"` // rounds the series opened, over every coordinator
	CompletedRounds  int64   `json:"completedRounds"`
	AbortedRounds    int64   `json:"abortedRounds"`
	LastRoundSeconds float64 `json:"lastRoundSeconds"`
	// LastProcessingSeconds is the work in the last completed round: its time from close to
	// release less the vendors' fixed response deadline — the shuffler exchange, decryption,
	// encoding and the responder. A round's open-to-release time is at least the period plus
	// that deadline whatever the load (G7), so this is the figure that grows with load and that
	// autoscaling compares with the period.
	LastProcessingSeconds float64 `json:"lastProcessingSeconds"`
	CommandsPerSecond     int64   `json:"commandsPerSecond"`
	FakeRatio             float64 `json:"fakeRatio"`
	Bursts                int64   `json:"bursts"`
	// CapacityPercent is the series' capacity class (C_v = base_v × it / 100 + δ + jitter
	// draw); 100 without CapacityClasses. CapacityClass is its index.
	CapacityClass   int             `json:"capacityClass"`
	CapacityPercent int             `json:"capacityPercent"`
	CapacityChange  *CapacityChange `json:"capacityChange,omitempty"` // the last one
	Updated         string          `json:"updated"`                  // RFC 3339
}

// UpdatedTime parses Updated, zero if absent.
func (s SeriesStatus) UpdatedTime() time.Time {
	t, _ := time.Parse(time.RFC3339, s.Updated)
	return t
}

// CapacityChange is a move of the series' capacity class and the figures behind it.
type CapacityChange struct {
	At           string  `json:"at"` // RFC 3339
	FromPercent  int     `json:"fromPercent"`
	ToPercent    int     `json:"toPercent"`
	Rounds       int     `json:"rounds"`       // rounds observed since the previous change
	BurstRate    float64 `json:"burstRate"`    // share of them with a burst (S > 0)
	MinFakeRatio float64 `json:"minFakeRatio"` // the least share of fakes among them
}

// VendorStatus is the value of vendor.<index>.
type VendorStatus struct {
	RoundsServed  int64  `json:"roundsServed"`
	ShufflerDuty  int64  `json:"shufflerDuty"`
	ActiveDevices *int64 `json:"activeDevices,omitempty"`
}

// ShufflerStatus is the value of shuffler.<index>: the duty of vendor index's shuffler
// service.
type ShufflerStatus struct {
	RoundsShuffled int64  `json:"roundsShuffled"` // rounds it shuffled that completed
	LastRound      uint64 `json:"lastRound"`
	LastResult     string `json:"lastResult"` // Completed | Aborted | Open
}

// BucketVendors is the vendor registry the operator maintains (key = the vendor's index).
const BucketVendors = "mohito_vendors"

// Registration is a vendor's entry in BucketVendors.
type Registration struct {
	Index                 int32  `json:"index"`
	Name                  string `json:"name"`
	Namespace             string `json:"namespace"`
	Devices               int64  `json:"devices"`
	Base                  int32  `json:"base"`
	Jitter                int32  `json:"jitter"`
	PaddedEntries         int32  `json:"paddedEntries"`
	ResponsePaddedEntries int32  `json:"responsePaddedEntries"`
}

// Values of ShufflerStatus.LastResult.
const (
	ShuffleOpen      = "Open"
	ShuffleAborted   = "Aborted"
	ShuffleCompleted = "Completed"
)
