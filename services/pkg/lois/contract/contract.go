// Package contract holds what the LOIS roles (DI, CI, SI) and whoever deploys them agree on
// (shared/specs/lois.md §10): the emulated wire's ports, the keys file a role loads its
// keystream streams from, and the metric names and rejection reasons.
package contract

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// Emulated wire (spec §10): every LOIS packet travels as the payload of one UDP datagram.
const (
	DefaultCloudWirePort  = 7400 // CI: uploads from DIs
	DefaultDeviceWirePort = 7401 // DI: downloads from SIs (direct server return)
	DefaultServerWirePort = 7402 // SI: uploads forwarded by CI
	// MaxDatagram bounds a wire datagram: an IPv4 packet of at most 64 KiB.
	MaxDatagram = 65535
)

// Metrics every role exports. Labels never carry ids, addresses or keys.
const (
	MetricPackets  = "lois_packets_total"   // role, dir, result
	MetricPool     = "lois_pool_keystreams" // dir: unused keystreams a sender holds, all services summed
	MetricDVT      = "lois_dvt_entries"     // live entries of a receiver's table
	MetricDVTBytes = "lois_dvt_bytes"
	MetricGC       = "lois_gc_dropped_total" // entries collected unconsumed (expiry)
	MetricCover    = "lois_stp_cover_bytes_total"
	MetricSessions = "lois_sessions_installed" // role: device sessions a CI or SI has installed
	// Replenishment (spec §3.12): epochs asked for (DI EPOCH_REQ, SI low-water events) and
	// granted (registrar), packets held while a pool was empty, seeds that must be replaced.
	MetricEpochsRequested = "lois_epochs_requested_total" // role, dir
	MetricEpochsGranted   = "lois_epochs_granted_total"   // role, dir
	MetricExhaustQueued   = "lois_exhaust_queued_total"   // role: packets held for a grant (then sent or dropped as exhausted)
	MetricRekeysDue       = "lois_rekeys_due_total"       // role: grants refused because the seed is due for a new HELLO
)

// Results of lois_packets_total.
const (
	ResultOK          = "ok"
	ResultUnknownID   = "unknown_id"  // never issued, expired or consumed long ago
	ResultReplay      = "replay"      // an id this role consumed recently: a duplicate or a replay
	ResultExhausted   = "exhausted"   // sender's pool empty: dropped, never reused (D-20)
	ResultMalformed   = "malformed"   // not IPv4/TCP, bad lengths or options, no LOIS option
	ResultNotLOIS     = "not_lois"    // not addressed to the cloud (deny policy, D-13)
	ResultPad         = "pad_dropped" // recovered cover packet
	ResultUnknownSID  = "unknown_sid" // no pool, backend or service for the packet
	ResultNoRoom      = "no_room"     // options leave no room for the LOIS option
	ResultUnknownPeer = "unknown_device"
	ResultIOError     = "io_error"
	ResultPadSent     = "pad_sent" // a cover packet a sender hid and sent (STP)
)

// Results is every result value, for pre-created counters.
var Results = []string{ResultOK, ResultUnknownID, ResultReplay, ResultExhausted, ResultMalformed,
	ResultNotLOIS, ResultPad, ResultUnknownSID, ResultNoRoom, ResultUnknownPeer, ResultIOError, ResultPadSent}

// Result maps a core error to its result label.
func Result(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, lois.ErrUnknownID):
		return ResultUnknownID
	case errors.Is(err, lois.ErrExhausted):
		return ResultExhausted
	case errors.Is(err, lois.ErrNotLOIS):
		return ResultNotLOIS
	case errors.Is(err, lois.ErrPad):
		return ResultPad
	case errors.Is(err, lois.ErrUnknownSID):
		return ResultUnknownSID
	case errors.Is(err, lois.ErrNoRoom):
		return ResultNoRoom
	default: // ErrMalformed, ErrNoOption, ErrNoHeadroom
		return ResultMalformed
	}
}

// Keys is a role's keys file: the streams of one session that this role may hold, written
// by the registrar (here `lois provision`) and read by the role at start. It is a secret
// (stream keys): mode 0600, never logged. Each role gets only what it needs (D-6): the DI
// both directions, the CI the upload streams, an SI the upload streams of its services and
// its partition of the download streams.
type Keys struct {
	Version int    `json:"version"`
	Session string `json:"session"` // 16 bytes, hex
	// Device is the DI's address inside the LOIS packets (DIP) and its wire address, where
	// SIs send downloads.
	DeviceIP   string `json:"device_ip"`
	DeviceWire string `json:"device_wire"`
	// Grant marks an epoch record (EPOCH_GRANT, spec §3.12): Streams hold only the new
	// epoch of an open session.
	Grant bool `json:"grant,omitempty"`
	// Replicas and Replica give this SI's download partition (i mod Replicas = Replica,
	// spec §3.11); 0 replicas means no partition (DI, CI).
	Replicas int       `json:"replicas,omitempty"`
	Replica  int       `json:"replica,omitempty"`
	Streams  []Stream  `json:"streams"`
	Created  int64     `json:"created_unix"`
	DVT      *DVTParam `json:"dvt,omitempty"`
	// AwaitReady marks a session record whose download pools an SI activates only once the
	// device's READY record (Ready) arrives (spec §3.2: the DI has installed the session).
	// Records from the registrar daemon carry it; `lois register` sessions start at once.
	AwaitReady bool `json:"await_ready,omitempty"`
	// Ready marks a READY record: the session's DI has installed it (no streams).
	Ready bool `json:"ready,omitempty"`
	// Control is the session's control key (hex, ControlKeySize bytes), only in a device's
	// keys from the registrar daemon: its EPOCH_REQs and the grants it receives are sealed
	// under it. Never in a session record.
	Control string `json:"control,omitempty"`
}

// ControlKey decodes Control (nil when absent).
func (k *Keys) ControlKey() []byte {
	b, err := hex.DecodeString(k.Control)
	if err != nil || len(b) != ControlKeySize {
		return nil
	}
	return b
}

// DVTParam carries the registrar's table parameters a receiver must share in 16-bit mode.
type DVTParam struct {
	Fingerprint16 bool   `json:"fingerprint16"`
	Key           string `json:"key,omitempty"` // hex, 16 bytes
	Capacity      int    `json:"capacity"`
}

// Stream is one (dir, SID, epoch) batch: its ChaCha20 stream key and the registrar's dedup
// verdicts.
type Stream struct {
	Dir    string   `json:"dir"` // "up" or "down"
	SID    uint16   `json:"sid"`
	Epoch  uint32   `json:"epoch"`
	N      uint32   `json:"n"`
	Dup    []uint32 `json:"dup,omitempty"`
	Expiry int64    `json:"expiry_unix"`
	Key    string   `json:"key"` // 32 bytes, hex
}

// KeysVersion is the format version of Keys.
const KeysVersion = 1

// Core returns the stream as the core uses it.
func (s *Stream) Core() (lois.Stream, error) {
	var out lois.Stream
	k, err := hex.DecodeString(s.Key)
	if err != nil || len(k) != lois.StreamKeySize {
		return out, fmt.Errorf("stream %s sid %d epoch %d: key is not %d hex bytes", s.Dir, s.SID, s.Epoch, lois.StreamKeySize)
	}
	copy(out.Key[:], k)
	clear(k)
	switch s.Dir {
	case "up":
		out.Dir = lois.Up
	case "down":
		out.Dir = lois.Down
	default:
		return out, fmt.Errorf("stream sid %d epoch %d: dir %q", s.SID, s.Epoch, s.Dir)
	}
	if !slices.IsSorted(s.Dup) {
		return out, fmt.Errorf("stream %s sid %d epoch %d: dup indices not sorted", s.Dir, s.SID, s.Epoch)
	}
	out.SID, out.Epoch, out.N, out.Dup, out.Expiry = s.SID, s.Epoch, s.N, s.Dup, s.Expiry
	return out, nil
}

// FromCore records a core stream.
func FromCore(s *lois.Stream) Stream {
	return Stream{Dir: s.Dir.String(), SID: s.SID, Epoch: s.Epoch, N: s.N, Dup: slices.Clone(s.Dup),
		Expiry: s.Expiry, Key: hex.EncodeToString(s.Key[:])}
}

// Validate checks a keys file's shape.
func (k *Keys) Validate() error {
	if k.Version != KeysVersion {
		return fmt.Errorf("keys version %d, want %d", k.Version, KeysVersion)
	}
	if b, err := hex.DecodeString(k.Session); err != nil || len(b) != 16 {
		return errors.New("keys: session is not 16 hex bytes")
	}
	if _, err := netip.ParseAddr(k.DeviceIP); err != nil {
		return fmt.Errorf("keys: device_ip: %w", err)
	}
	if k.DeviceWire != "" {
		if _, err := netip.ParseAddrPort(k.DeviceWire); err != nil {
			return fmt.Errorf("keys: device_wire: %w", err)
		}
	}
	if k.Replicas < 0 || (k.Replicas > 0 && (k.Replica < 0 || k.Replica >= k.Replicas)) {
		return fmt.Errorf("keys: replica %d of %d", k.Replica, k.Replicas)
	}
	if k.Control != "" && k.ControlKey() == nil {
		return fmt.Errorf("keys: control is not %d hex bytes", ControlKeySize)
	}
	for i := range k.Streams {
		if _, err := k.Streams[i].Core(); err != nil {
			return err
		}
	}
	return nil
}

// ReadKeys reads and validates a keys file.
func ReadKeys(path string) (*Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	k, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	return k, nil
}

// ParseKeys decodes and validates a keys file or session record.
func ParseKeys(b []byte) (*Keys, error) {
	var k Keys
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, err
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return &k, nil
}

// WriteKeys writes k to path with mode 0600 (replacing it atomically).
func WriteKeys(path string, k *Keys) error {
	b, err := json.MarshalIndent(k, "", " ")
	if err != nil {
		return err
	}
	defer clear(b)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
