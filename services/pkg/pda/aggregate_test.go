package pda

import (
	"errors"
	"slices"
	"testing"
)

// TestAggregateEndToEnd is the in-process property test: random reporting sets over many
// participants; the revealed set must be exactly {k : #distinct reporters(k) ≥ τ} with
// exact counts and values, in both count modes and both groups (T-FUN-1/2/3/5).
func TestAggregateEndToEnd(t *testing.T) {
	cases := []struct {
		name         string
		o            deployOpts
		participants int
		keys         int
	}{
		{"ristretto255/distinct", deployOpts{mode: CountDistinctParticipants, tau: 4, seed: 1}, 12, 24},
		{"ristretto255/tuples", deployOpts{mode: CountTuples, tau: 4, seed: 2}, 12, 24},
		{"ristretto255/values", deployOpts{mode: CountDistinctParticipants, tau: 3, values: []uint16{1, 2, 3, 5, 8}, seed: 3}, 8, 12},
		{"p256/distinct", deployOpts{group: P256, tau: 3, seed: 4}, 5, 6},
		{"p256/values", deployOpts{group: P256, tau: 2, values: []uint16{0, 7}, seed: 5}, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDeployment(t, tc.o)
			rnd := detRand(tc.o.seed + 100)
			keys := make([]Key, tc.keys)
			for i := range keys {
				var b [8]byte
				rnd.Read(b[:])
				keys[i] = opaqueKey(t, b[:])
			}
			reporters := make(map[string]map[int]bool) // canon → distinct reporters
			tuples := make(map[string]int)
			values := make(map[string][]uint16) // canon → values of counted entries
			for p := range tc.participants {
				var obs []Observation
				for i, k := range keys {
					// Key i is reported by participant p with probability ≈ (i+1)/keys, so the
					// reporter counts straddle τ.
					if rnd.Uint64()%uint64(tc.keys) > uint64(i) {
						continue
					}
					v := uint16(1)
					if len(tc.o.values) > 0 {
						v = tc.o.values[rnd.Uint64()%uint64(len(tc.o.values))]
					}
					reps := 1
					if i%5 == 0 {
						reps = 2 // a duplicate within one participant's session
					}
					c := string(k.Canonical())
					if reporters[c] == nil {
						reporters[c] = map[int]bool{}
					}
					for range reps {
						obs = append(obs, Observation{Key: k, Value: v})
						tuples[c]++
						if tc.o.mode == CountTuples || !reporters[c][p] {
							values[c] = append(values[c], v)
						}
					}
					reporters[c][p] = true
				}
				if rej := d.submit(pname(p), obs); len(rej) != 0 {
					t.Fatalf("honest participant rejected: %v", rej[0].Err)
				}
			}
			d.flush()
			got := resultMap(d.reveal())
			for _, k := range keys {
				c := string(k.Canonical())
				count := len(reporters[c])
				if tc.o.mode == CountTuples {
					count = tuples[c]
				}
				r, ok := got[c]
				if want := count >= int(tc.o.tau); ok != want {
					t.Fatalf("key with count %d: revealed=%v, τ=%d", count, ok, tc.o.tau)
				}
				if !ok {
					continue
				}
				if r.Count != count {
					t.Errorf("count %d, want %d", r.Count, count)
				}
				if len(tc.o.values) > 0 && tc.o.mode == CountTuples {
					want := slices.Clone(values[c])
					slices.Sort(want)
					if !slices.Equal(r.Values, want) {
						t.Errorf("values %v, want %v", r.Values, want)
					}
				}
				delete(got, c)
			}
			if len(got) != 0 {
				t.Fatalf("%d unexpected keys revealed", len(got))
			}
			// A second pass with no new entries issues no request.
			if reqs, _ := d.table.RevealRequests(); len(reqs) != 0 {
				t.Fatalf("%d requests without new entries", len(reqs))
			}
		})
	}
}

// TestValuesAggregate checks the value column of a revealed row against a plaintext
// reference (T-FUN-4 style) in distinct mode, where each participant reports once.
func TestValuesAggregate(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, values: []uint16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, seed: 9})
	k := opaqueKey(t, []byte("median-key"))
	vals := []uint16{9, 2, 7, 7, 10}
	for i, v := range vals {
		d.submit(pname(i), []Observation{{Key: k, Value: v}})
	}
	d.flush()
	got := d.reveal()
	if len(got) != 1 {
		t.Fatalf("revealed %d rows", len(got))
	}
	want := slices.Clone(vals)
	slices.Sort(want)
	if !slices.Equal(got[0].Values, want) || got[0].Values[len(want)/2] != 7 {
		t.Fatalf("values %v, want %v (median 7)", got[0].Values, want)
	}
}

// TestCanonicalFormsAggregate is T-FUN-10: one key in three spellings from three
// participants reaches τ = 3.
func TestCanonicalFormsAggregate(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, chunks: 2, seed: 10})
	k1 := ipKey(t, "10.0.0.1")
	k2, err := IPKeyFromBytes([]byte{0x0a, 0, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	k3 := ipKey(t, "::ffff:10.0.0.1")
	d1, _ := DomainKey("Example.COM.")
	d2, _ := DomainKey("example.com")
	d3, _ := DomainKey("EXAMPLE.com")
	u1, _ := URLKey("HTTP://Example.com:80/a/./b/../c?x=%7e")
	u2, _ := URLKey("http://example.com/a/c?x=~")
	u3, _ := URLKey("http://EXAMPLE.COM/a/c/../c?x=%7E#frag")
	for i, ks := range [][]Key{{k1, d1, u1}, {k2, d2, u2}, {k3, d3, u3}} {
		var obs []Observation
		for _, k := range ks {
			obs = append(obs, Observation{Key: k, Value: 1})
		}
		d.submit(pname(i), obs)
	}
	d.flush()
	got := resultMap(d.reveal())
	for _, k := range []Key{k1, d1, u1} {
		r, ok := got[string(k.Canonical())]
		if !ok || r.Count != 3 {
			t.Errorf("%s (%s): revealed=%v count=%d", k, k.Text(), ok, r.Count)
		}
	}
	if len(got) != 3 {
		t.Errorf("revealed %d keys, want 3", len(got))
	}
}

// TestDuplicatesAndWindows: one participant's duplicates count once in distinct mode and
// τ times in tuples mode (T-FUN-5, T-MAL-7); windows are independent with different tags
// (T-FUN-6).
func TestDuplicatesAndWindows(t *testing.T) {
	k := opaqueKey(t, []byte("forced-reveal"))
	obs := []Observation{{k, 1}, {k, 1}, {k, 1}, {k, 1}, {k, 1}}
	for _, mode := range []CountMode{CountDistinctParticipants, CountTuples} {
		d := newDeployment(t, deployOpts{mode: mode, tau: 5, seed: 11})
		d.submit("mallory", obs)
		d.flush()
		got := d.reveal()
		if mode == CountDistinctParticipants && (len(got) != 0 || d.table.Histogram()[1] != 1) {
			t.Fatalf("distinct mode: one participant forced a reveal (%d) or count≠1", len(got))
		}
		if mode == CountTuples && (len(got) != 1 || got[0].Count != 5) {
			t.Fatalf("tuples mode: want the paper's semantics (count 5), got %v", got)
		}
	}
	// Same participant, same key, two windows: both windows count it, and the tags differ.
	var tags [][]byte
	for _, w := range []uint64{1, 2} {
		d := newDeployment(t, deployOpts{tau: 1, window: w, seed: 12})
		d.submit("alice", obs[:1])
		e, err := d.db.Open(d.pool[0], 1)
		if err != nil {
			t.Fatal(err)
		}
		tags = append(tags, e.Z)
		d.flush()
		if got := d.reveal(); len(got) != 1 {
			t.Fatalf("window %d: revealed %d", w, len(got))
		}
	}
	if string(tags[0]) == string(tags[1]) {
		t.Fatal("dedup tags equal across windows")
	}
}

// TestRedeliveryIdempotent is T-DIST-4 at the library level: every BlindedItem delivered
// twice leaves counts unchanged in both modes (tags in distinct mode, entry ids in tuples).
func TestRedeliveryIdempotent(t *testing.T) {
	for _, mode := range []CountMode{CountDistinctParticipants, CountTuples} {
		d := newDeployment(t, deployOpts{mode: mode, tau: 3, seed: 13})
		k := opaqueKey(t, []byte("k"))
		for i := range 3 {
			d.submit(pname(i), []Observation{{k, 1}})
		}
		d.pool = append(d.pool, d.pool...)
		d.flush()
		got := d.reveal()
		if len(got) != 1 || got[0].Count != 3 {
			t.Fatalf("mode %d: %v", mode, got)
		}
	}
}

// TestMaliciousParticipants covers T-MAL-1..6 and 9.
func TestMaliciousParticipants(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, values: []uint16{1, 2}, seed: 14})
	s := d.suite
	k := opaqueKey(t, []byte("victim-key"))
	kPrime := opaqueKey(t, []byte("never-reported"))

	// T-MAL-3/5: tampered bytes anywhere are rejected, never forwarded, never panic.
	sess, id := d.newSession("mallory")
	good, err := NewParticipant(s, d.rnd).Item(id, 0, Observation{k, 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, pos := range []int{5, 8, 40, 8 + 2*s.ctSize(), len(good) - 1, len(good) - 40} {
		bad := slices.Clone(good)
		bad[pos] ^= 1
		if out, rej := d.proxy.Ingest(sess, [][]byte{bad}); len(out) != 0 || len(rej) != 1 {
			t.Fatalf("tampered byte %d accepted", pos)
		}
	}
	if _, rej := d.proxy.Ingest(sess, [][]byte{good[:len(good)-1], append(slices.Clone(good), 0), nil}); len(rej) != 3 {
		t.Fatal("wrong lengths accepted")
	}
	// T-MAL-6: the same bytes in another session, or replayed in this one.
	sess2, _ := d.newSession("eve")
	if _, rej := d.proxy.Ingest(sess2, [][]byte{good}); len(rej) != 1 || !errors.Is(rej[0].Err, ErrBadProof) {
		t.Fatalf("cross-session replay: %v", rej)
	}
	if out, rej := d.proxy.Ingest(sess, [][]byte{good, good}); len(out) != 1 || len(rej) != 1 || !errors.Is(rej[0].Err, ErrReplay) {
		t.Fatalf("in-session replay: %d accepted, %v", len(out), rej)
	}
	d.pool = nil

	// T-MAL-4: a value outside D with a proof forged for the value it claims.
	if _, err := NewParticipant(s, d.rnd).Item(id, 1, Observation{k, 3}); !errors.Is(err, ErrValueNotInDomain) {
		t.Fatalf("participant encoded v ∉ D: %v", err)
	}
	forged := forgeItem(t, d, id, 1, k, k, 3)
	if _, rej := d.proxy.Ingest(sess, [][]byte{forged}); len(rej) != 1 || !errors.Is(rej[0].Err, ErrBadProof) {
		t.Fatalf("v ∉ D accepted: %v", rej)
	}

	// T-MAL-1: an inconsistent tuple (C_Y for k, C_K for k') from one participant, plus
	// τ honest reports of k. k is published with the honest count; k' never is.
	sessM, idM := d.newSession("mallory-2")
	if _, rej := d.proxy.Ingest(sessM, [][]byte{forgeItem(t, d, idM, 0, k, kPrime, 1)}); len(rej) != 0 {
		t.Fatalf("well-formed inconsistent item rejected at the proxy: %v", rej[0].Err)
	}
	for i := range 3 {
		d.submit(pname(i), []Observation{{k, 2}})
	}
	// T-MAL-2: τ inconsistent tuples for a key nobody honest reports.
	kOrphan := opaqueKey(t, []byte("orphan"))
	for i := range 3 {
		sess, id := d.newSession(pname(100 + i))
		d.ingest(sess, [][]byte{forgeItem(t, d, id, 0, kOrphan, kPrime, 1)})
	}
	// T-MAL-9: exponent malleability, τ submissions of E(H(k)^c). The junk row reaches τ but
	// never passes the consistency check; k's own row is unaffected.
	c, _ := s.g.RandomScalar(d.rnd)
	for i := range 3 {
		sess, id := d.newSession(pname(200 + i))
		d.ingest(sess, [][]byte{forgeWith(t, d, id, 0, s.g.mul(s.HashKey(k), c), k, 1)})
	}
	d.flush()
	got := resultMap(d.reveal())
	r, ok := got[string(k.Canonical())]
	if !ok || r.Count != 3 || !slices.Equal(r.Values, []uint16{2, 2, 2}) {
		t.Fatalf("victim key: revealed=%v %+v", ok, r)
	}
	if len(got) != 1 {
		t.Fatalf("revealed %d keys, want only the honest one", len(got))
	}
	rejected := 0
	for _, row := range d.table.rows {
		if row.state == RowRejected {
			rejected++
		}
	}
	if rejected != 2 { // the orphan row and the malleability row
		t.Fatalf("%d rejected rows, want 2", rejected)
	}
}

// forgeItem builds a correctly proven item whose C_Y hashes kY but whose C_K embeds kK, with
// value v encrypted whether or not v ∈ D (the proof then cannot verify).
func forgeItem(t *testing.T, d *deployment, id SessionID, index uint32, kY, kK Key, v uint16) []byte {
	t.Helper()
	return forgeWith(t, d, id, index, d.suite.HashKey(kY), kK, v)
}

func forgeWith(t *testing.T, d *deployment, id SessionID, index uint32, P Element, kK Key, v uint16) []byte {
	t.Helper()
	s, g := d.suite, d.suite.g
	chunks, err := s.embedKey(kK)
	if err != nil {
		t.Fatal(err)
	}
	w, st := &witness{}, &itemStatement{}
	var cts []byte
	cy, a, _ := g.encrypt(s.hDB, P, d.rnd)
	w.x, st.xs = append(w.x, a), append(st.xs, cy.A)
	cts, _ = g.appendCiphertext(cts, cy)
	for _, m := range chunks {
		ck, b, _ := g.encrypt(s.hProd, m, d.rnd)
		w.x, st.xs = append(w.x, b), append(st.xs, ck.A)
		cts, _ = g.appendCiphertext(cts, ck)
	}
	if s.HasValues() {
		cv, gamma, _ := g.encrypt(s.hDB, g.mulGen(g.NewScalar().SetUint64(uint64(v))), d.rnd)
		w.gamma, st.cv = gamma, &cv
		cts, _ = g.appendCiphertext(cts, cv)
		// Prove as if v were D[0]: the branch equation cannot hold when v ≠ D[0].
		if i, ok := s.valueIndex(v); ok {
			w.vIndex = i
		}
	}
	pf, err := s.prove(id, index, cts, st, w, d.rnd)
	if err != nil {
		t.Fatal(err)
	}
	return s.marshalSubmission(index, cts, pf)
}
