package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// comparable strips what legitimately differs between a sharded and a one-shard run: the
// shard bookkeeping, the transport counters, CPU and wall time, and float rounding of joules.
func comparable(t *testing.T, r *contract.Result) contract.Result {
	t.Helper()
	c := *r
	c.Shard, c.Shards, c.ShardsMerged = 0, 0, 0
	c.CrossAdverts, c.CrossBytes, c.CPUSeconds, c.WallSeconds = 0, 0, 0, 0
	c.DeviceHours = math.Round(c.DeviceHours*1e6) / 1e6
	c.Classes = append([]contract.Class(nil), r.Classes...)
	for i := range c.Classes {
		// Joules add in another order when shards merge: equal up to rounding.
		if j, k := c.Classes[i].Joules, comparableJoules(r, c.Classes[i].Name); math.Abs(j-k) > 1e-9*j {
			t.Fatalf("class %s: %v J", c.Classes[i].Name, j)
		}
		c.Classes[i].Joules = math.Round(c.Classes[i].Joules)
		c.Classes[i].BatteryPercentPerDay = math.Round(c.Classes[i].BatteryPercentPerDay*1e6) / 1e6
	}
	return c
}

// comparableJoules recomputes a class's joules from its integer counts (Equation 1).
func comparableJoules(r *contract.Result, name string) float64 {
	cl := r.Class(name)
	m := EnergyModel(r.Energy)
	ds := float64(cl.DeviceSeconds)
	return ds/86400*m.IdleBTJoulesPerDay + ds/m.Epoch.Seconds()*m.EpochChangeJoules +
		float64(cl.Inquiries)*m.DiscoveryJoules + float64(cl.Responses)*m.PerDeviceJoules + float64(cl.Answers)*m.ResponderJoules
}

func cityConfig() Config {
	return Config{RunID: "t1", Scenario: ScenarioCity, Devices: 700, Duration: 24 * time.Hour, Seed: 42,
		Interval: time.Minute, Friends: 3}
}

// TestShardedOverNATSEqualsOneShard: two shards, each with its own connection to a real
// nats-server, exchange the adverts of devices meeting across the shard boundary and their
// merged result equals the one-shard run of the same seed, count for count.
func TestShardedOverNATSEqualsOneShard(t *testing.T) {
	cfg := cityConfig()
	one, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := testenv.StartNATS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	parts := make([]*contract.Result, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		nc := n.Connect(t)
		tr, err := NewNATS(nc, cfg.RunID, i, 2)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer tr.Close()
			c := cfg
			c.Shards, c.Shard = 2, i
			var err error
			parts[i], err = Run(ctx, c, tr)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	merged, err := contract.Merge(parts...)
	if err != nil {
		t.Fatal(err)
	}
	if !merged.Complete() {
		t.Fatalf("merged result incomplete: %+v", merged)
	}
	if merged.CrossAdverts == 0 {
		t.Fatal("no advert crossed the shard boundary: the test would not exercise NATS")
	}
	if one.Recognitions == 0 || one.Encounters == 0 {
		t.Fatalf("the city produced no encounters or recognitions: %+v", one)
	}
	if a, b := comparable(t, one), comparable(t, merged); !reflect.DeepEqual(a, b) {
		t.Fatalf("sharded result differs from one shard:\none:    %+v\nshards: %+v", a, b)
	}
	t.Logf("city: %d encounters, %d recognitions, %d adverts (%d bytes) over NATS", one.Encounters, one.Recognitions, merged.CrossAdverts, merged.CrossBytes)
}

// TestShardCountDoesNotChangeResults: 1, 3 and 4 in-process shards of the crowd scenario
// (cells reshuffled every interval, so most contacts cross shards) agree.
func TestShardCountDoesNotChangeResults(t *testing.T) {
	cfg := Config{RunID: "t2", Scenario: ScenarioCrowd, Devices: 150, Duration: 5 * time.Minute, Seed: 7, Interval: time.Minute, Friends: 2}
	one, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, shards := range []int{3, 4} {
		c := cfg
		c.Shards = shards
		r, err := RunLocal(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if r.CrossAdverts == 0 {
			t.Fatalf("%d shards: nothing crossed", shards)
		}
		if a, b := comparable(t, one), comparable(t, r); !reflect.DeepEqual(a, b) {
			t.Fatalf("%d shards differ from one:\none: %+v\nn:   %+v", shards, a, b)
		}
	}
}

// TestFriendsRecogniseStrangersDontRevokedStop: in fixed groups of 6 holding two cliques of
// 3 friends, every friend encounter with enough beacons is recognised (no false negatives,
// INV-3), strangers are recognised only at the Bloom false-positive rate P_fp^n per listen id
// (here ≤ a few), and friends that revoked the listener (RevokeNow halfway) are no longer
// recognised.
func TestFriendsRecogniseStrangersDontRevokedStop(t *testing.T) {
	cfg := Config{RunID: "t3", Scenario: ScenarioGroups, Devices: 120, GroupSize: 6, Duration: 3 * time.Hour, Seed: 3,
		Interval: time.Minute, Friends: 2, RevokeFraction: 0.5}
	r, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.FriendEncounters == 0 || r.Recognitions != r.FriendEncounters || r.Missed != 0 {
		t.Fatalf("friends: %d encounters, %d recognised, %d missed", r.FriendEncounters, r.Recognitions, r.Missed)
	}
	if r.StrangerKeys == 0 {
		t.Fatal("no stranger met anyone: the test has no power")
	}
	pfp := sddr.BloomParams.FalsePositiveRate()
	// Every listen id of a stranger's key, and every other listen id of a friend's key, matches
	// three beacons by chance with probability P_fp³.
	keys := float64(r.StrangerKeys)*float64(cfg.Friends) + float64(r.FriendEncounters+r.RevokedEncounters)*float64(cfg.Friends-1)
	expect := keys * math.Pow(pfp, 3)
	if bound := expect + 5*math.Sqrt(expect) + 2; float64(r.FalseRecognitions) > bound {
		t.Fatalf("%d false recognitions among %d stranger keys, expected %.2f (bound %.1f)", r.FalseRecognitions, r.StrangerKeys, expect, bound)
	}
	if r.RevokedEncounters == 0 {
		t.Fatal("no revoked friend met its revoker afterwards: the test has no power")
	}
	if r.RevokedRecognitions != 0 {
		t.Fatalf("%d of %d revoked encounters still recognised", r.RevokedRecognitions, r.RevokedEncounters)
	}
	if r.Latency.Beacons[3] != r.Recognitions {
		t.Fatalf("recognition after other than 3 beacons at |LS| = 2: %v", r.Latency.Beacons)
	}
	t.Logf("%d friend encounters all recognised, mean latency %.0f s; %d false among %d stranger keys (expected %.2f); %d revoked encounters, none recognised",
		r.FriendEncounters, float64(r.Latency.MillisSum)/float64(r.Recognitions)/1000, r.FalseRecognitions, r.StrangerKeys, expect, r.RevokedEncounters)
}

// TestEnergyFollowsEquation1: with every neighbour detected (p_det = 1) a device in a fixed
// group of d+1 receives d responses per inquiry and answers d inquiries, so the simulated
// battery use is Equation 1 at d (spec §5.5), here d = 5 at 60 s (10.34 %/day).
func TestEnergyFollowsEquation1(t *testing.T) {
	cfg := Config{RunID: "t4", Scenario: ScenarioGroups, Devices: 12, GroupSize: 6, Duration: 2 * time.Hour, Seed: 5,
		Interval: time.Minute, Friends: 1, PDet: 1, RevokeFraction: -1}
	r, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Classes[0].BatteryPercentPerDay
	want := sddr.PaperEnergyModel.BatteryPercentPerDay(5, time.Minute)
	if math.Abs(got-want)/want > 0.01 {
		t.Fatalf("simulated %.3f %%/day, Equation 1 gives %.3f", got, want)
	}
}

// TestCrowdBoundsNewPeersPerInquiry: a crowd cell of 300 devices; a device's first inquiry
// finds 299 new ones and the engine keeps 255 (§7 item 20), dropping the rest.
func TestCrowdBoundsNewPeersPerInquiry(t *testing.T) {
	cfg := Config{RunID: "t5", Scenario: ScenarioCrowd, Devices: 300, Duration: 2 * time.Minute, Seed: 9, Interval: time.Minute, Friends: 1, PDet: 1}
	r, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Encounters > 255*r.Inquiries {
		t.Fatalf("%d encounters in %d inquiries: above 255 new per inquiry", r.Encounters, r.Inquiries)
	}
	if r.Dropped < 300*(299-255) {
		t.Fatalf("%d responses dropped, want at least %d (each first inquiry finds 299 new devices)", r.Dropped, 300*(299-255))
	}
}

// TestDeterministic: the same seed gives the same result; another seed another one.
func TestDeterministic(t *testing.T) {
	cfg := Config{RunID: "t6", Scenario: ScenarioGroups, Devices: 30, Duration: 30 * time.Minute, Seed: 11, Interval: time.Minute, Friends: 2}
	a, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(comparable(t, a), comparable(t, b)) {
		t.Fatal("two runs of one seed differ")
	}
	cfg.Seed++
	c, err := RunLocal(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(comparable(t, a), comparable(t, c)) {
		t.Fatal("another seed gave the same result")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Devices: 1, Duration: time.Hour, Interval: time.Minute},
		{Devices: 10, Duration: time.Second, Interval: time.Minute},
		{Devices: 10, Duration: time.Hour, Interval: 10 * time.Second},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Friends: 300},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Shards: 2, Shard: 2},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Scenario: "moon"},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Energy: contract.Energy{DiscoveryMillijoules: -1}},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Energy: contract.Energy{BatteryJoules: 2e6}},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Epoch: 30 * time.Second},
		{Devices: 10, Duration: time.Hour, Interval: 2 * time.Minute, Epoch: time.Minute},
		{Devices: 10, Duration: time.Hour, Interval: 23 * time.Second, Epoch: 2 * time.Hour},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Epoch: 90 * time.Second, EpochJitter: 91 * time.Second},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, Epoch: 90*time.Second + 500*time.Millisecond},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, RevokeFraction: 1.5},
		{Devices: 10, Duration: time.Hour, Interval: time.Minute, RevokeAt: 1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	ok := Config{Devices: 10, Duration: time.Hour, Interval: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerOf(t *testing.T) {
	for _, n := range []int{7, 100, 1001} {
		for _, shards := range []int{1, 2, 3, 7} {
			for j := range shards {
				lo, hi := ShardRange(n, shards, j)
				for d := lo; d < hi; d++ {
					if got := ownerOf(d, n, shards); got != j {
						t.Fatalf("ownerOf(%d, %d, %d) = %d, want %d", d, n, shards, got, j)
					}
				}
			}
		}
	}
}

// TestNATSRefusesBadRunID: the run id becomes a subject token.
func TestNATSRefusesBadRunID(t *testing.T) {
	var nc *nats.Conn
	if _, err := NewNATS(nc, "a.b", 0, 2); err == nil {
		t.Fatal("a run id with a dot was accepted")
	}
}

// energyGroups is a fixed group of d+1 = 6 devices, every neighbour detected (p_det = 1): each
// inquiry gets d = 5 responses and each device answers d inquiries an interval, Equation 1's
// setting of Table 3.
func energyGroups(interval time.Duration, e contract.Energy) Config {
	return Config{RunID: "energy", Scenario: ScenarioGroups, Devices: 12, GroupSize: 6, Duration: 2 * time.Hour, Seed: 5,
		Interval: interval, Friends: 1, PDet: 1, RevokeFraction: -1, Energy: e}
}

// equation1 is Equation 1 over a class's counts with the coefficients e, in joules.
func equation1(cl *contract.Class, e contract.Energy) float64 {
	ds := float64(cl.DeviceSeconds)
	return ds/86400*e.IdleBluetoothJoulesPerDay + ds/sddr.DefaultEpoch.Seconds()*e.EpochChangeMillijoules/1000 +
		(float64(cl.Inquiries)*e.DiscoveryMillijoules+float64(cl.Responses)*e.RecognitionMillijoules+float64(cl.Answers)*e.AnswerMillijoules)/1000
}

// countsOnly strips a result of everything the energy model decides.
func countsOnly(t *testing.T, r *contract.Result) contract.Result {
	c := comparable(t, r)
	c.RunID, c.Energy, c.BatteryJoules = "", contract.Energy{}, 0
	for i := range c.Classes {
		c.Classes[i].Joules, c.Classes[i].BatteryPercentPerDay = 0, 0
	}
	return c
}

// TestEnergyCoefficientsChangeBatteryAsEquation1 (property): for random coefficients of
// Equation 1 (each the paper's times a factor in [1/5, 5]), the simulated protocol is the
// same — every count equal to the paper's run — and only the energy changes, as Equation 1
// says: each class's joules are Equation 1 over its counts with those coefficients, battery
// %/day is joules per device-day over the battery, and the device's figure is Equation 1's
// closed form at d = 5 within 1 %. Changing one coefficient alone moves battery %/day by
// Equation 1's partial difference (the battery capacity divides it).
func TestEnergyCoefficientsChangeBatteryAsEquation1(t *testing.T) {
	base, err := RunLocal(t.Context(), energyGroups(time.Minute, contract.Energy{}))
	if err != nil {
		t.Fatal(err)
	}
	if base.Energy != contract.PaperEnergy {
		t.Fatalf("a zero Config.Energy ran with %+v, want the paper's", base.Energy)
	}
	cl := base.Classes[0]
	if cl.Inquiries == 0 || cl.Responses == 0 || cl.Answers == 0 {
		t.Fatalf("class %+v: a term of Equation 1 has no count, the test has no power", cl)
	}
	rng := rand.New(rand.NewPCG(18, 55))
	factor := func() float64 { return math.Exp((2*rng.Float64() - 1) * math.Log(5)) }
	check := func(name string, e contract.Energy) *contract.Result {
		t.Helper()
		r, err := RunLocal(t.Context(), energyGroups(time.Minute, e))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Energy != e || r.BatteryJoules != e.BatteryJoules {
			t.Fatalf("%s: the result reports the model %+v, ran with %+v", name, r.Energy, e)
		}
		if !reflect.DeepEqual(countsOnly(t, base), countsOnly(t, r)) {
			t.Fatalf("%s: the energy model changed the simulated protocol", name)
		}
		for i := range r.Classes {
			c := &r.Classes[i]
			if want := equation1(c, e); math.Abs(c.Joules-want) > 1e-9*want {
				t.Fatalf("%s: class %s %v J, Equation 1 over its counts %v J", name, c.Name, c.Joules, want)
			}
			if want := 100 * c.Joules / (float64(c.DeviceSeconds) / 86400) / e.BatteryJoules; math.Abs(c.BatteryPercentPerDay-want) > 1e-9*want {
				t.Fatalf("%s: class %s %v %%/day, want %v", name, c.Name, c.BatteryPercentPerDay, want)
			}
		}
		got, want := r.Classes[0].BatteryPercentPerDay, EnergyModel(e).BatteryPercentPerDay(5, time.Minute)
		if math.Abs(got-want)/want > 0.01 {
			t.Fatalf("%s: simulated %.3f %%/day, Equation 1 at d = 5 gives %.3f", name, got, want)
		}
		return r
	}
	for trial := range 4 {
		e := contract.PaperEnergy
		for _, f := range contract.EnergyFields {
			*f.Value(&e) *= factor()
		}
		check(fmt.Sprintf("random model %d", trial), e)
	}
	b0 := base.Classes[0].BatteryPercentPerDay
	days := float64(cl.DeviceSeconds) / 86400
	for _, f := range contract.EnergyFields {
		k := factor()
		if math.Abs(k-1) < 0.1 {
			k = 2
		}
		e := contract.PaperEnergy
		*f.Value(&e) *= k
		r := check(f.Field+" alone", e)
		got := r.Classes[0].BatteryPercentPerDay - b0
		var want float64
		if f.Field == "batteryJoules" {
			want = b0/k - b0 // the same joules over a battery k times as large
		} else {
			// Equation 1's partial difference: the coefficient's change times its count.
			c := contract.Class{Name: cl.Name, DeviceSeconds: cl.DeviceSeconds}
			one := contract.Energy{}
			*f.Value(&one) = *f.Value(&e) - *f.Value(&contract.PaperEnergy)
			switch f.Field {
			case "discoveryMillijoules":
				c.Inquiries = cl.Inquiries
			case "recognitionMillijoules":
				c.Responses = cl.Responses
			case "answerMillijoules":
				c.Answers = cl.Answers
			}
			want = 100 * equation1(&c, one) / days / e.BatteryJoules
		}
		if math.Abs(got-want) > 1e-9*math.Abs(want) || want == 0 {
			t.Errorf("%s × %.3f: battery moved %+.6f %%/day, Equation 1 says %+.6f", f.Field, k, got, want)
		}
		// And the closed form at d = 5 moves the same way, within 1 % of the whole figure.
		closed := EnergyModel(e).BatteryPercentPerDay(5, time.Minute) - EnergyModel(contract.PaperEnergy).BatteryPercentPerDay(5, time.Minute)
		if math.Abs(got-closed) > 0.01*b0 {
			t.Errorf("%s × %.3f: battery moved %+.4f %%/day, the closed form %+.4f", f.Field, k, got, closed)
		}
		t.Logf("%s × %.3f: %.3f → %.3f %%/day (Equation 1: %+.4f)", f.Field, k, b0, r.Classes[0].BatteryPercentPerDay, want)
	}
}

// TestDefaultEnergyReproducesTable3: with no coefficient given, the simulator's model is the
// paper's calibration (sddr.PaperEnergyModel, TestEnergyModelReproducesTable3) and a device
// among 5 others simulated for two hours spends Table 3's SDDR battery %/day within 5 % at 60
// and 120 s.
func TestDefaultEnergyReproducesTable3(t *testing.T) {
	m, p := EnergyModel(contract.Energy{}), sddr.PaperEnergyModel
	for name, v := range map[string][2]float64{
		"idle": {m.IdleBTJoulesPerDay, p.IdleBTJoulesPerDay}, "epoch": {m.EpochChangeJoules, p.EpochChangeJoules},
		"discovery": {m.DiscoveryJoules, p.DiscoveryJoules}, "per device": {m.PerDeviceJoules, p.PerDeviceJoules},
		"responder": {m.ResponderJoules, p.ResponderJoules}, "battery": {m.BatteryJoules, p.BatteryJoules},
	} {
		if math.Abs(v[0]-v[1]) > 1e-12*v[1] {
			t.Errorf("%s: default %v, the paper's calibration %v", name, v[0], v[1])
		}
	}
	if m.Epoch != p.Epoch {
		t.Errorf("epoch %v, the paper's %v", m.Epoch, p.Epoch)
	}
	for _, row := range []struct {
		interval time.Duration
		percent  float64 // Table 3, SDDR over BT2.1
	}{{time.Minute, 10.76}, {2 * time.Minute, 5.57}} {
		r, err := RunLocal(t.Context(), energyGroups(row.interval, contract.Energy{}))
		if err != nil {
			t.Fatal(err)
		}
		got := r.Classes[0].BatteryPercentPerDay
		if math.Abs(got-row.percent)/row.percent > 0.05 {
			t.Errorf("%v: simulated %.2f %%/day, Table 3 %.2f", row.interval, got, row.percent)
		}
		t.Logf("%v: simulated %.2f %%/day, Table 3 %.2f", row.interval, got, row.percent)
	}
}

// TestEpochLengthChangesRotationsAndRecognition: the epoch length is a run's setting, and the
// simulated protocol follows it as the model says. Without jitter an epoch of E holds
// ceil(E/I) beacons, so over a duration D a device starts ≈ D/E + 1 epoch keys; a friend is
// recognised after 3 beacons of one key (|LS| = 2, P_fp³ ≤ 10⁻³), i.e. 2 intervals after its
// first beacon whatever E, once per key heard whole, so recognitions scale as 1/E; and an
// epoch of fewer than 3 intervals never lets a friend be recognised (its key rotates first).
func TestEpochLengthChangesRotationsAndRecognition(t *testing.T) {
	const devices, dur, ival = 12, 4 * time.Hour, time.Minute
	run := func(epoch time.Duration) *contract.Result {
		t.Helper()
		cfg := Config{RunID: "epoch", Scenario: ScenarioGroups, Devices: devices, GroupSize: 6, Duration: dur, Seed: 21,
			Interval: ival, Friends: 2, PDet: 1, RevokeFraction: -1, Epoch: epoch, EpochJitter: -1}
		r, err := RunLocal(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.EpochSeconds != epoch.Seconds() || r.EpochJitterSeconds != 0 || r.RevokeFraction != 0 {
			t.Fatalf("result reports epoch %v s, jitter %v s, revoke fraction %v", r.EpochSeconds, r.EpochJitterSeconds, r.RevokeFraction)
		}
		keys := float64(r.EpochKeys) / devices
		if want := dur.Seconds()/epoch.Seconds() + 1; math.Abs(keys-want) > 1.5 {
			t.Fatalf("epoch %v: %.2f epoch keys per device, the model says %.1f", epoch, keys, want)
		}
		return r
	}
	long, short, tooShort := run(15*time.Minute), run(5*time.Minute), run(2*time.Minute)
	for _, r := range []*contract.Result{long, short} {
		if r.Recognitions == 0 || r.Missed != 0 || r.Latency.Beacons[3] != r.Recognitions {
			t.Fatalf("epoch %v s: %d friend encounters, %d recognised (%v by beacons), %d missed",
				r.EpochSeconds, r.FriendEncounters, r.Recognitions, r.Latency.Beacons, r.Missed)
		}
		mean := time.Duration(r.Latency.MillisSum/r.Recognitions) * time.Millisecond
		if d := mean - 2*ival; d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("epoch %v s: mean latency %v, the model says 2 intervals (%v)", r.EpochSeconds, mean, 2*ival)
		}
	}
	if ratio := float64(short.Recognitions) / float64(long.Recognitions); ratio < 2.5 || ratio > 3.5 {
		t.Fatalf("recognitions %d at 5 min vs %d at 15 min: ratio %.2f, the model says ≈ 3", short.Recognitions, long.Recognitions, ratio)
	}
	if tooShort.Recognitions != 0 || tooShort.FriendEncounters != 0 {
		t.Fatalf("2-beacon epochs: %d friend encounters, %d recognitions; no key lasts the 3 beacons recognition needs",
			tooShort.FriendEncounters, tooShort.Recognitions)
	}
	t.Logf("epoch keys per device %.1f / %.1f / %.1f; recognitions %d (15 min) vs %d (5 min), 0 at 2 min",
		float64(long.EpochKeys)/devices, float64(short.EpochKeys)/devices, float64(tooShort.EpochKeys)/devices, long.Recognitions, short.Recognitions)
}

// TestRevocationSettings: the share of revoking devices and the time are a run's settings.
func TestRevocationSettings(t *testing.T) {
	base := Config{RunID: "rev", Scenario: ScenarioGroups, Devices: 60, GroupSize: 6, Duration: 2 * time.Hour, Seed: 4,
		Interval: time.Minute, Friends: 2}
	none := base
	none.RevokeFraction = -1
	all := base
	all.RevokeFraction, all.RevokeAt = 1, 0.25
	rn, err := RunLocal(t.Context(), none)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := RunLocal(t.Context(), all)
	if err != nil {
		t.Fatal(err)
	}
	if rn.RevokedEncounters != 0 || rn.RevokeFraction != 0 {
		t.Fatalf("nobody revokes: %d revoked encounters (fraction %v)", rn.RevokedEncounters, rn.RevokeFraction)
	}
	if ra.RevokedEncounters == 0 || ra.RevokedRecognitions != 0 || ra.RevokeFraction != 1 || ra.RevokeAt != 0.25 {
		t.Fatalf("everybody revokes at 1/4: %d revoked encounters, %d recognised, reported %v at %v",
			ra.RevokedEncounters, ra.RevokedRecognitions, ra.RevokeFraction, ra.RevokeAt)
	}
	if ra.Recognitions >= rn.Recognitions {
		t.Fatalf("revocations did not reduce recognitions: %d vs %d", ra.Recognitions, rn.Recognitions)
	}
}
