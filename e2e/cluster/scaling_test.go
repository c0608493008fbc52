package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

// The load phases of issue 14 item 4: ×1 → ×4 → ×8 → ×1 users through the edge, each long
// enough for the decisions it should cause. The Round moves its capacity class with demand
// (spec.capacity.classes) and the operator scales the decryption workers, each limited to a
// small CPU share so that one worker has a known capacity on this small node.
const (
	scaleBaseUsers = 64
	// scaleTokens covers the largest phase: every user has its own access token.
	scaleTokens = 8 * scaleBaseUsers
)

// scaleRound is the Round patch of the load phases: classes 100–800 % of the vendors' base
// (scaleBase: δ 8, jitter 8, so the largest draw 8 × base + 16 fits K_v = 8 × base + 32), a hold
// of ten periods, and decryption workers of 100 millicores that scale on one pending message
// each, restarted from one replica (between 1 and 4): the earlier phases left 3, and a scale-in
// takes a 3-minute cooldown per step, so without the reset ×1 began at the count ×8 could reach.
// At 50 millicores one worker did not hold ×1's base class (p90 work 1.97 s of 1.6 s) and the
// workers were at 4 before the load grew. The encoders autoscale from one partition of 200
// millicores up to one per vendor: a partition owns whole vendors, so with the series' one
// vendor the operator keeps one, and with OBSCURA_E2E_CLUSTER_VENDORS=2 (scaleVendors) a second
// vendor joins for these phases and they can scale out to two. Users wait for each answer, so
// they fall into every other round and spread over the vendors' devices: ×1 (64 users, ≈ 32
// real commands a round) fits the base class; ×4 (≈ 128) and ×8 (≈ 256, at most one per
// device) burst until the class holds them; back at ×1 every round is mostly fakes and the class
// comes down.
const scaleRound = `{"spec":{"delta":8,
  "capacity":{"draw":"Random","classes":{"percent":[100,200,400,800],"hold":"20s","burstPercent":5,"lowerFakePercent":50}},
  "decryptWorkers":{"replicas":1,"min":1,"max":4,"targetLag":1,"autoscaler":"Operator",
    "resources":{"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"cpu":"100m","memory":"256Mi"}}},
  "encoders":{"partitions":1,"autoscale":true,"min":1,"max":2,"targetLag":1,
    "resources":{"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"cpu":"200m","memory":"256Mi"}}}}}`

// scaleVendors is how many vendors the series has in the load phases: 1, or 2 with
// OBSCURA_E2E_CLUSTER_VENDORS=2. The two-vendor run (2026-11-29 03:10, beside make test at load
// average ≈ 47) collapsed at ×4 (rounds of 9–21 s, commands timing out), so the default stays
// the configuration that passed until that run is repeated on a quieter machine.
func scaleVendors() int {
	if os.Getenv("OBSCURA_E2E_CLUSTER_VENDORS") == "2" {
		return 2
	}
	return 1
}

// scaleBase is each vendor's base in the load phases: 64 commands per round over the series,
// so Σ C_v, the work of the decryption workers, does not depend on the vendor count.
func scaleBase() int { return 64 / scaleVendors() }

// scaleVendor is each vendor's capacity patch in the load phases.
func scaleVendor() string {
	b := scaleBase()
	return fmt.Sprintf(`{"spec":{"capacity":{"base":%d,"jitter":8,"paddedEntries":%d}}}`, b, 8*b+32)
}

// deploymentFinal checks the series' deployment document for its vendors with the load phases'
// capacity and a shuffler weight equal to each vendor's devices.
func (e *env) deploymentFinal() error {
	cm := &corev1.ConfigMap{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: roundName + "-deployment"}, cm); err != nil {
		return err
	}
	var doc struct {
		Delta   int `json:"delta"`
		Vendors []struct {
			Devices        int  `json:"devices"`
			Base           int  `json:"base"`
			PaddedEntries  int  `json:"paddedEntries"`
			ShufflerWeight *int `json:"shufflerWeight"`
		} `json:"vendors"`
	}
	if err := json.Unmarshal([]byte(cm.Data["deployment.json"]), &doc); err != nil {
		return err
	}
	if doc.Delta != 8 || len(doc.Vendors) != scaleVendors() {
		return fmt.Errorf("delta %d, %d vendors", doc.Delta, len(doc.Vendors))
	}
	for i, v := range doc.Vendors {
		if v.Devices != devicesPerVendor || v.Base != scaleBase() || v.PaddedEntries != 8*scaleBase()+32 || v.ShufflerWeight == nil || *v.ShufflerWeight != devicesPerVendor {
			return fmt.Errorf("vendor %d in the document: %+v (shuffler weight %v)", i, v, v.ShufflerWeight)
		}
	}
	return nil
}

// ScalePhase is one load level of the scaling run and what the platform did during it.
type ScalePhase struct {
	Name        string   `json:"name"`
	Users       int      `json:"users"`
	Seconds     float64  `json:"seconds"`
	Commands    int      `json:"commands"`
	ExactlyOnce bool     `json:"exactly_once"`
	Aborted     int64    `json:"aborted_rounds"`
	Completed   int64    `json:"completed_rounds"`
	RoundSecs   float64  `json:"round_seconds"` // mean lastRoundSeconds once scaled: the second half, after the last scale-out decision
	RoundToBase float64  `json:"round_to_base"` // RoundSecs ÷ the first ×1 phase's
	WorkSecs    float64  `json:"work_seconds"`  // mean lastRoundWork over the second half
	WorkersMax  int32    `json:"workers_max"`   // ready decryption workers
	WorkersEnd  int32    `json:"workers_end"`   // at the phase's end
	EncodersMax int32    `json:"encoders_max"`  // spec.encoders.partitions
	EncodersEnd int32    `json:"encoders_end"`
	CapStart    int32    `json:"capacity_start"` // capacity class (percent) at the start
	CapMax      int32    `json:"capacity_max"`
	CapEnd      int32    `json:"capacity_end"`
	Events      []string `json:"events,omitempty"` // scaling and capacity Events during the phase
	// AbortReasons counts the phase's aborted rounds by the reason the coordinator logged.
	AbortReasons map[string]int `json:"abort_reasons,omitempty"`
}

// ScaleSample is one look at the Round while the phases run (the plot's points).
type ScaleSample struct {
	At        float64 `json:"at"` // seconds since the first phase started
	Users     int     `json:"users"`
	Capacity  int32   `json:"capacity_percent"`
	Workers   int32   `json:"workers"`
	Encoders  int32   `json:"encoders"`
	RoundSecs float64 `json:"round_seconds"`
	WorkSecs  float64 `json:"work_seconds"`
}

// scalingPhases configures the Round for the phases, runs them and asserts what each must show.
func (e *env) scalingPhases() {
	e.ca = e.edgeCA()
	if scaleVendors() == 2 {
		e.phase("a second Vendor and its Shuffler join the series (encoder partitions own whole vendors)", e.addSecondVendor)
	} else {
		e.creds = e.deviceCredentials()
	}
	e.phase("capacity classes and 100m decryption workers for the load phases", func() {
		for _, v := range vendorNames[:scaleVendors()] {
			e.run("kubectl", "patch", "-n", e.ns, "vendors.mohito.obscura.dev/"+v, "--type=merge", "-p", scaleVendor())
		}
		e.run("kubectl", "patch", "-n", e.ns, "rounds.mohito.obscura.dev/"+roundName, "--type=merge", "-p", strings.Join(strings.Fields(scaleRound), ""))
		// The Vendors' change reaches the series' deployment document through its Shuffler's
		// status (the shuffler weight is its devices); each step rolls every role, so the load
		// starts only once the document is final and everything has rolled.
		testenv.Eventually(e.t, 4*time.Minute, "deployment document with the new capacity and shuffler weight", e.deploymentFinal)
		testenv.Eventually(e.t, 4*time.Minute, "round workloads rolled and available", e.allAvailable)
		e.waitSettled()
	})
	s := e.scaleSampler()
	var phases []ScalePhase
	for _, p := range []struct {
		name string
		mult int
		d    time.Duration
	}{{"x1", 1, 60 * time.Second}, {"x4", 4, 100 * time.Second}, {"x8", 8, 140 * time.Second}, {"x1-after", 1, 240 * time.Second}} {
		users := scaleBaseUsers * p.mult
		e.phase(fmt.Sprintf("load %s (%d users, %s)", p.name, users, p.d), func() {
			start := time.Now()
			s.setUsers(users)
			ab0, c0 := e.counter("abortedRounds"), e.counter("completedRounds")
			cap0 := s.last().Capacity
			sum := e.drive("scale-"+p.name, users, p.d)
			ph := ScalePhase{Name: p.name, Users: users, Seconds: time.Since(start).Seconds(), CapStart: cap0,
				Commands: int(num(sum["commands"])), Aborted: e.counter("abortedRounds") - ab0, Completed: e.counter("completedRounds") - c0}
			ph.ExactlyOnce, _ = sum["exactly_once"].(bool)
			evs := e.roundEventsSince(start)
			ph.Events = eventTexts(evs)
			s.summarise(&ph, start, lastScaleOut(evs))
			ph.AbortReasons = e.abortReasonsSince(start)
			// The status counter is the series' and can go back when a coordinator is replaced
			// (a run reported "-9 aborted" beside 9 logged aborts): the coordinators' own log
			// lines are the floor.
			logged := 0
			for _, n := range ph.AbortReasons {
				logged += n
			}
			ph.Aborted = max(ph.Aborted, int64(logged))
			if len(phases) > 0 && phases[0].RoundSecs > 0 {
				ph.RoundToBase = ph.RoundSecs / phases[0].RoundSecs
			}
			phases = append(phases, ph)
			e.t.Logf("load %s: %d users, %d commands, exactly once %v, %d completed / %d aborted rounds, round %.2fs (%.2f× ×1), work %.3fs, workers max %d end %d, encoders max %d end %d, capacity %d%%→%d%% (max %d%%), events %q, aborted by reason %v",
				ph.Name, users, ph.Commands, ph.ExactlyOnce, ph.Completed, ph.Aborted, ph.RoundSecs, ph.RoundToBase, ph.WorkSecs,
				ph.WorkersMax, ph.WorkersEnd, ph.EncodersMax, ph.EncodersEnd, ph.CapStart, ph.CapEnd, ph.CapMax, ph.Events, ph.AbortReasons)
		})
	}
	samples := s.stop()
	e.report.Scaling, e.report.ScaleSamples = phases, samples
	if err := plotScaling(filepath.Join(e.outDir(), "scaling.svg"), samples); err != nil {
		e.t.Errorf("scaling plot: %v", err)
	}
	e.checkScaling(phases, int32(e.counter("vendors")))
}

// checkScaling asserts the properties of issue 14 item 4 on the phases' figures; vendors is the
// series' vendor count, which bounds the encoder partitions (each owns whole vendors).
func (e *env) checkScaling(ph []ScalePhase, vendors int32) {
	if len(ph) != 4 {
		e.t.Fatalf("%d load phases ran, want 4", len(ph))
	}
	x1, x4, x8, after := ph[0], ph[1], ph[2], ph[3]
	for _, p := range ph {
		if p.Commands == 0 || !p.ExactlyOnce {
			e.t.Errorf("load %s: %d commands answered, exactly once %v: want some, each delivered once", p.Name, p.Commands, p.ExactlyOnce)
		}
		if p.Aborted > 1 {
			e.t.Errorf("load %s: %d rounds aborted, want at most one (coordinator's reasons: %v)", p.Name, p.Aborted, p.AbortReasons)
		}
	}
	// Demand grew: the class rose, and the workers scaled out.
	if max(x4.CapMax, x8.CapMax) <= x1.CapEnd || !hasEvent(x4, x8, "CapacityRaised") {
		e.t.Errorf("capacity class did not follow demand up: ×1 ended at %d%%, ×4/×8 reached %d%%/%d%% (events %q %q)",
			x1.CapEnd, x4.CapMax, x8.CapMax, x4.Events, x8.Events)
	}
	if max(x4.WorkersMax, x8.WorkersMax) <= x1.WorkersEnd || !hasEvent(x4, x8, "ScaleUp") {
		e.t.Errorf("decryption workers did not scale out with the load: %d at the end of ×1, at most %d/%d during ×4/×8 (events %q %q)",
			x1.WorkersEnd, x4.WorkersMax, x8.WorkersMax, x4.Events, x8.Events)
	}
	if vendors <= 1 {
		// One vendor: one partition holds all the encoding there is, and the operator keeps it so.
		for _, p := range ph {
			if p.EncodersMax > 1 {
				e.t.Errorf("load %s: %d encoder partitions for one vendor (a partition owns whole vendors; the rest idle)", p.Name, p.EncodersMax)
			}
		}
	} else if max(x4.EncodersMax, x8.EncodersMax) <= x1.EncodersEnd || !hasEventText(x4, x8, "encoder partitions") {
		e.t.Errorf("encoders did not scale out with the load: %d partitions at the end of ×1, at most %d/%d during ×4/×8 (events %q %q)",
			x1.EncodersEnd, x4.EncodersMax, x8.EncodersMax, x4.Events, x8.Events)
	}
	// Scaled, the largest load's rounds take no longer than 1.2× the ×1 rounds.
	if x8.RoundToBase > 1.2 {
		e.t.Errorf("×8 round time %.2fs is %.2f× the ×1 round time %.2fs (want ≤ 1.2× once scaled)", x8.RoundSecs, x8.RoundToBase, x1.RoundSecs)
	}
	// Demand fell: the class came down and the workers scaled in.
	if after.CapEnd >= max(x4.CapMax, x8.CapMax) || !hasEvent(after, after, "CapacityLowered") {
		e.t.Errorf("capacity class did not come down after the load: %d%% at the end (max %d%%; events %q)", after.CapEnd, max(x4.CapMax, x8.CapMax), after.Events)
	}
	if after.WorkersEnd >= max(x4.WorkersMax, x8.WorkersMax) || !hasEvent(after, after, "ScaleDown") {
		e.t.Errorf("decryption workers did not scale in after the load: %d at the end (max %d; events %q)", after.WorkersEnd, max(x4.WorkersMax, x8.WorkersMax), after.Events)
	}
	if vendors > 1 && after.EncodersEnd >= max(x4.EncodersMax, x8.EncodersMax) {
		e.t.Errorf("encoders did not scale in after the load: %d partitions at the end (max %d; events %q)", after.EncodersEnd, max(x4.EncodersMax, x8.EncodersMax), after.Events)
	}
}

// abortReasonsSince counts the rounds the coordinators logged as aborted since t, by reason (the
// pod log archive: coordinators replaced since are counted too).
func (e *env) abortReasonsSince(t time.Time) map[string]int {
	out := map[string]int{}
	e.podLogs(func(path string, b []byte) {
		if !strings.Contains(path, "-coordinator-") {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			// CRI format: <time> <stream> <tag> <the role's JSON line>
			f := strings.SplitN(l, " ", 4)
			if len(f) < 4 || !strings.Contains(f[3], `"msg":"round aborted"`) {
				continue
			}
			var rec struct {
				Time   time.Time `json:"time"`
				Reason string    `json:"reason"`
			}
			if json.Unmarshal([]byte(f[3]), &rec) != nil || rec.Time.Before(t) {
				continue
			}
			out[rec.Reason]++
		}
	})
	return out
}

func hasEvent(a, b ScalePhase, reason string) bool {
	for _, ev := range append(append([]string(nil), a.Events...), b.Events...) {
		if strings.HasPrefix(ev, reason+":") {
			return true
		}
	}
	return false
}

// hasEventText reports whether a or b saw an Event whose text contains sub.
func hasEventText(a, b ScalePhase, sub string) bool {
	for _, e := range append(append([]string(nil), a.Events...), b.Events...) {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// lastScaleOut is when the last scale-out decision among evs was made (ScaleUp or
// CapacityRaised), or the zero time.
func lastScaleOut(evs []roundEvent) time.Time {
	var last time.Time
	for _, x := range evs {
		if x.reason == "ScaleUp" || x.reason == "CapacityRaised" {
			last = x.at
		}
	}
	return last
}

// roundEvent is one of the Round's scaling and capacity Events.
type roundEvent struct {
	at           time.Time
	reason, note string
}

// roundEventsSince lists the Round's scaling and capacity Events since t, oldest first.
func (e *env) roundEventsSince(t time.Time) []roundEvent {
	var evs eventsv1.EventList
	if err := e.k.List(context.Background(), &evs, client.InNamespace(e.ns)); err != nil {
		e.t.Logf("events: %v", err)
		return nil
	}
	var out []roundEvent
	for _, x := range evs.Items {
		if x.Regarding.Kind != "Round" || x.Regarding.Name != roundName {
			continue
		}
		switch x.Reason {
		case "ScaleUp", "ScaleDown", "ScaleClamped", "CapacityRaised", "CapacityLowered":
		default:
			continue
		}
		at := x.EventTime.Time
		if x.Series != nil {
			at = x.Series.LastObservedTime.Time
		}
		if at.Before(t) {
			continue
		}
		out = append(out, roundEvent{at, x.Reason, x.Note})
	}
	slices.SortFunc(out, func(a, b roundEvent) int { return a.at.Compare(b.at) })
	return out
}

// eventTexts are evs as "<reason>: <note>".
func eventTexts(evs []roundEvent) []string {
	texts := make([]string, len(evs))
	for i, x := range evs {
		texts[i] = x.reason + ": " + x.note
	}
	return texts
}

// scaleSampler looks at the Round and its workers every two seconds while the phases run.
type scaleSampler struct {
	e       *env
	start   time.Time
	mu      sync.Mutex
	users   int
	samples []ScaleSample
	at      []time.Time
	quit    chan struct{}
	done    chan struct{}
}

func (e *env) scaleSampler() *scaleSampler {
	s := &scaleSampler{e: e, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	s.take()
	go func() {
		defer close(s.done)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				s.take()
			}
		}
	}()
	return s
}

func (s *scaleSampler) setUsers(n int) {
	s.mu.Lock()
	s.users = n
	s.mu.Unlock()
	s.take()
}

// take records one sample; a failed read repeats the previous figures.
func (s *scaleSampler) take() {
	now := time.Now()
	s.mu.Lock()
	x := ScaleSample{At: now.Sub(s.start).Seconds(), Users: s.users}
	if n := len(s.samples); n > 0 {
		p := s.samples[n-1]
		x.Capacity, x.Workers, x.Encoders, x.RoundSecs, x.WorkSecs = p.Capacity, p.Workers, p.Encoders, p.RoundSecs, p.WorkSecs
	}
	s.mu.Unlock()
	if u, err := s.e.resource("Round", roundName); err == nil {
		if v, ok, _ := unstructured.NestedInt64(u.Object, "status", "capacityPercent"); ok {
			x.Capacity = int32(v)
		}
		if v, ok, _ := unstructured.NestedInt64(u.Object, "spec", "encoders", "partitions"); ok {
			x.Encoders = int32(v)
		}
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "lastRoundSeconds"); ok {
			x.RoundSecs = num(v)
		}
		if v, ok, _ := unstructured.NestedString(u.Object, "status", "lastRoundWork"); ok {
			if d, err := time.ParseDuration(v); err == nil {
				x.WorkSecs = d.Seconds()
			}
		}
	}
	if _, ready, err := s.e.decryptWorkers(); err == nil {
		x.Workers = ready
	}
	s.mu.Lock()
	s.samples = append(s.samples, x)
	s.at = append(s.at, now)
	s.mu.Unlock()
}

func (s *scaleSampler) last() ScaleSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[len(s.samples)-1]
}

// summarise fills a phase's figures from the samples taken since start.
// summarise fills p from the samples since start; round and work times are the phase's once
// scaled: from the later of its half-way point and ten seconds (a rollout) after its last
// scale-out decision (scaledAt, zero for none), or its last quarter if that leaves less.
func (s *scaleSampler) summarise(p *ScalePhase, start, scaledAt time.Time) {
	s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	half := start.Add(time.Since(start) / 2)
	if settled := scaledAt.Add(10 * time.Second); settled.After(half) {
		half = settled
		if q := start.Add(3 * time.Since(start) / 4); q.Before(half) {
			half = q
		}
	}
	var round, work float64
	var n int
	p.CapMax = p.CapStart
	for i, x := range s.samples {
		if s.at[i].Before(start) {
			continue
		}
		p.WorkersMax, p.CapMax = max(p.WorkersMax, x.Workers), max(p.CapMax, x.Capacity)
		p.EncodersMax = max(p.EncodersMax, x.Encoders)
		if !s.at[i].Before(half) && x.RoundSecs > 0 {
			round, work, n = round+x.RoundSecs, work+x.WorkSecs, n+1
		}
	}
	last := s.samples[len(s.samples)-1]
	p.WorkersEnd, p.CapEnd, p.EncodersEnd = last.Workers, last.Capacity, last.Encoders
	if n > 0 {
		p.RoundSecs, p.WorkSecs = round/float64(n), work/float64(n)
	}
}

func (s *scaleSampler) stop() []ScaleSample {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}
