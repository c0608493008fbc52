package sim_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestReplayedEnvelopeRefused is issue 15 #1 end to end: a user's honest M1
// re-submitted within its round under two other users' tokens and under the
// user's own (the G2 "M·e_v burst" by replay alone) is refused by the
// gateways (AlreadyExists, counted as duplicate_envelope) while the honest
// command is delivered exactly once and its response opens. Before the fix
// every copy was admitted and passed the shuffler's share check.
func TestReplayedEnvelopeRefused(t *testing.T) {
	devices := []int{2, 2}
	h := start(t, devices, 3, 1, func(c *sim.Config) {
		c.Deployment = sim.SmallDeployment(devices, 256, time.Second)
		c.Deployment.ResponseDeadline = 500 * time.Millisecond
	})
	c := h.cluster
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const payload = "honest-command"
	var (
		ri   *mohito.RoundInfo
		m1   []byte
		pc   *mohito.PendingCommand
		t0   uint64
		idx  uint32
		sent bool
	)
	// Submit early in a round so that the replays land in the same one.
	testenv.Eventually(t, 30*time.Second, "honest submission admitted", func() error {
		var err error
		if ri, err = c.Users[0].GW.RoundInfo(ctx); err != nil {
			return err
		}
		id, err := mohito.NewCommandID(rand.Reader)
		if err != nil {
			return err
		}
		if m1, pc, err = mohito.IssueCommandID(ri, &c.Creds[1][0], 1, id, []byte(payload), time.Now(), rand.Reader); err != nil {
			return err
		}
		if t0, idx, err = c.Users[0].GW.Submit(ctx, m1); err != nil {
			return err
		}
		sent = true
		return nil
	})
	if !sent {
		t.FailNow()
	}
	rejected := func() float64 { return testutil.ToFloat64(c.Metrics.Rejected.WithLabelValues("duplicate_envelope")) }
	before := rejected()
	replays := 0
	for _, u := range []int{1, 2, 0} {
		_, _, err := c.Users[u].GW.Submit(ctx, m1)
		switch status.Code(err) {
		case codes.AlreadyExists:
			replays++
		case codes.FailedPrecondition:
			// The round closed meanwhile: the replay is refused as late.
		default:
			t.Fatalf("replay of user 0's envelope by user %d: %v, want AlreadyExists", u, err)
		}
	}
	if replays == 0 {
		t.Fatalf("round %d closed before any replay arrived: nothing was tested", t0)
	}
	if got := rejected() - before; got != float64(replays) {
		t.Fatalf("mohito_rejected_total{reason=duplicate_envelope} rose by %v, want %d", got, replays)
	}

	var m11 []byte
	testenv.Eventually(t, 30*time.Second, "the honest response", func() error {
		var err error
		m11, err = c.Users[0].GW.FetchWait(ctx, t0, idx, 5*time.Second)
		if status.Code(err) == codes.Aborted {
			return fmt.Errorf("%w: round %d aborted: %v", testenv.ErrGiveUp, t0, err)
		}
		return err
	})
	resp, err := pc.OpenResponse(m11)
	if err != nil || string(resp) != "ack:"+payload {
		t.Fatalf("honest response %q, %v", resp, err)
	}
	if n := c.Delivered()[payload]; n != 1 {
		t.Fatalf("honest command delivered %d times, want exactly once", n)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
