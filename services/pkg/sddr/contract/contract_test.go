package contract

import (
	"math"
	"strings"
	"testing"
)

func shard(i, shards int, devices int64) *Result {
	return &Result{
		Version: Version, RunID: "r", Scenario: "city", Seed: 1, Shard: i, Shards: shards, ShardsMerged: 1,
		Devices: devices * int64(shards), ShardDevices: devices, Hours: 24, IntervalSeconds: 60, Friends: 5, Steps: 10,
		DeviceHours: float64(devices) * 24, Inquiries: 10, Responses: 20, Encounters: 5, FriendEncounters: 3,
		Recognitions: 3, Latency: Latency{Beacons: []int64{0, 0, 0, 3}, MillisSum: 1000, MillisMax: 600, EpochsSum: 3},
		Classes: []Class{
			{Name: "commuter", Devices: devices - 1, DeviceSeconds: (devices - 1) * 86400, Inquiries: 1440 * (devices - 1), Joules: 2205 * float64(devices-1)},
			{Name: "fan", Devices: 1, DeviceSeconds: 86400, Inquiries: 1440, Joules: 2412},
		},
		Energy: PaperEnergy, BatteryJoules: 23328, CPUSeconds: 2, WallSeconds: 3,
	}
}

// TestResultFitsTerminationMessage: a result with every field and a full latency histogram
// and class list stays far below the 4 KiB termination message.
func TestResultFitsTerminationMessage(t *testing.T) {
	r := shard(0, 1, 100000)
	r.RunID = strings.Repeat("x", 128)
	r.Latency.Beacons = make([]int64, 8)
	r.Latency.Beacons[3] = r.Recognitions
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 2048 {
		t.Fatalf("%d bytes: %s", len(b), b)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Devices != r.Devices || back.Classes[1].Joules != 2412 {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestMerge(t *testing.T) {
	a, b := shard(0, 2, 50), shard(1, 2, 50)
	b.Latency.MillisMax, b.WallSeconds = 900, 7
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete() || m.Shard != -1 || m.ShardDevices != 100 || m.Recognitions != 6 || m.Latency.Beacons[3] != 6 ||
		m.Latency.MillisMax != 900 || m.CPUSeconds != 4 || m.WallSeconds != 7 || m.DeviceHours != 2400 {
		t.Fatalf("merged: %+v", m)
	}
	c := m.Class("fan")
	if c.Devices != 2 || c.Joules != 4824 {
		t.Fatalf("fan class: %+v", c)
	}
	if got := c.BatteryPercentPerDay; got < 10.33 || got > 10.35 {
		t.Fatalf("fan battery %.3f %%/day, want 10.34 (2412 J/day)", got)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	half, err := Merge(a)
	if err != nil || half.Complete() {
		t.Fatalf("one of two shards: complete=%v err=%v", half != nil && half.Complete(), err)
	}
}

func TestMergeRefuses(t *testing.T) {
	a := shard(0, 2, 50)
	if _, err := Merge(a, shard(0, 2, 50)); err == nil {
		t.Fatal("shard 0 twice accepted")
	}
	other := shard(1, 2, 50)
	other.Seed = 2
	if _, err := Merge(a, other); err == nil {
		t.Fatal("shards of another seed merged")
	}
	bad := shard(1, 2, 50)
	bad.Missed = 1
	if _, err := Merge(a, bad); err == nil {
		t.Fatal("an inconsistent shard merged")
	}
	if _, err := Merge(); err == nil {
		t.Fatal("nothing merged")
	}
	cheaper := shard(1, 2, 50)
	cheaper.Energy.DiscoveryMillijoules = 1000
	if _, err := Merge(a, cheaper); err == nil {
		t.Fatal("shards of another energy model merged")
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Result){
		"version":         func(r *Result) { r.Version = 2 },
		"shard":           func(r *Result) { r.Shard = 2 },
		"devices":         func(r *Result) { r.ShardDevices = r.Devices + 1 },
		"negative":        func(r *Result) { r.Encounters = -1 },
		"histogram":       func(r *Result) { r.Latency.Beacons[3] = 1 },
		"classes":         func(r *Result) { r.Classes = r.Classes[:1] },
		"revoked":         func(r *Result) { r.RevokedRecognitions = 1 },
		"battery":         func(r *Result) { r.BatteryJoules = 0 },
		"no energy":       func(r *Result) { r.Energy = Energy{} },
		"energy battery":  func(r *Result) { r.Energy.BatteryJoules = 1000 },
		"energy negative": func(r *Result) { r.Energy.AnswerMillijoules = -1 },
	} {
		r := shard(0, 2, 50)
		mut(r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse([]byte(`{"v":1`)); err == nil {
		t.Fatal("truncated JSON parsed")
	}
}

// TestEnergyBounds: every coefficient must be positive and within its bound; the paper's are;
// WithDefaults fills only the zero ones; an error names the field.
func TestEnergyBounds(t *testing.T) {
	if err := PaperEnergy.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Energy{DiscoveryMillijoules: 900}).WithDefaults(); got.DiscoveryMillijoules != 900 || got.BatteryJoules != PaperEnergy.BatteryJoules ||
		got.RecognitionMillijoules != PaperEnergy.RecognitionMillijoules {
		t.Fatalf("defaults: %+v", got)
	}
	for _, f := range EnergyFields {
		for _, v := range []float64{0, -1, f.Max * 1.001, math.NaN(), math.Inf(1)} {
			e := PaperEnergy
			*f.Value(&e) = v
			err := e.Validate()
			if err == nil || !strings.Contains(err.Error(), "energy."+f.Field) {
				t.Errorf("%s = %v: %v", f.Field, v, err)
			}
		}
		e := PaperEnergy
		*f.Value(&e) = f.Max
		if err := e.Validate(); err != nil {
			t.Errorf("%s at its maximum: %v", f.Field, err)
		}
	}
}
