package pda

import (
	"bytes"
	"testing"
)

// TestDedupTagsRerandomised is T-PRIV-10: dedup tags are re-randomised ciphertexts and t_j
// never leaves the proxy. Three participants each report key k0 twice in one session and
// once in a second session; one also reports k1. Asserted structurally:
//   - every forwarded tag C_T = E_DB(Y^{t_j}) is a fresh ciphertext: none of its two
//     components equals the deterministic t_j·C_Y' (ρ4 was added), occurs in any
//     submission the proxy received, or repeats in any other forwarded item — not even
//     between two items of one participant for one key;
//   - behind the fresh randomness the DB recovers the same Z for one participant and one
//     key (so the row counts 3 distinct participants, not 9 items), and different Z
//     across participants and across keys;
//   - neither t_j (its scalar encoding) nor g^{t_j} appears in any byte the DB domain
//     receives (items, entries, reveal requests and responses).
func TestDedupTagsRerandomised(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, seed: 10})
	g := d.suite.g
	k0, k1 := opaqueKey(t, []byte("k0-tag-test")), opaqueKey(t, []byte("k1-tag-test"))
	type sent struct {
		who  string
		key  Key
		item []byte
	}
	var out []sent
	var inputs [][]byte
	people := []string{"alice", "bob", "carol"}
	for _, who := range people {
		sessions := [][]Key{{k0, k0}, {k0}}
		if who == "alice" {
			sessions[0] = append(sessions[0], k1)
		}
		for _, keys := range sessions {
			sess, id := d.newSession(who)
			var items [][]byte
			for i, k := range keys {
				b, err := NewParticipant(d.suite, d.rnd).Item(id, uint32(i), Observation{Key: k, Value: 1})
				if err != nil {
					t.Fatal(err)
				}
				items = append(items, b)
			}
			inputs = append(inputs, items...)
			d.cap.proxy = append(d.cap.proxy, items...)
			blinded, rej := d.proxy.Ingest(sess, items)
			if len(rej) != 0 || len(blinded) != len(items) {
				t.Fatalf("%s: %d rejected, %d forwarded of %d", who, len(rej), len(blinded), len(items))
			}
			for i, b := range blinded {
				out = append(out, sent{who, keys[i], b})
			}
			d.pool = append(d.pool, blinded...)
		}
	}

	seen := map[string]bool{}
	zOf := map[string][]byte{} // who/key → Z
	for _, s := range out {
		it, err := d.suite.ParseBlindedItem(s.item)
		if err != nil {
			t.Fatal(err)
		}
		if it.CT == nil {
			t.Fatal("no dedup tag in distinct-participants mode")
		}
		tj := d.proxy.dedupScalar([]byte(s.who))
		for i, c := range []struct{ tag, det Element }{{it.CT.A, g.mul(it.CY.A, tj)}, {it.CT.B, g.mul(it.CY.B, tj)}} {
			enc := g.encodeElement(c.tag)
			if bytes.Equal(enc, g.encodeElement(c.det)) {
				t.Fatalf("%s: tag component %d is t_j·C_Y', not re-randomised", s.who, i)
			}
			for _, in := range inputs {
				if bytes.Contains(in, enc) {
					t.Fatalf("%s: tag component %d occurs in a submission", s.who, i)
				}
			}
			if seen[string(enc)] {
				t.Fatalf("%s: tag component %d repeats across forwarded items", s.who, i)
			}
			seen[string(enc)] = true
		}
		e, err := d.db.Open(s.item, 1)
		if err != nil {
			t.Fatal(err)
		}
		id := s.who + "/" + string(s.key.Canonical())
		if z, ok := zOf[id]; ok && !bytes.Equal(z, e.Z) {
			t.Fatalf("%s: one key gave two different Z", s.who)
		}
		zOf[id] = e.Z
	}
	if len(zOf) != 4 {
		t.Fatalf("%d (participant, key) pairs", len(zOf))
	}
	zs := map[string]bool{}
	for _, z := range zOf {
		zs[string(z)] = true
	}
	if len(zs) != len(zOf) {
		t.Fatal("two participants or two keys share a Z")
	}

	d.flush()
	rs := resultMap(d.reveal())
	if r, ok := rs[string(k0.Canonical())]; !ok || r.Count != 3 || len(rs) != 1 {
		t.Fatalf("results %v: want k0 counted by 3 distinct participants only", rs)
	}
	for _, who := range people {
		tj := d.proxy.dedupScalar([]byte(who))
		secret := [][]byte{g.AppendScalar(nil, tj), g.encodeElement(g.mulGen(tj))}
		for _, b := range d.cap.db {
			for _, s := range secret {
				if bytes.Contains(b, s) {
					t.Fatalf("t_j of %s (or g^t_j) reached the DB domain", who)
				}
			}
		}
	}
	if len(d.cap.db) < len(out) {
		t.Fatalf("DB capture has %d messages", len(d.cap.db))
	}
}
