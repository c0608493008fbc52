package pda

import (
	"bytes"
	"testing"
)

func containsAny(hay [][]byte, needle []byte) bool {
	for _, h := range hay {
		if bytes.Contains(h, needle) {
			return true
		}
	}
	return false
}

// elementsOf splits a message at the given offset into element-sized windows.
func elementsOf(b []byte, off, size int) [][]byte {
	var out [][]byte
	for i := off; i+size <= len(b); i += size {
		out = append(out, b[i:i+size])
	}
	return out
}

// TestTranscriptCanaries is T-PRIV-1..6 and 13 over a captured run: random 16-byte canary
// keys below τ and above τ, searched for as plaintext, canonical form, unkeyed hash H2G(k)
// and blinded key Y = F_s(k) in everything each domain saw.
func TestTranscriptCanaries(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, values: []uint16{1, 2}, seed: 30})
	s := d.suite
	rnd := detRand(31)
	var below, above []Key
	for range 6 {
		var b [16]byte
		rnd.Read(b[:])
		below = append(below, opaqueKey(t, b[:]))
		rnd.Read(b[:])
		above = append(above, opaqueKey(t, b[:]))
	}
	var sessions []SessionID
	for p := range 4 {
		sess, id := d.newSession(pname(p))
		sessions = append(sessions, id)
		var items [][]byte
		for i, k := range above {
			b, _ := NewParticipant(s, d.rnd).Item(id, uint32(i), Observation{k, 2})
			items = append(items, b)
		}
		// Each below-τ canary is reported by 2 < τ participants.
		for i, k := range below {
			if (i+p)%2 == 0 {
				b, _ := NewParticipant(s, d.rnd).Item(id, uint32(100+i), Observation{k, 1})
				items = append(items, b)
			}
		}
		if rej := d.ingest(sess, items); len(rej) != 0 {
			t.Fatal(rej[0].Err)
		}
	}
	forwarded := append([][]byte(nil), d.pool...)
	d.flush()
	if got := d.reveal(); len(got) != len(above) {
		t.Fatalf("revealed %d, want %d", len(got), len(above))
	}
	submissions := d.cap.proxy[:0:0]
	for _, m := range d.cap.proxy {
		if len(m) == s.SubmissionSize() {
			submissions = append(submissions, m)
		}
	}
	var requests, responses [][]byte
	for _, m := range d.cap.db {
		if len(m) > 0 && m[0] == formatVersion && len(m) != s.BlindedItemSize() && len(m) != s.EntrySize() {
			if len(m) > 3 && GroupID(m[1]) == s.g.id && m[2] == s.params.Chunks {
				requests = append(requests, m)
			} else {
				responses = append(responses, m)
			}
		}
	}
	if len(requests) != len(above) || len(responses) != len(above) {
		t.Fatalf("captured %d requests, %d responses", len(requests), len(responses))
	}
	yOf := func(k Key) []byte { return s.g.encodeElement(s.g.mul(s.HashKey(k), d.keys.OPRF)) }
	for _, k := range below {
		for name, needle := range map[string][]byte{"key bytes": k.b, "canonical key": k.Canonical(), "H2G(k)": s.g.encodeElement(s.HashKey(k))} {
			if containsAny(d.cap.proxy, needle) {
				t.Errorf("T-PRIV-1: proxy domain saw %s of an unrevealed canary", name)
			}
			if containsAny(d.cap.db, needle) {
				t.Errorf("T-PRIV-2: DB domain saw %s of an unrevealed canary", name)
			}
		}
		if containsAny(d.cap.proxy, yOf(k)) {
			t.Error("T-PRIV-1: proxy domain saw Y of an unrevealed canary")
		}
	}
	for _, k := range above {
		// T-PRIV-3: the revealed key reaches the proxy domain only as the oracle's output.
		if containsAny(submissions, k.b) || containsAny(forwarded, k.b) || containsAny(requests, k.b) {
			t.Error("T-PRIV-3: revealed canary in a submission, item or request")
		}
		if !containsAny(responses, k.b) {
			t.Error("revealed canary missing from the oracle's responses")
		}
		if containsAny(d.cap.db, s.g.encodeElement(s.HashKey(k))) {
			t.Error("T-PRIV-2: DB domain saw H2G(k)")
		}
	}
	// T-PRIV-4: no participant identifier or session id in the DB domain.
	for p := range 4 {
		if containsAny(d.cap.db, []byte(pname(p))) || containsAny(d.cap.db, sessions[p][:]) {
			t.Error("T-PRIV-4: participant id or session id crossed into the DB domain")
		}
	}
	// T-PRIV-5: no element a participant submitted appears in any proxy→DB item.
	es := s.g.elementSize
	for _, sub := range submissions {
		for _, e := range elementsOf(sub[:8+3*s.ctSize()], 8, es) {
			if containsAny(forwarded, e) {
				t.Fatal("T-PRIV-5: a submitted element was forwarded unchanged")
			}
		}
	}
	// T-PRIV-6 / T-PRIV-13: no element of any forwarded item (in particular the A of C_K'),
	// no entry id and no dedup tag appears in any reveal request.
	for _, it := range forwarded {
		for _, e := range elementsOf(it, 12, es) {
			if containsAny(requests, e) {
				t.Fatal("T-PRIV-6: a forwarded ciphertext component reached the oracle")
			}
		}
	}
	for _, m := range d.cap.db {
		if len(m) == s.EntrySize() {
			e, err := s.ParseEntry(m)
			if err != nil {
				t.Fatal(err)
			}
			if containsAny(requests, e.ID[:]) || containsAny(requests, e.Z) {
				t.Fatal("T-PRIV-13: entry id or dedup tag in a reveal request")
			}
			for _, c := range e.Inner {
				if containsAny(requests, s.g.encodeElement(c.A)) || containsAny(requests, s.g.encodeElement(c.B)) {
					t.Fatal("T-PRIV-6: E_PRX(k) not re-randomised by the DB")
				}
			}
		}
	}
}

// TestRevealRequestsUnlinkable: two requests for the same row (a new entry arrives after
// the first reveal, U14) share no ciphertext bytes and no request id, and carry values
// nowhere (T-PRIV-13).
func TestRevealRequestsUnlinkable(t *testing.T) {
	d := newDeployment(t, deployOpts{tau: 3, seed: 32})
	k := opaqueKey(t, []byte("row"))
	for i := range 3 {
		d.submit(pname(i), []Observation{{k, 1}})
	}
	d.flush()
	q1, _ := d.table.RevealRequests()
	for _, q := range q1 {
		resp, _, _ := d.oracle.Answer(q)
		d.table.ApplyRevealResponse(resp)
	}
	d.submit(pname(3), []Observation{{k, 1}})
	d.flush()
	q2, _ := d.table.RevealRequests()
	if len(q1) != 1 || len(q2) != 1 {
		t.Fatalf("requests: %d then %d", len(q1), len(q2))
	}
	r1, _ := d.suite.ParseRevealRequest(q1[0])
	r2, _ := d.suite.ParseRevealRequest(q2[0])
	if r1.RequestID == r2.RequestID || !bytes.Equal(r1.Y, r2.Y) {
		t.Fatal("request ids repeat or Y differs")
	}
	es := d.suite.g.elementSize
	for _, e := range elementsOf(q1[0][29+es:], 0, es) {
		if bytes.Contains(q2[0], e) {
			t.Fatal("a ciphertext component repeats across requests for one row")
		}
	}
	resp, _, _ := d.oracle.Answer(q2[0])
	rev, err := d.table.ApplyRevealResponse(resp)
	if err != nil || rev == nil || rev.Count != 4 {
		t.Fatalf("U14: updated row %+v, %v", rev, err)
	}
	if _, err := d.table.ApplyRevealResponse(resp); err == nil {
		t.Fatal("a settled response applied twice")
	}
}

// T-FUN-9: Dec(a_DB, proxy output) = H2G(w‖canon(k))^s.
func TestEOPRFMatchesDirectEvaluation(t *testing.T) {
	for _, id := range []GroupID{Ristretto255, P256} {
		d := newDeployment(t, deployOpts{group: id, seed: 33})
		for i := range 20 {
			k := opaqueKey(t, []byte{byte(i), 1, 2})
			d.submit(pname(i), []Observation{{k, 1}})
			e, err := d.db.Open(d.pool[len(d.pool)-1], 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := d.suite.g.encodeElement(d.suite.g.mul(d.suite.HashKey(k), d.keys.OPRF)); !bytes.Equal(e.Y, want) {
				t.Fatalf("%s: EOPRF output differs from F_s(k)", d.suite.g)
			}
		}
	}
}
