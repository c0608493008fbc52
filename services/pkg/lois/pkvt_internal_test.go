package lois

import (
	"encoding/binary"
	"math"
	mrand "math/rand/v2"
	"testing"
)

// TestSizingMatchesReference is spec T18: the geometry reproduces the Vacuum filter
// reference init() (the expected values come from a line-by-line Python port of cuckoo.h's
// init, proper_alt_range and balls_in_bins_max_load, plus the [R] final rounding).
func TestSizingMatchesReference(t *testing.T) {
	for _, c := range []struct {
		items int
		m     uint32
		mask  [4]uint32
	}{
		{100, 32, [4]uint32{31, 31, 31, 31}},
		{1000, 384, [4]uint32{127, 127, 127, 127}},
		{4096, 1536, [4]uint32{511, 511, 511, 511}},
		{10000, 3072, [4]uint32{1023, 1023, 1023, 1023}},
		{38400, 12288, [4]uint32{4095, 63, 15, 15}},
		{40000, 12288, [4]uint32{4095, 63, 15, 15}},
		{100000, 32768, [4]uint32{8191, 127, 15, 15}},
		{1000000, 262144, [4]uint32{16383, 127, 31, 31}},
		{3000000, 786432, [4]uint32{16383, 127, 31, 31}},
		{10000000, 2605056, [4]uint32{16383, 127, 31, 31}},
	} {
		g := sizeGeometry(c.items)
		if g.m != c.m || g.mask != c.mask {
			t.Errorf("items %d: m %d masks %v, want %d %v", c.items, g.m, g.mask, c.m, c.mask)
		}
	}
}

// TestAltInvolution is spec T18: Alt(Alt(B,f),f) = B and Alt(B,f) < m for all B and f.
func TestAltInvolution(t *testing.T) {
	for _, items := range []int{10, 1000, 40000, 1000000} {
		g := sizeGeometry(items)
		for f := uint32(1); f <= 0xFFFF; f++ {
			for _, b := range []uint32{0, 1, g.m / 2, g.m - 1, (f * 7919) % g.m} {
				a := g.alt(b, uint16(f))
				if a >= g.m || g.alt(a, uint16(f)) != b {
					t.Fatalf("items %d: Alt(%d,%d)=%d (m %d)", items, b, f, a, g.m)
				}
			}
		}
	}
}

func randKS(r *mrand.ChaCha8) *[16]byte {
	var k [16]byte
	r.Read(k[:])
	return &k
}

// TestTableFillsToTarget is spec T18: 0.95 × the sized capacity random keys go into one table without a
// failed insert in at least 99 % of runs, and none is lost.
func TestTableFillsToTarget(t *testing.T) {
	const runs = 100
	fails := 0
	for run := range runs {
		r := mrand.NewChaCha8([32]byte{byte(run)})
		capacity := 10000
		d, _ := NewDVT(DVTConfig{TableCapacity: capacity, Key: [16]byte{1, byte(run)}})
		n := int(0.95 * float64(capacity))
		ids := make([]uint64, 0, n)
		for range n {
			id := r.Uint64()
			if err := d.Insert(id, randKS(r), 1, 0); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if len(d.tables) > 1 {
			fails++
		}
		for _, id := range ids {
			if _, _, _, ok := d.Lookup(id); !ok {
				t.Fatalf("run %d: false negative", run)
			}
		}
	}
	if fails > runs/100 {
		t.Fatalf("%d of %d runs needed a second table at load 0.95", fails, runs)
	}
}

// TestDVTInvariants checks the table against a model map under random insert, take, delete
// and growth (spec T18, T19, T10): no false negatives, a taken id misses, no two live entries
// share an id (or, in 16-bit mode, a bucket pair and fingerprint), counts agree, every occupied
// slot sits in one of its two candidate buckets, and the DVF holds exactly the live keystreams.
func TestDVTInvariants(t *testing.T) {
	for _, fp16 := range []bool{false, true} {
		r := mrand.NewChaCha8([32]byte{7})
		d, _ := NewDVT(DVTConfig{TableCapacity: 500, Fingerprint16: fp16, Dedup: true})
		model := map[uint64][16]byte{}
		var live []uint64
		maxTables := 0
		for step := range 30000 {
			switch op := r.Uint64() % 10; {
			case op < 6 || len(live) == 0:
				id, ks := r.Uint64(), randKS(r)
				err := d.InsertChecked(id, ks, uint16(id), 0)
				if err == ErrDuplicateID || err == ErrDuplicateKS {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				model[id] = *ks
				live = append(live, id)
			default:
				i := int(r.Uint64() % uint64(len(live)))
				id := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				ks, sid, ok := d.Take(id)
				if !ok || ks != model[id] || sid != uint16(id) {
					t.Fatalf("step %d: take %x: ok %v", step, id, ok)
				}
				delete(model, id)
				if _, _, _, ok := d.Lookup(id); ok && !fp16 {
					t.Fatalf("step %d: taken id still found", step)
				}
			}
			maxTables = max(maxTables, len(d.tables))
			if step%997 == 0 {
				checkInvariants(t, d, model)
			}
		}
		checkInvariants(t, d, model)
		if maxTables < 2 {
			t.Errorf("fp16=%v: the DVT never grew (max %d tables)", fp16, maxTables)
		}
	}
}

func checkInvariants(t *testing.T, d *DVT, model map[uint64][16]byte) {
	t.Helper()
	count := 0
	seen := map[[3]uint32]bool{}
	for ti, tb := range d.tables {
		n := 0
		for s := range uint32(tb.slots()) {
			if !tb.occupied(s) {
				continue
			}
			f := tb.fpAt(s)
			n++
			b := s / slotsPerBucket
			if tb.id != nil {
				b1, b2, f2 := d.hash(tb.id[s])
				if f2 != f || (b != b1 && b != b2) {
					t.Fatalf("table %d slot %d: id not in a candidate bucket", ti, s)
				}
			}
			pair := [3]uint32{min(b, d.g.alt(b, f)), max(b, d.g.alt(b, f)), uint32(f)}
			if d.cfg.Fingerprint16 && seen[pair] {
				t.Fatalf("two live entries share bucket pair and fingerprint %v", pair)
			}
			seen[pair] = true
			if d.cfg.Dedup && !d.filters[ti].has(d, &tb.val[s].ks) {
				t.Fatalf("table %d: keystream fingerprint not in its aligned DVF filter", ti)
			}
		}
		if n != tb.count {
			t.Fatalf("table %d: count %d, occupied %d", ti, tb.count, n)
		}
		if d.cfg.Dedup && d.filters[ti].count != n {
			t.Fatalf("filter %d holds %d, table %d", ti, d.filters[ti].count, n)
		}
		count += n
	}
	if count != len(model) {
		t.Fatalf("DVT holds %d entries, model %d", count, len(model))
	}
	for id, ks := range model {
		got, _, _, ok := d.Lookup(id)
		if !ok || got != ks {
			t.Fatalf("false negative for %x", id)
		}
	}
}

func (t *table) has(d *DVT, ks *[16]byte) bool {
	b1, b2, f := d.ksHash(ks)
	return t.find(b1, b2, f, 0) >= 0
}

// TestDVTGrowthAndFree is spec T19: a failed insert links a table, victims moved there are
// found, a table whose entries are all consumed is freed with its filter, and expiry frees
// tables whose entries were never consumed (spec T11: memory back to baseline).
func TestDVTGrowthAndFree(t *testing.T) {
	r := mrand.NewChaCha8([32]byte{8})
	d, _ := NewDVT(DVTConfig{TableCapacity: 100, Dedup: true, Grace: 120})
	base := d.Stats().Bytes
	var ids []uint64
	for len(d.tables) < 3 {
		id := r.Uint64()
		if err := d.InsertChecked(id, randKS(r), 1, 1000); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if _, _, _, ok := d.Lookup(id); !ok {
			t.Fatal("entry lost in growth")
		}
	}
	first := d.tables[0]
	var inFirst []uint64
	for _, id := range ids {
		if _, _, loc, _ := d.Lookup(id); loc.table == first {
			inFirst = append(inFirst, id)
		}
	}
	for _, id := range inFirst {
		d.Take(id)
	}
	if d.indexOf(first) >= 0 || len(d.filters) != len(d.tables) {
		t.Fatal("an emptied non-tail table was not freed with its filter")
	}
	d.Rotate()
	if d.GC(1000+120) != 0 {
		t.Fatal("GC before expiry + grace")
	}
	if dropped := d.GC(1000 + 121); dropped != len(ids)-len(inFirst) {
		t.Fatalf("GC dropped %d, want %d", dropped, len(ids)-len(inFirst))
	}
	if d.Stats().Bytes != base || d.Stats().Entries != 0 {
		t.Fatalf("memory %d after GC, baseline %d", d.Stats().Bytes, base)
	}
}

// TestFalseMatchRate16 is spec T13 in 16-bit mode: random ids match with probability within
// 2× of 8·α·s/2¹⁶ (and exact mode never matches, TestUnknownIDsRejected).
func TestFalseMatchRate16(t *testing.T) {
	r := mrand.NewChaCha8([32]byte{9})
	d, _ := NewDVT(DVTConfig{TableCapacity: 40000, Fingerprint16: true})
	for d.Stats().Entries < 38000 {
		d.Insert(r.Uint64(), randKS(r), 1, 0)
	}
	st := d.Stats()
	alpha := float64(st.Entries) / float64(st.Slots)
	want := 8 * alpha * float64(st.Tables) / 65536
	const probes = 2_000_000
	hits := 0
	for range probes {
		if _, _, _, ok := d.Lookup(r.Uint64()); ok {
			hits++
		}
	}
	got := float64(hits) / probes
	if got > 2*want || got < want/2 {
		t.Fatalf("false-match rate %.3g, model 8·α·s/2¹⁶ = %.3g", got, want)
	}
	t.Logf("false-match rate %.3g (model %.3g, α %.3f, s %d)", got, want, alpha, st.Tables)
}

// TestSipHashVector pins SipHash-2-4 against the reference vector for the 8-byte message
// 00..07 under key 00..0f (Aumasson–Bernstein, vectors.h).
func TestSipHashVector(t *testing.T) {
	var key [16]byte
	for i := range key {
		key[i] = byte(i)
	}
	k := sipKey{binary.LittleEndian.Uint64(key[:8]), binary.LittleEndian.Uint64(key[8:])}
	if got := k.sum64(0x0706050403020100); got != 0x93f5f5799a932462 {
		t.Fatalf("siphash 8 bytes = %x", got)
	}
	var msg [16]byte
	for i := range msg {
		msg[i] = byte(i)
	}
	if got := k.sum128(binary.LittleEndian.Uint64(msg[:8]), binary.LittleEndian.Uint64(msg[8:])); got != 0x3f2acc7f57c29bdb {
		t.Fatalf("siphash 16 bytes = %x", got)
	}
	_ = math.Pi
}

// TestEpochRotation is spec §3.12: each epoch window fills its own tail table after Rotate, so
// GC at the first epoch's expiry + grace frees exactly that epoch's unconsumed entries while the
// next epoch's stay found.
func TestEpochRotation(t *testing.T) {
	d, _ := NewDVT(DVTConfig{TableCapacity: 300, Grace: 120})
	e1 := &Stream{Key: [32]byte{1}, N: 200, Epoch: 1, Expiry: 1000}
	e2 := &Stream{Key: [32]byte{2}, N: 200, Epoch: 2, Expiry: 4600}
	if err := d.Install(e1); err != nil {
		t.Fatal(err)
	}
	d.Rotate()
	if err := d.Install(e2); err != nil {
		t.Fatal(err)
	}
	if got := len(d.tables); got != 2 {
		t.Fatalf("%d tables after one rotation", got)
	}
	p1, p2 := e1.Pairs(nil, 1, 0), e2.Pairs(nil, 1, 0)
	for _, p := range p1[:50] { // some of epoch 1 is used, the rest is lost
		d.Take(p.ID)
	}
	if n := d.GC(1000 + 121); n != len(p1)-50 {
		t.Fatalf("GC dropped %d, want the %d unconsumed epoch-1 entries", n, len(p1)-50)
	}
	for _, p := range p1 {
		if _, _, _, ok := d.Lookup(p.ID); ok {
			t.Fatal("an epoch-1 entry survived its expiry + grace")
		}
	}
	for _, p := range p2 {
		if ks, _, _, ok := d.Lookup(p.ID); !ok || ks != p.KS {
			t.Fatal("an epoch-2 entry was lost")
		}
	}
}
