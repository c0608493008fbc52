package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// TestAccountsReloadMidRun: the operator re-renders the NATS accounts whenever a device is
// registered or revoked and whenever another system's resource (a SecurePipeline, an
// EncounterSimulation) adds its account, and the reloader makes nats-server reload them. Under
// load, four reloads — a device added to a vendor, an unrelated account added, the device
// revoked, the account removed — abort no round, and every command is answered exactly once.
func TestAccountsReloadMidRun(t *testing.T) {
	devices := []int{3, 4}
	h := start(t, devices, 8, 1, nil)
	base := sim.DeviceIDs(devices)
	withDevice := sim.DeviceIDs(devices)
	withDevice[0] = append(withDevice[0], "v0dnew")
	other := natsx.Account{Name: "PPS_PIPELINE", JetStream: true, Users: []natsx.User{{Name: "pps-broker", Password: pw("pps-broker")}}}
	plus := func(ids [][]string) string {
		l := contract.AccountsLayout(ids, pw)
		l.Accounts = append(l.Accounts, other)
		return l.Render()
	}
	layouts := []struct {
		what string
		conf string
	}{
		{"a device registered", contract.AccountsConfig(withDevice, pw)},
		{"another system's account added", plus(withDevice)},
		{"the device revoked", plus(base)},
		{"the account removed", contract.AccountsConfig(base, pw)},
	}
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		next := func(n int64, what string) {
			target := h.planned.Load() + n
			waitFor(t, 60*time.Second, what, func() bool { return h.planned.Load() >= target })
		}
		next(3, "first rounds")
		for _, l := range layouts {
			if err := h.nats.Reload(l.conf); err != nil {
				t.Errorf("%s: %v", l.what, err)
				return
			}
			next(3, "rounds after "+l.what)
		}
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), h.cluster, stop)
	if err := sim.Check(h.cluster, recs, 8); err != nil {
		t.Fatal(err)
	}
	var aborted []string
	for _, r := range h.Reports() {
		if r.Aborted {
			aborted = append(aborted, fmt.Sprintf("%d (%s)", r.T, r.Reason))
		}
	}
	if len(aborted) > 0 {
		t.Fatalf("accounts reloads aborted rounds %v", aborted)
	}
	t.Logf("%d commands over %d rounds through %d reloads, no round aborted", len(recs), h.planned.Load(), len(layouts))
}

// TestNATSRestartMidRun: a single NATS server restarts under load (the NATS reloader restarts
// it when an account is added or removed) and comes back without its memory streams, buckets
// and object stores. The roles re-create them as they reconnect: the rounds in flight may
// abort, the series then runs on, and every command is answered exactly once.
func TestNATSRestartMidRun(t *testing.T) {
	h := start(t, []int{3, 4}, 8, 1, nil)
	var atRestart int64
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		target := h.planned.Load() + 3
		waitFor(t, 60*time.Second, "first rounds", func() bool { return h.planned.Load() >= target })
		atRestart = int64(len(h.Reports()))
		if err := h.nats.Restart(); err != nil {
			t.Error(err)
			return
		}
		target = h.planned.Load() + 6
		waitFor(t, 90*time.Second, "rounds after the restart", func() bool { return h.planned.Load() >= target })
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), h.cluster, stop)
	// Few commands are answered in so short a run on a loaded machine (7 under make test);
	// what the test is about is that the series recovers (below) and that nothing is lost.
	if err := sim.Check(h.cluster, recs, 4); err != nil {
		t.Fatal(err)
	}
	var aborted []string
	for _, r := range h.Reports()[atRestart:] {
		if r.Aborted {
			aborted = append(aborted, fmt.Sprintf("%d (%s)", r.T, r.Reason))
		}
	}
	// Recovered: the last rounds of the run ran to the end.
	reps := h.Reports()
	for _, r := range reps[max(int(atRestart), len(reps)-4):] {
		if r.Aborted {
			t.Errorf("round %d aborted (%s) among the last rounds: the series did not recover from the restart", r.T, r.Reason)
		}
	}
	t.Logf("%d commands; after the restart %d rounds planned, %d aborted (the last: %v)", len(recs), h.planned.Load(), len(aborted), aborted[max(0, len(aborted)-5):])
}
