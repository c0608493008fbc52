package sim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestUserSlotsInOneRound is issue 15 #7: with q = 2 a user's two commands
// to one device in one round take the slots j = 1 and 2, so their ids z
// differ, both are delivered in that round and both responses open at the
// first attempt. Before the fix every command took j = 1: the two collided
// on one z, one copy reached the device (O6) and the other user command's
// response did not open, so it had to be sent again.
func TestUserSlotsInOneRound(t *testing.T) {
	devices := []int{2, 2}
	h := start(t, devices, 2, 1, func(c *sim.Config) {
		c.Deployment = sim.SmallDeployment(devices, 256, 1500*time.Millisecond)
		c.Deployment.Params.Q = 2
		c.Deployment.ResponseDeadline = 500 * time.Millisecond
	})
	c := h.cluster
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	// Both commands must land in one round to test anything: submit right
	// after a round opens, and try again if they still straddle a boundary.
	testenv.Eventually(t, 30*time.Second, "a round open", func() error {
		_, err := c.Users[0].GW.RoundInfo(ctx)
		return err
	})
	for try := range 4 {
		ri, err := c.Users[0].GW.RoundInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("a round after %d", ri.T), func() error {
			next, err := c.Users[0].GW.RoundInfo(ctx)
			if err == nil && next.T <= ri.T {
				err = fmt.Errorf("round %d still open", next.T)
			}
			return err
		})
		var wg sync.WaitGroup
		res := make([]*client.Result, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = c.Users[0].Send(ctx, &c.Creds[1][0], fmt.Appendf(nil, "try%d-cmd%d", try, i))
			}()
		}
		wg.Wait()
		for i := range 2 {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if want := fmt.Sprintf("ack:try%d-cmd%d", try, i); string(res[i].Response) != want {
				t.Fatalf("command %d: response %q, want %q", i, res[i].Response, want)
			}
			if n := c.Delivered()[fmt.Sprintf("try%d-cmd%d", try, i)]; n != 1 {
				t.Fatalf("command %d delivered %d times", i, n)
			}
		}
		// A command sent again after its round closed does not count an
		// attempt; one whose response did not open does.
		if res[0].Attempts != 1 || res[1].Attempts != 1 {
			t.Fatalf("two commands to one device (q = 2): attempts %d and %d (rounds %d, %d), want 1 and 1 (their slots collided)",
				res[0].Attempts, res[1].Attempts, res[0].T, res[1].T)
		}
		if res[0].T != res[1].T {
			t.Logf("try %d: the commands went in rounds %d and %d; again", try, res[0].T, res[1].T)
			continue
		}
		return
	}
	t.Fatal("the two commands never shared a round: nothing was tested")
}
