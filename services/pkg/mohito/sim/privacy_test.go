package sim_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// capture is what one vendor account's credentials can see on the wire:
// every message on every subject the account reaches (its inbox, what it
// sends to the integrator, its devices' MQTT/NATS traffic).
type capture struct {
	mu   sync.Mutex
	msgs []wireMsg
	nc   *nats.Conn
}

type wireMsg struct {
	subject string
	size    int
	at      time.Time
}

func spy(t *testing.T, n *testenv.NATS, v int) *capture {
	c := &capture{nc: n.Connect(t, nats.UserInfo(contract.VendorUser(v), pw(contract.VendorUser(v))))}
	sub, err := c.nc.Subscribe(">", func(m *nats.Msg) {
		c.mu.Lock()
		c.msgs = append(c.msgs, wireMsg{subject: m.Subject, size: len(m.Data), at: time.Now()})
		// Device messages carry their round in the envelope header.
		if t, ok := mohito.EnvelopeRound(m.Data); strings.HasPrefix(m.Subject, "mohito.dev.") && ok {
			c.msgs[len(c.msgs)-1].subject += ".t" + strconv.FormatUint(t, 10)
		}
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// sync waits until every message published before now has reached the spy.
func (c *capture) sync(t *testing.T) {
	marker := "spy.marker." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := c.nc.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "spy marker", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.msgs {
			if m.subject == marker {
				return nil
			}
		}
		return fmt.Errorf("marker not seen")
	})
}

// transcript is the vendor's view of round t: protocol messages only
// (mohito.*, key announcements excluded), with the round id normalised.
type transcript struct {
	multiset []string // "subject size", sorted
	m6Order  []string // device command subjects in emission order
	m4Sizes  []int    // V*'s shuffled batches in emission order
	m2Sizes  []int    // the forwards V* received (M2), in arrival order
	perKind  map[string]int
}

func (c *capture) round(t uint64) transcript {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := strconv.FormatUint(t, 10)
	tr := transcript{perKind: map[string]int{}}
	for _, m := range c.msgs {
		s := m.subject
		if !strings.HasPrefix(s, "mohito.") {
			continue
		}
		isDev := strings.HasPrefix(s, "mohito.dev.")
		if isDev && !strings.HasSuffix(s, ".t"+ts) || !isDev && !strings.Contains(s, ".r."+ts+".") {
			continue
		}
		norm := strings.Replace(strings.TrimSuffix(s, ".t"+ts), ".r."+ts+".", ".r.T.", 1)
		tr.multiset = append(tr.multiset, fmt.Sprintf("%s %d", norm, m.size))
		kind := norm[strings.LastIndex(norm, ".")+1:]
		tr.perKind[kind]++
		if isDev && kind == "cmd" {
			tr.m6Order = append(tr.m6Order, norm)
		}
		switch kind {
		case "shuf":
			tr.m4Sizes = append(tr.m4Sizes, m.size)
		case "fwd":
			tr.m2Sizes = append(tr.m2Sizes, m.size)
		}
	}
	slices.Sort(tr.multiset)
	return tr
}

// privacyRun starts a fresh deployment, waits for round target and sends
// one command per destination in it; it returns each vendor's transcript
// of that round.
func privacyRun(t *testing.T, devices []int, dests [][2]int, target uint64) []transcript {
	h := start(t, devices, len(dests), 2, func(c *sim.Config) {
		c.Deployment = sim.SmallDeployment(devices, 256, time.Second)
		for v := range c.Deployment.Policy {
			c.Deployment.Policy[v].Width = 0 // a fixed C, so both runs draw the same N
		}
		c.Deployment.ResponseDeadline = 500 * time.Millisecond
	})
	var spies []*capture
	for v := range devices {
		spies = append(spies, spy(t, h.nats, v))
	}
	c := h.cluster
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("round %d open", target), func() error {
		ri, err := c.Users[0].GW.RoundInfo(ctx)
		if err != nil {
			return err
		}
		if ri.T > target {
			return fmt.Errorf("%w: round %d already past", testenv.ErrGiveUp, target)
		}
		if ri.T < target {
			return fmt.Errorf("round %d", ri.T)
		}
		return nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, len(dests))
	for u, d := range dests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Users[u].Send(ctx, &c.Creds[d[0]][d[1]], []byte(fmt.Sprintf("cmd-%d", u)))
			switch {
			case err != nil:
				errs <- err
			case res.T != target || res.Attempts != 1:
				errs <- fmt.Errorf("command %d went in round %d (attempt %d), want %d", u, res.T, res.Attempts, target)
			case string(res.Response) != fmt.Sprintf("ack:cmd-%d", u):
				errs <- fmt.Errorf("command %d: response %q", u, res.Response)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var out []transcript
	for _, s := range spies {
		s.sync(t)
		out = append(out, s.round(target))
	}
	return out
}

// TestVendorWireTranscriptIndependentOfRecipients captures each vendor
// account's NATS traffic (spec §9.2 items 9–11) in two runs of the same
// round with the same participating users and number of commands, but with
// every command to vendor 0 in one run and none in the other: every vendor
// (V* included) must see exactly the same messages — subjects, counts and
// sizes — one M6 per device in device order whatever it carries, and V*'s
// shuffled batches with the same sizes in the same order. Every forward V*
// receives is one M2 (Params.ForwardSize()): forwards batched by time differed
// between the runs under load (2 × 2 M2s in one, 2 + 1 + 1 in the other).
func TestVendorWireTranscriptIndependentOfRecipients(t *testing.T) {
	devices := []int{4, 4, 4}
	const target = 3
	var runs [2][]transcript
	t.Run("all-to-vendor-0", func(t *testing.T) {
		runs[0] = privacyRun(t, devices, [][2]int{{0, 0}, {0, 1}, {0, 2}, {0, 3}}, target)
	})
	t.Run("none-to-vendor-0", func(t *testing.T) {
		runs[1] = privacyRun(t, devices, [][2]int{{1, 0}, {1, 3}, {2, 1}, {2, 2}}, target)
	})
	if runs[0] == nil || runs[1] == nil {
		t.FailNow()
	}
	m2Size := sim.SmallDeployment(devices, 256, time.Second).Params.ForwardSize()
	for v := range devices {
		a, b := runs[0][v], runs[1][v]
		if len(a.multiset) == 0 {
			t.Fatalf("vendor %d saw nothing of round %d", v, target)
		}
		if !slices.Equal(a.multiset, b.multiset) {
			t.Errorf("vendor %d: transcripts differ\nrun A: %v\nrun B: %v", v, a.multiset, b.multiset)
		}
		if !slices.Equal(a.m6Order, b.m6Order) || len(a.m6Order) != devices[v] {
			t.Errorf("vendor %d: M6 emission order differs or not one per device: %v vs %v", v, a.m6Order, b.m6Order)
		}
		for _, tr := range []transcript{a, b} {
			for _, n := range tr.m2Sizes {
				if n != m2Size {
					t.Errorf("vendor %d: a forward of %d bytes; every forward is one M2 of %d: %v", v, n, m2Size, tr.m2Sizes)
					break
				}
			}
		}
		if !slices.Equal(a.m4Sizes, b.m4Sizes) {
			t.Errorf("vendor %d: shuffled batch sizes/order differ: %v vs %v", v, a.m4Sizes, b.m4Sizes)
		}
		t.Logf("vendor %d: %d messages in round %d, identical in both runs; per kind %v", v, len(a.multiset), target, a.perKind)
	}
}
