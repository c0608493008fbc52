package sim_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// roundInfos reads the published M0 of rounds ts (integrator account).
func roundInfos(t *testing.T, h *harness, ts []uint64) map[uint64]*mohito.RoundInfo {
	t.Helper()
	nc, err := nats.Connect(h.nats.URL(), nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), contract.BucketRoundInfo)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*mohito.RoundInfo{}
	for _, rt := range ts {
		e, err := kv.Get(t.Context(), "t."+strconv.FormatUint(rt, 10))
		if err != nil {
			t.Fatalf("round info %d: %v", rt, err)
		}
		ri, err := mohito.ParseRoundInfo(e.Value())
		if err != nil {
			t.Fatalf("round info %d: %v", rt, err)
		}
		out[rt] = ri
	}
	return out
}

// TestKeyEpochRotation: the integrator and vendor 0 rotate to key epoch 1
// while users keep sending. No round aborts, every command is delivered
// exactly once, rounds before the rotation name epoch 0 and rounds after it
// epoch 1 (never back), and W rounds later the old epoch is gone from both
// rings.
func TestKeyEpochRotation(t *testing.T) {
	const w = 16
	h := start(t, []int{3, 4}, 8, 2, func(c *sim.Config) { c.KeyRetention = w })
	c := h.cluster
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		waitFor(t, 60*time.Second, "5 planned rounds", func() bool { return h.planned.Load() >= 5 })
		if err := c.RotateIntegratorKey(1); err != nil {
			t.Error(err)
			return
		}
		if err := c.RotateVendorKey(t.Context(), 0, 1); err != nil {
			t.Error(err)
			return
		}
		rotated := h.planned.Load()
		waitFor(t, 90*time.Second, "old epochs retired", func() bool {
			return slices.Equal(c.IntegratorKeys().Epochs(), []uint32{1}) && slices.Equal(c.VendorKeys(0).Epochs(), []uint32{1})
		})
		waitFor(t, 60*time.Second, "rounds after retirement", func() bool { return h.planned.Load() >= rotated+w+5 })
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), c, stop)
	if t.Failed() {
		return
	}
	if err := sim.Check(c, recs, 8); err != nil {
		t.Fatal(err)
	}
	if n := h.aborted.Load(); n != 0 {
		t.Fatalf("%d rounds aborted across the rotation", n)
	}
	var ts []uint64
	for _, r := range h.Reports() {
		ts = append(ts, r.T)
	}
	slices.Sort(ts)
	infos := roundInfos(t, h, ts)
	var lastI, lastV uint32
	var firstI, firstV uint64
	for _, rt := range ts {
		ri := infos[rt]
		if ri.IntegratorEpoch < lastI || ri.VendorEpoch(0) < lastV {
			t.Fatalf("round %d names epochs (%d, %d) after (%d, %d)", rt, ri.IntegratorEpoch, ri.VendorEpoch(0), lastI, lastV)
		}
		if ri.VendorEpoch(1) != 0 {
			t.Fatalf("round %d: vendor 1 never rotated but is named at epoch %d", rt, ri.VendorEpoch(1))
		}
		if ri.IntegratorEpoch == 1 && firstI == 0 {
			firstI = rt
		}
		if ri.VendorEpoch(0) == 1 && firstV == 0 {
			firstV = rt
		}
		lastI, lastV = ri.IntegratorEpoch, ri.VendorEpoch(0)
	}
	if infos[ts[0]].IntegratorEpoch != 0 || infos[ts[0]].VendorEpoch(0) != 0 || lastI != 1 || lastV != 1 {
		t.Fatalf("first round names (%d, %d), last (%d, %d)", infos[ts[0]].IntegratorEpoch, infos[ts[0]].VendorEpoch(0), lastI, lastV)
	}
	shuffledBy0 := 0
	for _, rt := range ts {
		if rt >= firstV && infos[rt].Shuffler == 0 {
			shuffledBy0++
		}
	}
	if shuffledBy0 == 0 {
		t.Fatal("vendor 0 never shuffled under its new epoch")
	}
	t.Logf("%d commands over %d rounds; integrator epoch 1 from round %d, vendor 0 epoch 1 from round %d (%d rounds shuffled by it), none aborted",
		len(recs), len(ts), firstI, firstV, shuffledBy0)
}

// TestKeyEpochNotHeld: a vendor announces an epoch its shuffler does not
// hold. Rounds it is chosen to shuffle name that epoch; the shuffler reports
// the missing epoch (metric dropped{reason="key_epoch"}) and the coordinator
// aborts those rounds — no panic, other vendors' rounds go on.
func TestKeyEpochNotHeld(t *testing.T) {
	h := start(t, []int{2, 2}, 2, 1, nil)
	c := h.cluster
	waitFor(t, 60*time.Second, "2 planned rounds", func() bool { return h.planned.Load() >= 2 })
	stray, err := mohito.GenerateKey(mohito.SuiteX25519)
	if err != nil {
		t.Fatal(err)
	}
	ks := append(c.VendorKeys(0).PublicKeys(), mohito.EpochKey{Epoch: 9, Key: stray.PublicKey()})
	if err := c.AnnounceVendorKeys(t.Context(), 0, ks); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a round aborted for the missing epoch", func() bool { return h.aborted.Load() >= 1 })
	if n := testutil.ToFloat64(c.Metrics.Dropped.WithLabelValues("key_epoch")); n < 1 {
		t.Fatalf("dropped{key_epoch} = %v", n)
	}
	for _, r := range h.Reports() {
		if r.Aborted && r.Shuffler != 0 {
			t.Fatalf("round %d of shuffler %d aborted: %s", r.T, r.Shuffler, r.Reason)
		}
	}
	planned := h.planned.Load()
	waitFor(t, 60*time.Second, "vendor 1 keeps shuffling", func() bool { return h.planned.Load() > planned })
}
