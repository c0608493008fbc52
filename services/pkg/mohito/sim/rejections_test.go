package sim_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRejectionsCountedByReason is issue 15 #9 for Mohito: every refusal of
// a user's message is counted in mohito_rejected_total{reason} by the role
// that refuses it, through a real deployment — an unknown token, a malformed
// envelope, a closed round, a submission over q, a replayed envelope (also
// TestReplayedEnvelopeRefused), an envelope whose outer layer V* cannot open,
// and two users' commands for one device slot in one round (duplicate z,
// spec O6: the first is kept). (undecryptable_inner and share_check need
// envelopes only the core's tests can build; TestRoundEngine covers them.)
func TestRejectionsCountedByReason(t *testing.T) {
	devices := []int{2, 2}
	h := start(t, devices, 3, 1, func(c *sim.Config) {
		c.Deployment = sim.SmallDeployment(devices, 256, time.Second)
		c.Deployment.ResponseDeadline = 500 * time.Millisecond
	})
	c := h.cluster
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	rejected := func(reason string) float64 { return testutil.ToFloat64(c.Metrics.Rejected.WithLabelValues(reason)) }
	var ri *mohito.RoundInfo
	testenv.Eventually(t, 30*time.Second, "a round open", func() error {
		var err error
		ri, err = c.Users[0].GW.RoundInfo(ctx)
		return err
	})
	p := ri.Params
	expect := func(reason string, before float64, code codes.Code, err error) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("%s: %v, want %v", reason, err, code)
		}
		if got := rejected(reason) - before; got != 1 {
			t.Fatalf("mohito_rejected_total{reason=%q} rose by %v, want 1", reason, got)
		}
	}

	// Gateway: unknown token.
	b := rejected("unauthenticated")
	conn, err := client.DialGateway(c.GatewayAddrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = client.NewGatewayClient(conn, "no-such-token").RoundInfo(ctx)
	expect("unauthenticated", b, codes.Unauthenticated, err)

	// Gateway: a submission of the wrong size.
	b = rejected("malformed")
	_, _, err = c.Users[0].GW.Submit(ctx, make([]byte, 7))
	expect("malformed", b, codes.InvalidArgument, err)

	// Gateway: a round that is closed (its predecessor).
	fresh := func(round uint64, dev *mohito.DeviceCredentials) []byte {
		old := *ri
		old.T = round
		m1, _, err := mohito.IssueCommand(&old, dev, 1, []byte("x"), time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return m1
	}
	b = rejected("round_closed")
	_, _, err = c.Users[0].GW.Submit(ctx, fresh(ri.T-1, &c.Creds[0][0]))
	expect("round_closed", b, codes.FailedPrecondition, err)

	// Gateway: q + 1 submissions by one user in one round (q = 1), and a
	// byte-identical replay under another token.
	var cur *mohito.RoundInfo
	var first []byte
	testenv.Eventually(t, 30*time.Second, "one admission in a fresh round", func() error {
		var err error
		if cur, err = c.Users[1].GW.RoundInfo(ctx); err != nil {
			return err
		}
		ri = cur
		first = fresh(cur.T, &c.Creds[0][1])
		_, _, err = c.Users[1].GW.Submit(ctx, first)
		return err
	})
	bq, bd := rejected("quota"), rejected("duplicate_envelope")
	_, _, errQ := c.Users[1].GW.Submit(ctx, fresh(cur.T, &c.Creds[1][1]))
	_, _, errD := c.Users[2].GW.Submit(ctx, first)
	if status.Code(errQ) == codes.FailedPrecondition || status.Code(errD) == codes.FailedPrecondition {
		t.Skipf("round %d closed between submissions (loaded machine): %v / %v", cur.T, errQ, errD)
	}
	expect("quota", bq, codes.ResourceExhausted, errQ)
	expect("duplicate_envelope", bd, codes.AlreadyExists, errD)

	// Shuffler: right size and header, an outer layer that does not open.
	b = rejected("undecryptable_outer")
	testenv.Eventually(t, 30*time.Second, "a garbage envelope admitted", func() error {
		cur, err := c.Users[2].GW.RoundInfo(ctx)
		if err != nil {
			return err
		}
		m1 := make([]byte, p.SubmissionSize())
		rand.Read(m1)
		copy(m1, fresh(cur.T, &c.Creds[0][0])[:10]) // the clear header of round cur.T
		_, _, err = c.Users[2].GW.Submit(ctx, m1)
		return err
	})
	testenv.Eventually(t, 30*time.Second, "the shuffler counts the undecryptable envelope", func() error {
		if got := rejected("undecryptable_outer") - b; got != 1 {
			return fmt.Errorf("undecryptable_outer rose by %v", got)
		}
		return nil
	})

	// Encoder: two users command the same device in the same round; each
	// takes slot 1, so their ids z collide. Retry until both land in one round.
	b = rejected("duplicate_z")
	for try := range 4 {
		var wg sync.WaitGroup
		for u := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Users[u].Send(ctx, &c.Creds[1][0], fmt.Appendf(nil, "dup-%d-%d", try, u)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if rejected("duplicate_z") > b {
			return
		}
	}
	t.Fatal("two users' commands to one device never met in one round: duplicate_z not counted")
}
