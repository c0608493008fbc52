package sim_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestEncoderRescaleMidRun scales the OKVS encoders 1 → 2 → 3 → 1 while
// rounds run and users send commands, the way the operator rolls the
// StatefulSet: pods of the new partition count start while the old ones
// still run, old pods are stopped gracefully or killed abruptly mid-round.
// It asserts that no round is aborted (but for at most one per abrupt kill), every command
// reaches its device exactly once (at most once per attempt after such an abort) and is
// answered, and every (round, vendor) command table reaches the vendor exactly once (one blob
// per round in each vendor's V_IN stream) and is encoded once (again up to one redo per kill).
func TestEncoderRescaleMidRun(t *testing.T) {
	devices := []int{3, 4, 5, 2, 6, 3}
	reg := prometheus.NewRegistry()
	h := start(t, devices, 12, 2, func(c *sim.Config) {
		c.Deployment.Encoders = 1
		c.Registry = reg
	})
	d := sim.SmallDeployment(devices, 256, 0)
	owners := func(partitions int) []int {
		d.Encoders = partitions
		out := make([]int, len(devices))
		for v := range out {
			out[v] = d.EncoderOf(v)
		}
		return out
	}
	t.Logf("owners: P=1 %v, P=2 %v, P=3 %v", owners(1), owners(2), owners(3))
	// mid waits until the next round's plan is out: its records are flowing
	// to the encoders.
	mid := func(what string) {
		target := h.planned.Load() + 1
		waitFor(t, 60*time.Second, what, func() bool { return h.planned.Load() >= target })
	}
	settle := func(what string) {
		target := h.planned.Load() + 4
		waitFor(t, 60*time.Second, what, func() bool { return h.planned.Load() >= target })
	}
	c := h.cluster
	ctx := t.Context()
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		must := func(err error) bool {
			if err != nil {
				t.Error(err)
			}
			return err == nil
		}
		settle("rounds with one encoder")
		// 1 → 2: the new pod starts while the old partition 0 (P=1) still
		// owns every vendor, then partition 0 rolls gracefully.
		mid("mid-round before 1 → 2")
		if !must(c.StartEncoder(ctx, 1, 2)) {
			return
		}
		mid("overlap of P=1 and P=2")
		c.StopRole("encoder", 0)
		if !must(c.StartEncoder(ctx, 0, 2)) {
			return
		}
		settle("rounds with two encoders")
		// 2 → 3: partition 2 starts, partition 1 is killed abruptly
		// mid-round (its held records are redelivered), then 0 and 1 come
		// back with P=3.
		mid("mid-round before 2 → 3")
		if !must(c.StartEncoder(ctx, 2, 3)) {
			return
		}
		mid("mid-round, kill partition 1")
		c.Kill("encoder", 1)
		if !must(c.StartEncoder(ctx, 1, 3)) {
			return
		}
		c.StopRole("encoder", 0)
		if !must(c.StartEncoder(ctx, 0, 3)) {
			return
		}
		settle("rounds with three encoders")
		// 3 → 1: partition 2 is killed mid-round, 1 is stopped, 0 takes
		// every vendor back.
		mid("mid-round before 3 → 1")
		c.Kill("encoder", 2)
		c.StopRole("encoder", 1)
		c.StopRole("encoder", 0)
		if !must(c.StartEncoder(ctx, 0, 1)) {
			return
		}
		settle("rounds with one encoder again")
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(ctx, c, stop)
	if t.Failed() {
		return
	}
	// Graceful rescaling aborts nothing. The two abrupt kills mid-round may each cost the round
	// in flight when its redelivered records come after the response deadline (on a loaded
	// machine): its users retry, and a device that already executed a retried command answers
	// it from memory. So: at most one aborted round per kill, every command exactly once.
	const kills = 2
	n := h.aborted.Load()
	for _, r := range h.Reports() {
		if r.Aborted {
			t.Logf("round %d aborted: %s", r.T, r.Reason)
		}
	}
	if n > kills {
		t.Fatalf("%d rounds aborted while the encoders were rescaled (at most %d, one per kill)", n, kills)
	}
	if err := sim.Check(c, recs, 12); err != nil {
		t.Fatal(err)
	}

	// Freeze the round clock, then count what each vendor received.
	c.StopRole("coordinator", 0)
	var planned []uint64
	for _, r := range h.Reports() {
		if !r.Aborted { // an aborted round may have died before its tables were sent
			planned = append(planned, r.T)
		}
	}
	var tables map[int]map[uint64][]string
	testenv.Eventually(t, 30*time.Second, "a table for every planned round at every vendor", func() error {
		var err error
		if tables, err = vendorTables(ctx, h.nats.URL(), len(devices)); err != nil {
			return err
		}
		for v := range devices {
			for _, rt := range planned {
				if len(tables[v][rt]) == 0 {
					return fmt.Errorf("vendor %d has no table for round %d", v, rt)
				}
			}
		}
		return nil
	})
	sent := 0
	for v := range devices {
		for rt, blobs := range tables[v] {
			if len(blobs) != 1 {
				t.Errorf("vendor %d received %d different tables for round %d", v, len(blobs), rt)
			}
			sent++
		}
	}
	// An encoder killed between encoding a table and storing it loses that work; the next owner
	// encodes it again (one table is still sent). That is at most one extra encode per kill.
	if enc := encodes(t, reg); enc < sent || enc > sent+kills {
		t.Errorf("%d OKVS encodes for %d (round, vendor) tables (at most %d extra, one per kill)", enc, sent, kills)
	} else if enc > sent {
		t.Logf("%d OKVS encodes for %d tables: %d redone after a kill", enc, sent, enc-sent)
	}
	t.Logf("%d commands over %d rounds, %d tables, each encoded and received once; encoders 1→2→3→1", len(recs), len(planned), sent)
}

// vendorTables reads every command table chunk in each vendor's V_IN stream
// (as the vendor's own user) and returns the distinct blob ids per round.
func vendorTables(ctx context.Context, url string, vendors int) (map[int]map[uint64][]string, error) {
	out := map[int]map[uint64][]string{}
	for v := range vendors {
		nc, err := nats.Connect(url, nats.UserInfo(contract.VendorUser(v), pw(contract.VendorUser(v))))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		cons, err := js.OrderedConsumer(ctx, contract.StreamVendorIn, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{contract.VendorInbox(v) + ".r.*.okvs"},
		})
		if err != nil {
			return nil, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		seen := map[uint64]map[string]bool{}
		for n := info.NumPending; n > 0; {
			b, err := cons.Fetch(int(min(n, 256)), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return nil, err
			}
			for m := range b.Messages() {
				n--
				// mohito.v<v>.in.r.<t>.okvs
				f := strings.Split(m.Subject(), ".")
				rt, err := strconv.ParseUint(f[4], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("subject %s: %w", m.Subject(), err)
				}
				if seen[rt] == nil {
					seen[rt] = map[string]bool{}
				}
				seen[rt][m.Headers().Get(natsx.HdrBlob)] = true
			}
			if err := b.Error(); err != nil {
				return nil, err
			}
		}
		out[v] = map[uint64][]string{}
		for rt, ids := range seen {
			for id := range ids {
				out[v][rt] = append(out[v][rt], id)
			}
		}
	}
	return out, nil
}

// encodes is the number of OKVS command tables encoded by every encoder of
// the run (the okvs_encode stage histogram's sample count).
func encodes(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mohito_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == "okvs_encode" {
					return int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}
