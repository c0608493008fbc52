package sim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// nodeKillMinAnswered is the fewest commands TestKillNATSNodeMidRound must see answered: one
// per user (a run answers several per user). Without a minimum the test passed with none.
const nodeKillMinAnswered = 6

// TestKillNATSNodeMidRound runs every Mohito role against a JetStream cluster of three
// nats-server processes with every stream, bucket and object store at three replicas, and
// kills (SIGKILL) the node that leads the integrator's work stream while a round is in flight
// under load, then restarts it. No command is lost or duplicated: every command a user sent is
// answered and reached its device exactly once, commands are answered in rounds after the
// restart, and the streams, buckets and object store are replicated three times. Bounded: a
// command is re-sent at most once (two attempts), and only rounds in flight during the
// fail-over abort — none opened once the cluster is whole again (the killed node restarted
// and healthy), and no more than the rounds that fit in the fail-over window plus the two in
// flight at the kill (rounds are pipelined). The window, not one round: a crashed JetStream
// leader is replaced after the raft election timeout (nats-server: 4–9 s), during which the
// streams it led take no writes, and every round opened meanwhile waits for its shuffler past
// the shuffler timeout.
func TestKillNATSNodeMidRound(t *testing.T) {
	nc := testenv.StartNATSCluster(t, 3, contract.AccountsConfig(sim.DeviceIDs([]int{2, 2, 2}), pw))
	h := &harness{}
	var doneMu sync.Mutex
	done := map[uint64]bool{} // rounds whose responses are all in the mailboxes
	doneWithCommands := 0
	// settled: every round planned up to w with commands is done or aborted — none of the start-up rounds
	// (planned while the vendors' leases and consumers come up on the new cluster) is in flight.
	settled := func(w uint64) bool {
		doneMu.Lock()
		defer doneMu.Unlock()
		open := map[uint64]bool{}
		for _, r := range h.Reports() {
			switch {
			case r.T > w:
			case r.Aborted:
				delete(open, r.T)
			case r.K > 0 && !done[r.T]:
				open[r.T] = true
			}
		}
		return len(open) == 0
	}
	cfg := sim.Config{
		Deployment:       sim.SmallDeployment([]int{2, 2, 2}, 256, time.Second),
		DevicesPerVendor: []int{2, 2, 2},
		Users:            6,
		Gateways:         2,
		DecryptWorkers:   2,
		NATSURL:          nc.URLs(),
		Replicas:         3,
		Password:         pw,
		Store:            roundstate.NewRedis(testenv.StartRedis(t).Client(), 5*time.Minute),
		AckWait:          2 * time.Second,
		OnRound:          h.report,
		OnDone: func(t uint64, k int) {
			doneMu.Lock()
			done[t] = true
			if k > 0 {
				doneWithCommands++
			}
			doneMu.Unlock()
		},
	}
	c, err := sim.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.cluster = c
	t.Cleanup(c.Stop)

	js := nc.JetStream(t, nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	work := streamInfo(ctx, t, js, contract.StreamWork)
	if work.Config.Replicas != 3 || work.Cluster == nil || len(work.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s: %d replicas, cluster %+v: want three", contract.StreamWork, work.Config.Replicas, work.Cluster)
	}
	for _, b := range []string{"KV_" + contract.BucketRounds, "OBJ_" + contract.BucketOKVS} {
		if si := streamInfo(ctx, t, js, b); si.Config.Replicas != 3 {
			t.Fatalf("%s: %d replicas, want 3", b, si.Config.Replicas)
		}
	}

	var killedAt, restartedAt uint64  // the highest round reported before the kill, and at the restart
	var killTime, wholeTime time.Time // the kill, and the restarted node healthy again
	var reportsAtKill int             // rounds reported before the kill (start-up aborts while the roles come up included)
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		// Warm-up: the roles create their replicated streams, buckets and consumers and take
		// their leases on a fresh cluster; rounds planned meanwhile may time out. Wait for
		// rounds that carry commands to complete, then for every round planned so far to be
		// done or aborted, so that only the kill is left to abort anything.
		waitFor(t, 90*time.Second, "three completed rounds carrying commands", func() bool {
			doneMu.Lock()
			defer doneMu.Unlock()
			return doneWithCommands >= 3
		})
		w := lastRound(h)
		waitFor(t, 90*time.Second, "every start-up round done or aborted", func() bool { return settled(w) })
		target := h.planned.Load() + 1
		waitFor(t, 60*time.Second, "the next planned round", func() bool { return h.planned.Load() >= target })
		// The plan is out and V*'s output is streaming: mid-round. The node leading the work
		// stream is the one whose loss every stage feels.
		leader := nc.Index(streamInfo(ctx, t, js, contract.StreamWork).Cluster.Leader)
		if leader < 0 {
			t.Error("the work stream has no leader")
			return
		}
		killedAt, reportsAtKill = lastRound(h), len(h.Reports())
		killTime = time.Now()
		nc.Kill(t, leader)
		t.Logf("killed nats-server %s (leader of %s) after round %d", nc.ServerName(leader), contract.StreamWork, killedAt)
		// A pod's restart: once the work stream has a new leader on the surviving nodes.
		testenv.Eventually(t, 60*time.Second, "a new leader of the work stream", func() error {
			if l := streamInfo(ctx, t, js, contract.StreamWork).Cluster.Leader; l == nc.ServerName(leader) {
				return fmt.Errorf("still led by %s", l)
			}
			return nil
		})
		nc.Restart(t, leader)
		wholeTime = time.Now()
		restartedAt = lastRound(h)
		d := c.Deployment()
		target = h.planned.Load() + 3 + int64(2*d.ResponseDeadline/d.Round)
		waitFor(t, 90*time.Second, "rounds after the restart", func() bool { return h.planned.Load() >= target })
	}()
	recs := sim.Workload{PayloadSize: 32, Timeout: 2 * time.Minute}.Run(t.Context(), c, stop)
	if err := sim.CheckAfterFault(c, recs, nodeKillMinAnswered); err != nil {
		t.Fatal(err)
	}
	var aborted []string
	for _, r := range h.Reports()[reportsAtKill:] {
		// A planned round without a command is never marked done by the responder and times
		// out its response phase (as on a single server): it aborts nothing a user sent.
		if !r.Aborted || (r.K == 0 && r.Reason == "response phase timed out") {
			continue
		}
		aborted = append(aborted, fmt.Sprintf("%d (%s)", r.T, r.Reason))
		opened := r.Opened
		if opened.IsZero() {
			opened = r.Planned
		}
		if !opened.IsZero() && opened.After(wholeTime) {
			t.Errorf("round %d opened %v after the cluster was whole again and aborted (%s): only rounds in flight during the fail-over may abort",
				r.T, opened.Sub(wholeTime).Round(time.Millisecond), r.Reason)
		}
	}
	d := c.Deployment()
	window := wholeTime.Sub(killTime)
	if limit := 2 + int(window/d.Round); len(aborted) > limit {
		t.Errorf("%d rounds aborted after the kill after round %d: %v; want at most %d (the two in flight at the kill and those opened in the %v fail-over)",
			len(aborted), killedAt, aborted, limit, window.Round(time.Millisecond))
	}
	t.Logf("rounds aborted after the kill after round %d, over a fail-over of %v (%.1f rounds): %v",
		killedAt, window.Round(time.Millisecond), window.Seconds()/d.Round.Seconds(), aborted)
	retried, maxAttempts, after := 0, 0, 0
	for _, r := range recs {
		maxAttempts = max(maxAttempts, r.Result.Attempts)
		if r.Result.Attempts > 1 {
			retried++
		}
		if r.Result.T > restartedAt {
			after++
		}
	}
	if after == 0 {
		t.Fatalf("no command answered in a round after the restart (round %d)", restartedAt)
	}
	// A command re-sent from an aborted round can land in the next round the fail-over also
	// aborts: every attempt past the first must be explained by an aborted round (issue 14's
	// "clients retry exactly once" holds only when at most one round aborts; with JetStream's
	// 4–9 s leader election and 1 s rounds, more do).
	if maxAttempts > 1+max(1, len(aborted)) {
		t.Errorf("a command took %d attempts with %d rounds aborted: more re-sends than aborted rounds", maxAttempts, len(aborted))
	}
	t.Logf("%d commands (%d re-sent, at most %d attempts; %d answered after the restart), %d rounds planned",
		len(recs), retried, maxAttempts, after, h.planned.Load())
}

// streamInfo reads a stream's info, retried while the cluster elects a leader.
func streamInfo(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	var si *jetstream.StreamInfo
	testenv.Eventually(t, 30*time.Second, "info of stream "+name, func() error {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := js.Stream(ictx, name)
		if err != nil {
			return err
		}
		if si, err = s.Info(ictx); err != nil {
			return err
		}
		if si.Cluster == nil || si.Cluster.Leader == "" {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
	return si
}

// lastRound is the highest round reported so far.
func lastRound(h *harness) uint64 {
	var t uint64
	for _, r := range h.Reports() {
		t = max(t, r.T)
	}
	return t
}
