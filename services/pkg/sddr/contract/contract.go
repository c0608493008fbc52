// Package contract is the result of one shard of an SDDR encounter simulation (`sddr
// simulate`), as the shard writes it to its pod's termination message and the
// EncounterSimulation operator reads, validates and merges it. It imports nothing of the
// services, so the operator may import it.
//
// Counts are integers so that merging shards gives exactly the figures of a one-shard run of
// the same seed; only joules, CPU and wall time are floating point.
package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Version is the current format version (field "v").
const Version = 1

// MaxBytes bounds the compact JSON encoding: a Kubernetes termination message is 4 KiB.
const MaxBytes = 4096

// Class is the energy account of one device class (spec §5.5, Equation 1).
type Class struct {
	Name    string `json:"name"`
	Devices int64  `json:"devices"`
	// DeviceSeconds is simulated time summed over the class's devices.
	DeviceSeconds int64 `json:"deviceSeconds"`
	// Inquiries the devices ran, Responses they received and processed, Answers they gave
	// to other devices' inquiries.
	Inquiries int64 `json:"inquiries"`
	Responses int64 `json:"responses"`
	Answers   int64 `json:"answers"`
	// Joules is Equation 1 over the class: idle with Bluetooth and epoch changes per
	// simulated second, discovery per inquiry, recognition per response, answering per answer.
	Joules float64 `json:"joules"`
	// BatteryPercentPerDay is Joules per simulated device-day as a share of the battery.
	BatteryPercentPerDay float64 `json:"batteryPctPerDay"`
}

// Energy is the coefficients of Equation 1 (spec §5.5) a run used, in the units of
// EncounterSimulation.spec.energy and of `sddr simulate`'s flags (docs/sddr.md, "Energy
// model"): per simulated second a device pays IdleBluetoothJoulesPerDay/86400 and an epoch
// change every 15 min, per inquiry DiscoveryMillijoules, per response it processes
// RecognitionMillijoules, per inquiry of another device it answers AnswerMillijoules.
// BatteryJoules turns joules into battery %/day.
type Energy struct {
	IdleBluetoothJoulesPerDay float64 `json:"idleBtJPerDay"`
	EpochChangeMillijoules    float64 `json:"epochChangeMJ"`
	DiscoveryMillijoules      float64 `json:"discoveryMJ"`
	RecognitionMillijoules    float64 `json:"recognitionMJ"`
	AnswerMillijoules         float64 `json:"answerMJ"`
	BatteryJoules             float64 `json:"batteryJ"`
}

// PaperEnergy is the spec's calibration of Equation 1 against the paper's Galaxy Nexus
// (Table 2, Table 3, Fig. 4): every coefficient's default.
var PaperEnergy = Energy{
	IdleBluetoothJoulesPerDay: 188,
	EpochChangeMillijoules:    568,
	DiscoveryMillijoules:      1363,
	RecognitionMillijoules:    20.2,
	AnswerMillijoules:         8.5,
	BatteryJoules:             23328,
}

// Bounds of the coefficients (the EncounterSimulation CRD's CEL rules say the same): each is
// positive; the per-operation charges are at most MaxEnergyMillijoules (100 J, twice the
// paper's DH+PSI discovery), idle at most MaxIdleJoulesPerDay (≈ 1.2 W), the battery within
// [MinBatteryJoules, MaxBatteryJoules] (1 J … 1 MJ ≈ 278 Wh).
const (
	MaxEnergyMillijoules = 100000
	MaxIdleJoulesPerDay  = 100000
	MinBatteryJoules     = 1
	MaxBatteryJoules     = 1000000
)

// WithDefaults fills each zero coefficient with the paper's.
func (e Energy) WithDefaults() Energy {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&e.IdleBluetoothJoulesPerDay, PaperEnergy.IdleBluetoothJoulesPerDay)
	def(&e.EpochChangeMillijoules, PaperEnergy.EpochChangeMillijoules)
	def(&e.DiscoveryMillijoules, PaperEnergy.DiscoveryMillijoules)
	def(&e.RecognitionMillijoules, PaperEnergy.RecognitionMillijoules)
	def(&e.AnswerMillijoules, PaperEnergy.AnswerMillijoules)
	def(&e.BatteryJoules, PaperEnergy.BatteryJoules)
	return e
}

// EnergyField names a coefficient as `sddr simulate`'s flag and the CRD's field.
type EnergyField struct {
	Flag, Field, Unit string
	Min, Max          float64 // Min exclusive when 0
	Value             func(*Energy) *float64
}

// EnergyFields are the coefficients in Equation 1's order.
var EnergyFields = []EnergyField{
	{"idle-bt-joules-per-day", "idleBluetoothJoulesPerDay", "J/day", 0, MaxIdleJoulesPerDay, func(e *Energy) *float64 { return &e.IdleBluetoothJoulesPerDay }},
	{"epoch-change-mj", "epochChangeMillijoules", "mJ", 0, MaxEnergyMillijoules, func(e *Energy) *float64 { return &e.EpochChangeMillijoules }},
	{"discovery-mj", "discoveryMillijoules", "mJ", 0, MaxEnergyMillijoules, func(e *Energy) *float64 { return &e.DiscoveryMillijoules }},
	{"recognition-mj", "recognitionMillijoules", "mJ", 0, MaxEnergyMillijoules, func(e *Energy) *float64 { return &e.RecognitionMillijoules }},
	{"answer-mj", "answerMillijoules", "mJ", 0, MaxEnergyMillijoules, func(e *Energy) *float64 { return &e.AnswerMillijoules }},
	{"battery-joules", "batteryJoules", "J", MinBatteryJoules, MaxBatteryJoules, func(e *Energy) *float64 { return &e.BatteryJoules }},
}

// InRange reports whether v is a valid value of the coefficient.
func (f EnergyField) InRange(v float64) bool {
	if math.IsNaN(v) || v > f.Max {
		return false
	}
	if f.Min == 0 {
		return v > 0
	}
	return v >= f.Min
}

// Bounds describes the coefficient's valid range, e.g. "(0, 100000] mJ".
func (f EnergyField) Bounds() string {
	lo := "(0"
	if f.Min > 0 {
		lo = "[" + strconv.FormatFloat(f.Min, 'f', -1, 64)
	}
	return fmt.Sprintf("%s, %s] %s", lo, strconv.FormatFloat(f.Max, 'f', -1, 64), f.Unit)
}

// Validate checks every coefficient against its bounds, naming each bad one by its field.
func (e Energy) Validate() error {
	var errs []error
	for _, f := range EnergyFields {
		if v := *f.Value(&e); !f.InRange(v) {
			errs = append(errs, fmt.Errorf("energy.%s %v outside %s", f.Field, v, f.Bounds()))
		}
	}
	return errors.Join(errs...)
}

// Latency is how long friends took to be recognised.
type Latency struct {
	// Beacons[n] counts recognitions after n beacons of the friend's epoch key were processed
	// (the last bucket holds n ≥ len−1).
	Beacons []int64 `json:"beacons"`
	// Millis sums and maxes the time from the first beacon of the friend's key to recognition.
	MillisSum int64 `json:"msSum"`
	MillisMax int64 `json:"msMax"`
	// EpochsSum sums the number of the listener's epochs the recognition spanned (1: the same
	// local epoch as the first beacon).
	EpochsSum int64 `json:"epochsSum"`
}

// Result is one shard's result, or (after Merge) the whole simulation's.
type Result struct {
	Version  int    `json:"v"`
	RunID    string `json:"runId"`
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	// Shard is this shard's index, or −1 for a merged result.
	Shard  int `json:"shard"`
	Shards int `json:"shards"`
	// ShardsMerged counts the shards a merged result holds (1 for a shard's own).
	ShardsMerged int `json:"merged"`

	Devices         int64   `json:"devices"`      // in the whole simulation
	ShardDevices    int64   `json:"shardDevices"` // owned by the shard(s) in this result
	Hours           float64 `json:"hours"`
	IntervalSeconds float64 `json:"intervalS"`
	Friends         int     `json:"friends"`
	Steps           int64   `json:"steps"`
	// EpochSeconds and EpochJitterSeconds are the devices' epoch length and its uniform
	// jitter (0: none); RevokeFraction of the devices revoked one friend at RevokeAt of the
	// run (0: nobody). Zero in results of versions that did not report them.
	EpochSeconds       float64 `json:"epochS,omitempty"`
	EpochJitterSeconds float64 `json:"jitterS,omitempty"`
	RevokeFraction     float64 `json:"revokeFraction,omitempty"`
	RevokeAt           float64 `json:"revokeAt,omitempty"`

	// DeviceHours is simulated time summed over the devices of this result.
	DeviceHours float64 `json:"deviceHours"`
	// Awake counts device-steps simulated beacon by beacon (the rest are aggregated).
	AwakeDeviceSteps int64 `json:"awakeSteps"`

	Inquiries  int64 `json:"inquiries"`  // inquiries that had neighbours in range
	Responses  int64 `json:"responses"`  // beacons received and processed
	Dropped    int64 `json:"dropped"`    // beyond 255 new peers in one inquiry
	Encounters int64 `json:"encounters"` // (local epoch, remote key) pairs: key derivations
	EpochKeys  int64 `json:"epochKeys"`  // epochs started by the devices (X25519 key pairs)

	// FriendEncounters: a listener processed ≥ the recognition threshold of beacons from a
	// friend's key that advertises the listener's link. Recognitions of those; Missed = false
	// negatives (must be 0).
	FriendEncounters int64 `json:"friendEncounters"`
	Recognitions     int64 `json:"recognitions"`
	Missed           int64 `json:"missed"`
	// FalseRecognitions: a link reported Recognized for a device that is not its friend.
	FalseRecognitions int64 `json:"falseRecognitions"`
	// RevokedEncounters: same, for friends that revoked the listener before the beacons;
	// RevokedRecognitions of those (only Bloom false positives, P_fp^n).
	RevokedEncounters   int64 `json:"revokedEncounters"`
	RevokedRecognitions int64 `json:"revokedRecognitions"`
	// StrangerKeys: (listener, remote key) pairs with ≥ threshold beacons and no link between
	// them, the population FalseRecognitions come from.
	StrangerKeys int64 `json:"strangerKeys"`

	Latency Latency `json:"latency"`
	Classes []Class `json:"classes"`

	// Transport: adverts and bytes sent to other shards (0 with one shard).
	CrossAdverts int64 `json:"crossAdverts"`
	CrossBytes   int64 `json:"crossBytes"`

	// Energy is the model the joules were counted with; BatteryJoules is its battery.
	Energy        Energy  `json:"energy"`
	BatteryJoules float64 `json:"batteryJ"`
	CPUSeconds    float64 `json:"cpuS"`
	WallSeconds   float64 `json:"wallS"`
}

// Marshal is the compact JSON encoding, refused above MaxBytes.
func (r *Result) Marshal() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("contract: result is %d bytes, above %d", len(b), MaxBytes)
	}
	return b, nil
}

// Parse decodes and validates a result.
func Parse(b []byte) (*Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("contract: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// SimulatedDeviceHoursPerCPUSecond is the simulator's throughput.
func (r *Result) SimulatedDeviceHoursPerCPUSecond() float64 {
	if r.CPUSeconds <= 0 {
		return 0
	}
	return r.DeviceHours / r.CPUSeconds
}

// Validate checks a shard's or a merged result.
func (r *Result) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if r.Version != Version {
		bad("v = %d, want %d", r.Version, Version)
	}
	if r.Shards < 1 {
		bad("shards = %d < 1", r.Shards)
	}
	if r.Shard < -1 || r.Shard >= r.Shards {
		bad("shard = %d outside -1..%d", r.Shard, r.Shards-1)
	}
	if r.ShardsMerged < 1 || r.ShardsMerged > r.Shards {
		bad("merged = %d outside 1..%d", r.ShardsMerged, r.Shards)
	}
	if r.Devices < 1 || r.ShardDevices < 0 || r.ShardDevices > r.Devices {
		bad("devices %d / shard devices %d", r.Devices, r.ShardDevices)
	}
	if !(r.Hours > 0) || !(r.IntervalSeconds > 0) || r.Friends < 0 {
		bad("hours %v, interval %v s, friends %d must be positive", r.Hours, r.IntervalSeconds, r.Friends)
	}
	for name, v := range map[string]int64{
		"steps": r.Steps, "awakeSteps": r.AwakeDeviceSteps, "inquiries": r.Inquiries, "responses": r.Responses,
		"dropped": r.Dropped, "encounters": r.Encounters, "epochKeys": r.EpochKeys,
		"friendEncounters": r.FriendEncounters, "recognitions": r.Recognitions, "missed": r.Missed,
		"falseRecognitions": r.FalseRecognitions, "revokedEncounters": r.RevokedEncounters,
		"revokedRecognitions": r.RevokedRecognitions, "strangerKeys": r.StrangerKeys,
		"crossAdverts": r.CrossAdverts, "crossBytes": r.CrossBytes,
		"latency.msSum": r.Latency.MillisSum, "latency.msMax": r.Latency.MillisMax, "latency.epochsSum": r.Latency.EpochsSum,
	} {
		if v < 0 {
			bad("%s = %d < 0", name, v)
		}
	}
	if r.Recognitions+r.Missed != r.FriendEncounters {
		bad("recognitions %d + missed %d ≠ friend encounters %d", r.Recognitions, r.Missed, r.FriendEncounters)
	}
	if r.RevokedRecognitions > r.RevokedEncounters {
		bad("revoked recognitions %d > revoked encounters %d", r.RevokedRecognitions, r.RevokedEncounters)
	}
	var hist int64
	for _, n := range r.Latency.Beacons {
		if n < 0 {
			bad("latency.beacons has a negative count")
		}
		hist += n
	}
	if hist != r.Recognitions {
		bad("latency histogram holds %d recognitions, want %d", hist, r.Recognitions)
	}
	var devs int64
	for _, c := range r.Classes {
		if c.Name == "" || c.Devices < 0 || c.DeviceSeconds < 0 || c.Inquiries < 0 || c.Responses < 0 || c.Answers < 0 || c.Joules < 0 || math.IsNaN(c.Joules) {
			bad("class %q has a negative or missing field", c.Name)
		}
		devs += c.Devices
	}
	if devs != r.ShardDevices {
		bad("classes hold %d devices, want %d", devs, r.ShardDevices)
	}
	if !(r.BatteryJoules > 0) || r.CPUSeconds < 0 || r.WallSeconds < 0 || math.IsNaN(r.CPUSeconds) || math.IsNaN(r.WallSeconds) {
		bad("batteryJ %v, cpuS %v, wallS %v", r.BatteryJoules, r.CPUSeconds, r.WallSeconds)
	}
	if r.EpochSeconds < 0 || r.EpochJitterSeconds < 0 || !(r.RevokeFraction >= 0 && r.RevokeFraction <= 1) || !(r.RevokeAt >= 0 && r.RevokeAt < 1) {
		bad("epochS %v, jitterS %v, revokeFraction %v, revokeAt %v out of range", r.EpochSeconds, r.EpochJitterSeconds, r.RevokeFraction, r.RevokeAt)
	}
	if err := r.Energy.Validate(); err != nil {
		bad("%v", err)
	}
	if r.Energy.BatteryJoules != r.BatteryJoules {
		bad("batteryJ %v differs from energy.batteryJ %v", r.BatteryJoules, r.Energy.BatteryJoules)
	}
	return errors.Join(errs...)
}

// Merge combines shard results of one run (each shard exactly once) into the simulation's
// result: counts and joules add, maxima take the maximum, CPU seconds add and wall seconds
// take the slowest shard. It refuses results of different runs or settings, a shard given
// twice and invalid inputs.
func Merge(parts ...*Result) (*Result, error) {
	if len(parts) == 0 {
		return nil, errors.New("contract: nothing to merge")
	}
	for i, p := range parts {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("contract: part %d: %w", i, err)
		}
	}
	first := parts[0]
	out := &Result{
		Version: Version, RunID: first.RunID, Scenario: first.Scenario, Seed: first.Seed, Shard: -1,
		Shards: first.Shards, Devices: first.Devices, Hours: first.Hours, IntervalSeconds: first.IntervalSeconds,
		Friends: first.Friends, Steps: first.Steps, Energy: first.Energy, BatteryJoules: first.BatteryJoules,
		EpochSeconds: first.EpochSeconds, EpochJitterSeconds: first.EpochJitterSeconds,
		RevokeFraction: first.RevokeFraction, RevokeAt: first.RevokeAt,
	}
	seen := map[int]bool{}
	classes := map[string]*Class{}
	var order []string
	for i, p := range parts {
		if p.RunID != first.RunID || p.Scenario != first.Scenario || p.Seed != first.Seed || p.Shards != first.Shards ||
			p.Devices != first.Devices || p.Hours != first.Hours || p.IntervalSeconds != first.IntervalSeconds ||
			p.Friends != first.Friends || p.Steps != first.Steps || p.BatteryJoules != first.BatteryJoules || p.Energy != first.Energy ||
			p.EpochSeconds != first.EpochSeconds || p.EpochJitterSeconds != first.EpochJitterSeconds ||
			p.RevokeFraction != first.RevokeFraction || p.RevokeAt != first.RevokeAt {
			return nil, fmt.Errorf("contract: part %d belongs to another run or settings", i)
		}
		if p.Shard >= 0 {
			if seen[p.Shard] {
				return nil, fmt.Errorf("contract: shard %d given twice", p.Shard)
			}
			seen[p.Shard] = true
		}
		out.ShardsMerged += p.ShardsMerged
		out.ShardDevices += p.ShardDevices
		out.DeviceHours += p.DeviceHours
		out.AwakeDeviceSteps += p.AwakeDeviceSteps
		out.Inquiries += p.Inquiries
		out.Responses += p.Responses
		out.Dropped += p.Dropped
		out.Encounters += p.Encounters
		out.EpochKeys += p.EpochKeys
		out.FriendEncounters += p.FriendEncounters
		out.Recognitions += p.Recognitions
		out.Missed += p.Missed
		out.FalseRecognitions += p.FalseRecognitions
		out.RevokedEncounters += p.RevokedEncounters
		out.RevokedRecognitions += p.RevokedRecognitions
		out.StrangerKeys += p.StrangerKeys
		out.CrossAdverts += p.CrossAdverts
		out.CrossBytes += p.CrossBytes
		out.CPUSeconds += p.CPUSeconds
		out.WallSeconds = math.Max(out.WallSeconds, p.WallSeconds)
		l := &out.Latency
		for len(l.Beacons) < len(p.Latency.Beacons) {
			l.Beacons = append(l.Beacons, 0)
		}
		for n, c := range p.Latency.Beacons {
			l.Beacons[n] += c
		}
		l.MillisSum += p.Latency.MillisSum
		l.MillisMax = max(l.MillisMax, p.Latency.MillisMax)
		l.EpochsSum += p.Latency.EpochsSum
		for _, c := range p.Classes {
			m := classes[c.Name]
			if m == nil {
				m = &Class{Name: c.Name}
				classes[c.Name] = m
				order = append(order, c.Name)
			}
			m.Devices += c.Devices
			m.DeviceSeconds += c.DeviceSeconds
			m.Inquiries += c.Inquiries
			m.Responses += c.Responses
			m.Answers += c.Answers
			m.Joules += c.Joules
		}
	}
	if out.ShardsMerged > out.Shards {
		return nil, fmt.Errorf("contract: %d shards merged, the run has %d", out.ShardsMerged, out.Shards)
	}
	if out.ShardsMerged == 1 && len(parts) == 1 {
		out.Shard = first.Shard
	}
	for _, n := range order {
		c := classes[n]
		c.BatteryPercentPerDay = BatteryPercentPerDay(c.Joules, c.DeviceSeconds, out.BatteryJoules)
		out.Classes = append(out.Classes, *c)
	}
	return out, nil
}

// Complete reports whether a merged result holds every shard of its run.
func (r *Result) Complete() bool { return r.ShardsMerged == r.Shards && r.ShardDevices == r.Devices }

// BatteryPercentPerDay is joules spent over deviceSeconds, per device-day, as a share of
// a battery of batteryJoules.
func BatteryPercentPerDay(joules float64, deviceSeconds int64, batteryJoules float64) float64 {
	if deviceSeconds <= 0 || batteryJoules <= 0 {
		return 0
	}
	return 100 * joules / (float64(deviceSeconds) / 86400) / batteryJoules
}

// Class returns the named class (nil if absent).
func (r *Result) Class(name string) *Class {
	for i := range r.Classes {
		if r.Classes[i].Name == name {
			return &r.Classes[i]
		}
	}
	return nil
}
