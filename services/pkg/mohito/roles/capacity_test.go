package roles

import (
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

var testClasses = &CapacityClasses{Percent: []int{100, 150, 200}, Hold: time.Minute, BurstRate: 0.1, LowerFakeRatio: 0.5}

// rounds feeds n rounds one second apart from at, each with n entries, valid real ones and
// burst excess s, and returns the changes and the time after them.
func feed(c *capacityClass, at time.Time, rounds, n, valid, s int) ([]CapacityChange, time.Time) {
	var out []CapacityChange
	for range rounds {
		at = at.Add(time.Second)
		if ch := c.observe(at, n, valid, s); ch.HasChanged {
			out = append(out, ch)
		}
	}
	return out, at
}

// TestCapacityClassRaisedByBursts: bursts above the rate raise the class one step per hold,
// never sooner, up to the last class; targets scale with it.
func TestCapacityClassRaisedByBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCapacityClass(testClasses, t0, 0)
	base := []mohito.TargetPolicy{{Base: 100, Width: 8}, {Base: 3, Width: 0}}
	if p := c.policy(base); p[0].Base != 100 || p[1].Base != 3 {
		t.Fatalf("class 100%%: %+v", p)
	}
	// Every round bursts: the first change waits for the hold (60 rounds at 1 s).
	chs, at := feed(c, t0, 59, 100, 100, 5)
	if len(chs) != 0 {
		t.Fatalf("changed before the hold: %+v", chs)
	}
	chs, at = feed(c, at, 1, 100, 100, 5)
	if len(chs) != 1 || !chs[0].Raised || chs[0].FromPercent != 100 || chs[0].ToPercent != 150 || chs[0].BurstRate != 1 || chs[0].Rounds != 60 {
		t.Fatalf("after a hold of bursts: %+v", chs)
	}
	if p := c.policy(base); p[0].Base != 150 || p[0].Width != 8 || p[1].Base != 5 { // ⌈3 × 1.5⌉
		t.Fatalf("class 150%%: %+v", p)
	}
	chs, _ = feed(c, at, 180, 100, 100, 5)
	if len(chs) != 1 || chs[0].ToPercent != 200 {
		t.Fatalf("three more holds of bursts: %+v (the last class is 200%%)", chs)
	}
	if idx, pct := c.class(); idx != 2 || pct != 200 {
		t.Fatalf("class %d (%d%%)", idx, pct)
	}
}

// TestCapacityClassLoweredWithHysteresis: a hold of rounds that are mostly fakes and never burst
// lowers the class; a single burst in the hold, or fakes below the ratio, keep it; rare bursts
// below the rate neither raise nor lower it.
func TestCapacityClassLoweredWithHysteresis(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCapacityClass(testClasses, t0, 2)
	chs, at := feed(c, t0, 59, 100, 40, 0)
	chs2, at := feed(c, at, 1, 100, 40, 1) // one burst in the window
	if len(chs)+len(chs2) != 0 {
		t.Fatalf("lowered although a round burst: %+v %+v", chs, chs2)
	}
	chs, at = feed(c, at, 60, 100, 60, 0) // 40 % fakes: below lowerFakeRatio 0.5
	if len(chs) != 0 {
		t.Fatalf("lowered with 40%% fakes: %+v", chs)
	}
	chs, at = feed(c, at, 60, 100, 40, 0) // 60 % fakes, no burst
	if len(chs) != 1 || chs[0].Raised || chs[0].FromPercent != 200 || chs[0].ToPercent != 150 || chs[0].MinFakeRatio != 0.6 {
		t.Fatalf("a hold of 60%% fakes: %+v", chs)
	}
	// 1 burst in 12 rounds (8 %) is under the 10 % rate: no change either way.
	var all []CapacityChange
	for range 10 {
		a, next := feed(c, at, 11, 100, 40, 0)
		b, next2 := feed(c, next, 1, 100, 100, 3)
		all, at = append(append(all, a...), b...), next2
	}
	if len(all) != 0 {
		t.Fatalf("bursts under the rate changed the class: %+v", all)
	}
	if c := newCapacityClass(testClasses, t0, 9); c.idx != 2 {
		t.Fatalf("a restored class beyond the classes is clamped to the last, got %d", c.idx)
	}
	var none *capacityClass
	if p := none.policy([]mohito.TargetPolicy{{Base: 7}}); p[0].Base != 7 || none.observe(t0, 10, 5, 0).HasChanged {
		t.Fatal("without classes the policy is as set")
	}
}

// TestCapacityClassesValidated: the deployment refuses classes that do not start at 100 or do
// not ascend, a hold under ten periods, a lowerFakeRatio that would let a lowered class burst,
// and a K_v below the largest class's draw.
func TestCapacityClassesValidated(t *testing.T) {
	const doc = `{"series":"home","mode":"Hardened","suite":"X25519","commandsPerUser":1,"delta":2,"commandSize":256,"responseSize":128,
 "period":"500ms","shufflerTimeout":"2s","responseDeadline":"1s","asyncWindow":0,"encoders":2,"outBatch":32,"responseQuantum":16,
 "capacityDraw":"Random","capacityClasses":%C%,"vendors":[{"index":0,"name":"a","devices":4,"base":10,"jitter":2,"paddedEntries":%K%,"responsePaddedEntries":16}]}`
	parse := func(classes, k string) (Deployment, error) {
		return ParseDeployment([]byte(strings.NewReplacer("%C%", classes, "%K%", k).Replace(doc)))
	}
	const good = `{"percent":[100,200],"hold":"10s","burstRate":0.05,"lowerFakeRatio":0.6}`
	d, err := parse(good, "24")
	if err != nil || d.Classes == nil || d.Classes.Hold != 10*time.Second || d.Classes.Percent[1] != 200 {
		t.Fatalf("good classes: %v %+v", err, d.Classes)
	}
	for _, c := range []struct{ name, classes, k, want string }{
		{"K_v below the largest class", good, "23", "base × 200% + delta + jitter = 24"},
		{"first class not 100", `{"percent":[150,200],"hold":"10s","burstRate":0.05,"lowerFakeRatio":0.6}`, "24", "start at 100"},
		{"not ascending", `{"percent":[100,100],"hold":"10s","burstRate":0.05,"lowerFakeRatio":0.6}`, "24", "ascend"},
		{"hold under ten periods", `{"percent":[100,200],"hold":"4s","burstRate":0.05,"lowerFakeRatio":0.6}`, "24", "at least 10 periods"},
		{"burst rate 0", `{"percent":[100,200],"hold":"10s","burstRate":0,"lowerFakeRatio":0.6}`, "24", "burstRate"},
		{"lower fake ratio below the step", `{"percent":[100,200],"hold":"10s","burstRate":0.05,"lowerFakeRatio":0.4}`, "24", "[0.500, 1)"},
	} {
		if _, err := parse(c.classes, c.k); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}
