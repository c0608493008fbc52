package sim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
)

// Record is one command of a workload.
type Record struct {
	User    int
	Vendor  int
	Device  int
	Payload string
	Result  *client.Result
	Err     error
	Sent    time.Time
}

// Workload drives users: each user repeatedly sends a command to one of its
// devices (vendors picked with skew: vendor v weighted by its device count),
// waits for the response, and stops when stop is closed.
type Workload struct {
	PayloadSize int           // command payload bytes (≤ L_c − header)
	Think       time.Duration // pause between a user's commands
	Users       int           // active users (≤ configured users); 0 = all
	Timeout     time.Duration // per command budget
}

// Run drives c until stop closes, then lets in-flight commands finish.
func (w Workload) Run(ctx context.Context, c *Cluster, stop <-chan struct{}) []Record {
	owned := make([][][2]int, len(c.Users))
	for v := range c.Owner {
		for d, u := range c.Owner[v] {
			owned[u] = append(owned[u], [2]int{v, d})
		}
	}
	n := w.Users
	if n == 0 || n > len(c.Users) {
		n = len(c.Users)
	}
	if w.Timeout == 0 {
		w.Timeout = 30 * time.Second
	}
	var mu sync.Mutex
	var out []Record
	var wg sync.WaitGroup
	for u := range n {
		if len(owned[u]) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(u), 1))
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				dv := owned[u][rng.IntN(len(owned[u]))]
				payload := fmt.Sprintf("u%d-%d-v%dd%d;", u, seq, dv[0], dv[1])
				if len(payload) < w.PayloadSize {
					payload += string(bytes.Repeat([]byte{'x'}, w.PayloadSize-len(payload)))
				}
				rec := Record{User: u, Vendor: dv[0], Device: dv[1], Payload: payload, Sent: time.Now()}
				cctx, cancel := context.WithTimeout(ctx, w.Timeout)
				rec.Result, rec.Err = c.Users[u].Send(cctx, &c.Creds[dv[0]][dv[1]], []byte(payload))
				cancel()
				mu.Lock()
				out = append(out, rec)
				mu.Unlock()
				if w.Think > 0 && !clock.Sleep(ctx, w.Think) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// Check verifies exactly-once: every answered command reached its device
// exactly once with the right response, and no device saw a command twice —
// also when its round was aborted and the user re-sent it in a later round
// (the device answers a retry from memory, mohito.Device). At least atLeast
// commands must have been answered (atLeast ≥ 1): every property above holds
// for an empty list, so a run that answered nothing — a workload stopped at
// once, a cluster that never opened a round — passed as "exactly once".
func Check(c *Cluster, recs []Record, atLeast int) error { return check(c, recs, atLeast, false) }

// CheckAfterFault is Check for a run with an infrastructure fault (a NATS node killed): a
// device may miss the delivery of a round in flight at the fault, so that its user's response
// does not open and the user re-sends (spec O11) — still answered, and executed exactly once.
func CheckAfterFault(c *Cluster, recs []Record, atLeast int) error {
	return check(c, recs, atLeast, true)
}

func check(c *Cluster, recs []Record, atLeast int, unopenedOK bool) error {
	if atLeast < 1 {
		return fmt.Errorf("sim.Check: a minimum of %d answered commands checks nothing", atLeast)
	}
	if len(recs) < atLeast {
		return fmt.Errorf("%d commands answered, want at least %d", len(recs), atLeast)
	}
	del := c.Delivered()
	sent := map[string]bool{}
	for _, r := range recs {
		sent[r.Payload] = true
		if r.Err != nil {
			return fmt.Errorf("command %q: %w", r.Payload, r.Err)
		}
		if want := "ack:" + r.Payload; string(r.Result.Response) != want {
			return fmt.Errorf("command %q: response %q", r.Payload, r.Result.Response)
		}
		if r.Result.Unopened > 0 && !unopenedOK {
			// Every device of a simulated cluster is active in every round.
			return fmt.Errorf("command %q: %d responses did not open", r.Payload, r.Result.Unopened)
		}
		if del[r.Payload] != 1 {
			return fmt.Errorf("command %q delivered %d times in %d attempts", r.Payload, del[r.Payload], r.Result.Attempts)
		}
	}
	for p, n := range del {
		if !sent[p] || n != 1 {
			return fmt.Errorf("device saw %q %d times (sent: %v)", p, n, sent[p])
		}
	}
	return nil
}
