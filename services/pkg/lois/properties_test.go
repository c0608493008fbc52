package lois_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// TestReplicaPartition is spec §3.11 / T7: the download pairs of one stream split over R
// replicas are pairwise disjoint (by id and by keystream) and together are exactly the
// stream's usable pairs; dup indices and id 0 are never handed out.
func TestReplicaPartition(t *testing.T) {
	key := lois.StreamKey([32]byte{1}, lois.Down, 80, 3)
	s := &lois.Stream{Key: key, Dir: lois.Down, SID: 80, Epoch: 3, N: 5000, Dup: []uint32{0, 7, 99, 4000}}
	all := s.Pairs(nil, 1, 0)
	if len(all) != 5000-4 {
		t.Fatalf("%d usable pairs, want 4996", len(all))
	}
	for _, R := range []int{1, 2, 3, 5, 8} {
		ids := map[uint64]int{}
		kss := map[[16]byte]int{}
		for r := range R {
			for _, p := range s.Pairs(nil, R, r) {
				if prev, ok := ids[p.ID]; ok {
					t.Fatalf("R=%d: id held by replicas %d and %d", R, prev, r)
				}
				if prev, ok := kss[p.KS]; ok {
					t.Fatalf("R=%d: keystream held by replicas %d and %d", R, prev, r)
				}
				ids[p.ID], kss[p.KS] = r, r
			}
		}
		if len(ids) != len(all) {
			t.Fatalf("R=%d: partitions cover %d of %d pairs", R, len(ids), len(all))
		}
		for _, d := range s.Dup {
			if _, ok := ids[lois.Segment(&key, d).ID]; ok {
				t.Fatalf("R=%d: dup index %d handed out", R, d)
			}
		}
	}
}

// TestKeystreamNeverReused is spec T7: with several SI replicas serving one service and the
// DI uploading, no id appears twice on the wire in either direction, every packet is
// recovered, and pools run dry instead of reusing.
func TestKeystreamNeverReused(t *testing.T) {
	w := newWorld(t, false, []uint16{5, 6}, 512, 3)
	seen := map[uint64]string{}
	r := chacha("t7")
	note := func(wire []byte, what string) {
		id := binary.BigEndian.Uint64(wire[44:])
		if prev, ok := seen[id]; ok {
			t.Fatalf("id %x used twice (%s, %s)", id, prev, what)
		}
		seen[id] = what
	}
	for i := 0; ; i++ {
		sid := uint16(5 + i%2)
		buf, off := randPacket(r, dip, cip, sid, "none", 0x18, 40)
		noff, err := w.dev.HideUpload(buf, off, now)
		if errors.Is(err, lois.ErrExhausted) {
			break
		}
		must(t, err)
		note(buf[noff:], fmt.Sprint("up ", i))
		be, err := w.ci.Forward(buf[noff:])
		must(t, err)
		if _, _, err := w.si[int(be.IP[3])-1].RecoverUpload(buf, noff); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	for rep := range 3 {
		for i := 0; ; i++ {
			sid := uint16(5 + i%2)
			buf, off := randPacket(r, [4]byte{10, 0, 0, byte(rep + 1)}, dip, 0, "none", 0x10, 40)
			binary.BigEndian.PutUint16(buf[off+20:], portOff+sid)
			noff, err := w.si[rep].HideDownload(buf, off, w.siPools[rep], now)
			if errors.Is(err, lois.ErrExhausted) {
				if w.siPools[rep].Get(5).Len()+w.siPools[rep].Get(6).Len() != 0 {
					continue
				}
				break
			}
			must(t, err)
			note(buf[noff:], fmt.Sprint("down replica ", rep))
			if _, _, err := w.dev.RecoverDownload(buf, noff); err != nil {
				t.Fatalf("replica %d packet %d: %v", rep, i, err)
			}
		}
	}
	if len(seen) < 2*(512-8)*2-10 {
		t.Fatalf("only %d packets sent", len(seen))
	}
}

// TestLossAndReordering is spec T11: with 30 % loss and permutation within windows of 1000,
// every delivered packet is recovered exactly, and after expiry + grace the unconsumed
// entries are collected and the tables are back to their baseline size.
func TestLossAndReordering(t *testing.T) {
	w := newWorld(t, true, []uint16{5}, 4096, 1)
	base := w.si[0].Up.Stats().Bytes
	r := chacha("t11")
	type sent struct {
		buf  []byte
		off  int
		want []byte
	}
	var flight []sent
	for range 4000 {
		buf, off := randPacket(r, dip, cip, 5, "mss", 0x18, int(r.Uint64()%300))
		want := bytes.Clone(buf[off:])
		noff, err := w.dev.HideUpload(buf, off, now)
		must(t, err)
		if r.Uint64()%100 < 30 {
			continue // lost
		}
		flight = append(flight, sent{buf, noff, want})
	}
	for lo := 0; lo < len(flight); lo += 1000 {
		win := flight[lo:min(lo+1000, len(flight))]
		for i := len(win) - 1; i > 0; i-- {
			j := int(r.Uint64() % uint64(i+1))
			win[i], win[j] = win[j], win[i]
		}
	}
	for _, p := range flight {
		be, err := w.ci.Forward(p.buf[p.off:])
		must(t, err)
		roff, _, err := w.si[0].RecoverUpload(p.buf, p.off)
		must(t, err)
		copy(p.want[16:20], be.IP[:])
		binary.BigEndian.PutUint16(p.want[22:], be.Port)
		lois.FixChecksums(p.want)
		if !bytes.Equal(p.buf[roff:], p.want) {
			t.Fatal("a reordered packet was not recovered exactly")
		}
	}
	left := w.si[0].Up.Stats().Entries
	if left == 0 {
		t.Fatal("lost packets left no unconsumed entries: the test lost nothing")
	}
	if n := w.si[0].Up.GC(expiry + 120); n != 0 {
		t.Fatalf("GC collected %d entries before expiry + grace", n)
	}
	if n := w.si[0].Up.GC(expiry + 121); n != left {
		t.Fatalf("GC collected %d of %d unconsumed entries", n, left)
	}
	if st := w.si[0].Up.Stats(); st.Bytes > base || st.Entries != 0 {
		t.Fatalf("after GC: %d B, %d entries (baseline %d B)", st.Bytes, st.Entries, base)
	}
}

// TestMultiCloudDI is spec T16: a DI with many clouds probes each download table and resolves
// every packet to the cloud that sent it, with zero mis-resolutions in exact mode.
func TestMultiCloudDI(t *testing.T) {
	const clouds = 40
	var devs []*lois.Device
	var servers []*lois.Server
	var pools []*lois.Pools
	for c := range clouds {
		seed := [32]byte{byte(c), 1}
		cfg := lois.Config{CIP: [4]byte{203, 0, 113, byte(c)}}
		dt, _ := lois.NewDVT(lois.DVTConfig{TableCapacity: 64})
		st, _ := lois.NewDVT(lois.DVTConfig{TableCapacity: 64})
		s := &lois.Stream{Key: lois.StreamKey(seed, lois.Down, 5, 1), Dir: lois.Down, SID: 5, Epoch: 1, N: 64, Expiry: expiry}
		must(t, dt.Install(s))
		p := &lois.Pool{}
		p.Add(s, 1, 0, expiry)
		devs = append(devs, lois.NewDevice(cfg, dt))
		servers = append(servers, lois.NewServer(cfg, st, map[uint16]uint16{8005: 5}))
		pools = append(pools, pools5(p))
	}
	r := chacha("t16")
	for i := range 40 * clouds {
		c := int(r.Uint64() % clouds)
		buf, off := randPacket(r, [4]byte{10, 0, 0, 1}, dip, 0, "none", 0x10, 10)
		binary.BigEndian.PutUint16(buf[off+20:], 8005)
		noff, err := servers[c].HideDownload(buf, off, pools[c], now)
		if errors.Is(err, lois.ErrExhausted) {
			continue
		}
		must(t, err)
		_, got, sid, err := lois.RecoverDownloadAny(devs, buf, noff)
		if err != nil || got != c || sid != 5 {
			t.Fatalf("packet %d from cloud %d resolved to %d (%v)", i, c, got, err)
		}
	}
}

// TestPoolExhaustionAndExpiry is spec T14 and §3.12: an empty pool refuses (never reuses), a
// new epoch refills it, entries past expiry − margin are dropped and counted, and the
// low-water mark signals replenishment.
func TestPoolExhaustionAndExpiry(t *testing.T) {
	s := &lois.Stream{Key: [32]byte{5}, N: 100}
	p := &lois.Pool{LowWater: lois.LowWaterMark(0)}
	p.Add(s, 1, 0, 1000)
	if p.NeedsReplenish() || lois.LowWaterMark(100) != 1000 {
		t.Fatal("low-water mark")
	}
	seen := map[uint64]bool{}
	for {
		if p.Len() >= 64 == p.NeedsReplenish() {
			t.Fatalf("NeedsReplenish %v at %d pairs", p.NeedsReplenish(), p.Len())
		}
		pr, ok := p.Pop(10)
		if !ok {
			break
		}
		if seen[pr.ID] {
			t.Fatal("pool handed out an id twice")
		}
		seen[pr.ID] = true
	}
	if len(seen) != 100 {
		t.Fatalf("pool held %d", len(seen))
	}
	if _, ok := p.Pop(10); ok {
		t.Fatal("exhausted pool returned a pair")
	}
	s2 := &lois.Stream{Key: [32]byte{6}, N: 10, Epoch: 2}
	p.Add(s2, 1, 0, 500)
	if _, ok := p.Pop(500); ok || p.Expired != 10 {
		t.Fatalf("pairs past their stop time were used (expired %d)", p.Expired)
	}
	rk := lois.Rekey{Start: 0}
	if rk.Due(3600) || !rk.Due(24*3600) || !(lois.Rekey{Used: 1 << 32}).Due(0) {
		t.Fatal("rekey schedule")
	}
}

// TestPoolLowWaterFollowsRate is spec §3.12's low-water mark max(64, 2 × pps × 5 s): the
// pool measures the rate it is drained at (over windows of at least a second) and raises or
// lowers its mark with it, never below the floor.
func TestPoolLowWaterFollowsRate(t *testing.T) {
	p := &lois.Pool{}
	p.Add(&lois.Stream{Key: [32]byte{7}, N: 5000}, 1, 0, 1<<40)
	if p.LowWater != 64 {
		t.Fatalf("initial mark %d, want 64", p.LowWater)
	}
	p.Measure(100, 64) // starts the window
	for range 300 {    // 300 pairs in 2 s: 150/s → 2 × 150 × 5 = 1500
		p.Pop(101)
	}
	p.Measure(100, 64) // same second: no change
	if p.LowWater != 64 {
		t.Fatalf("mark moved within the window: %d", p.LowWater)
	}
	p.Measure(102, 64)
	if p.LowWater != 1500 {
		t.Fatalf("mark %d at 150 pkt/s, want 1500", p.LowWater)
	}
	p.Measure(112, 64) // idle for 10 s: back to the floor
	if p.LowWater != 64 {
		t.Fatalf("idle mark %d, want 64", p.LowWater)
	}
	p.Measure(113, 200)
	if p.LowWater != 200 {
		t.Fatalf("mark %d under a floor of 200", p.LowWater)
	}
	if p.Popped() != 300 || p.Added() < 4900 || p.Added() > 5000 {
		t.Fatalf("popped %d added %d", p.Popped(), p.Added())
	}
}

// TestRekeyLimits is spec §3.12's full rekey trigger: a seed is due after 24 h or 2³²
// keystreams by default, or after configured (small) limits; Allows refuses a grant that
// would cross the keystream limit.
func TestRekeyLimits(t *testing.T) {
	l := lois.RekeyLimits{Seconds: 60, Streams: 1000}
	r := lois.Rekey{Start: 100, Used: 900}
	if r.DueWith(159, l) || !r.DueWith(160, l) {
		t.Fatal("age limit")
	}
	if !r.Allows(120, 100, l) || r.Allows(120, 101, l) || r.Allows(160, 1, l) {
		t.Fatal("keystream limit")
	}
	if (lois.Rekey{Used: 1000}).DueWith(0, l) == false {
		t.Fatal("used up seed not due")
	}
	def := lois.Rekey{Start: 0, Used: lois.RekeyAfterStreams - 10}
	if !def.Allows(0, 10, lois.RekeyLimits{}) || def.Allows(0, 11, lois.RekeyLimits{}) || def.Allows(24*3600, 1, lois.RekeyLimits{}) {
		t.Fatal("default limits")
	}
}
