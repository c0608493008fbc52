package sim_test

import (
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestKillRedisMidRound: the integrator's redis-server runs with the append-only file fsynced
// before every reply (roundstate.TestAdmissionsSurviveRedisKill, docs/services.md); it is
// killed (SIGKILL) while rounds carrying commands are in flight and restarted on the same
// directory. No acknowledged command is lost or duplicated: every command a user sent is
// answered and reached its device exactly once without being re-sent, and commands are answered
// in rounds after the restart.
func TestKillRedisMidRound(t *testing.T) {
	devices := []int{2, 2, 2}
	n := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(sim.DeviceIDs(devices), pw)))
	rds := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	h := &harness{}
	c, err := sim.Start(t.Context(), sim.Config{
		Deployment:       sim.SmallDeployment(devices, 256, 250*time.Millisecond),
		DevicesPerVendor: devices,
		Users:            6,
		Gateways:         2,
		DecryptWorkers:   2,
		NATSURL:          n.URL(),
		Password:         pw,
		Store:            roundstate.NewRedis(rds.Client(), 5*time.Minute),
		AckWait:          2 * time.Second,
		OnRound:          h.report,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.cluster = c
	t.Cleanup(c.Stop)
	var restartedAt uint64
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		waitFor(t, 60*time.Second, "rounds carrying commands", func() bool {
			k := 0
			for _, r := range h.Reports() {
				if r.K > 0 && !r.Aborted {
					k++
				}
			}
			return k >= 3
		})
		rds.Kill(t)
		rds.Restart(t)
		restartedAt = lastRound(h)
		d := c.Deployment()
		target := h.planned.Load() + 6 + int64(2*d.ResponseDeadline/d.Round)
		waitFor(t, 60*time.Second, "rounds after the restart", func() bool { return h.planned.Load() >= target })
	}()
	recs := sim.Workload{PayloadSize: 32, Timeout: time.Minute}.Run(t.Context(), c, stop)
	if err := sim.CheckAfterFault(c, recs, 12); err != nil {
		t.Fatal(err)
	}
	after, retried := 0, 0
	for _, r := range recs {
		if r.Result.T > restartedAt {
			after++
		}
		if r.Result.Attempts > 1 {
			retried++
		}
	}
	if after == 0 {
		t.Fatalf("no command answered in a round after the restart (round %d)", restartedAt)
	}
	// The sensitive part: with the append-only file no user has to re-send. Without it the same
	// kill loses the admissions and mailboxes of the rounds in flight, whose users re-send (six
	// of thirty in a run with --appendonly no): answered exactly once still, but only thanks to
	// the retry.
	if retried > 0 {
		t.Fatalf("%d of %d commands re-sent: an admission or response acknowledged before the kill was lost", retried, len(recs))
	}
	var aborted int
	for _, r := range h.Reports() {
		if r.Aborted && r.K > 0 {
			aborted++
		}
	}
	t.Logf("%d commands (%d re-sent, %d answered after the restart), %d rounds, %d with commands aborted",
		len(recs), retried, after, h.planned.Load(), aborted)
}
