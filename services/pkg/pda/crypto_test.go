package pda

import (
	"bytes"
	"errors"
	"testing"
)

// ElGamal properties of spec §9.4, in both groups.
func TestElGamalProperties(t *testing.T) {
	for _, id := range []GroupID{Ristretto255, P256} {
		d := newDeployment(t, deployOpts{group: id, seed: 20})
		s, g, rnd := d.suite, d.suite.g, d.rnd
		for i := range 5 {
			x := g.HashToElement([]byte{byte(i)}, []byte("PDA-test-msg"))
			c, _, _ := g.encrypt(s.hDB, x, rnd)
			if !d.dbKey.decrypt(c).IsEqual(x) {
				t.Fatalf("%s: Dec(Enc(x)) ≠ x", g)
			}
			rc, _ := g.rerandomize(s.hDB, c, rnd)
			if !d.dbKey.decrypt(rc).IsEqual(x) || rc.A.IsEqual(c.A) || rc.B.IsEqual(c.B) {
				t.Fatalf("%s: ReRand changed the plaintext or kept a component", g)
			}
			dc, _, _ := g.encrypt(s.hProd, x, rnd)
			if !d.keys.Oracle.decrypt(d.dbKey.stripLayer(dc)).IsEqual(x) {
				t.Fatalf("%s: Dec_PRX(StripLayer_DB(EncDouble(x))) ≠ x", g)
			}
			rdc, _ := g.rerandomize(s.hProd, dc, rnd)
			if !d.keys.Oracle.decrypt(d.dbKey.stripLayer(rdc)).IsEqual(x) {
				t.Fatalf("%s: product-key ReRand broke the double ciphertext", g)
			}
			// The paper's "h^{b'}" wording: re-randomising the double ciphertext with h_DB alone
			// must not decrypt any more (spec §9.4, Appendix A).
			wrong, _ := g.rerandomize(s.hDB, dc, rnd)
			if d.keys.Oracle.decrypt(d.dbKey.stripLayer(wrong)).IsEqual(x) {
				t.Fatalf("%s: h_DB-only re-randomisation still decrypts", g)
			}
		}
	}
}

// Decode(Embed(c)) = c for random chunks; the largest counter used is logged (§9.4 asks
// for 10⁶ chunks; 2,000 per group keep the suite fast, the fuzz target covers more).
func TestEmbedRoundTrip(t *testing.T) {
	for _, id := range []GroupID{Ristretto255, P256} {
		g, _ := NewGroup(id)
		rnd := detRand(21)
		n := 2000
		if id == P256 {
			n = 300 // each P-256 try is a big.Int square root in circl
		}
		maxTries := 0
		for range n {
			var c [ChunkSize]byte
			rnd.Read(c[:])
			e, err := g.embedChunk(c[:])
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.extractChunk(nil, e)
			if err != nil || !bytes.Equal(got, c[:]) {
				t.Fatalf("%s: round trip %x → %x (%v)", g, c, got, err)
			}
			enc := g.encodeElement(e)
			tries := int(enc[len(enc)-1]) + 1 // P-256: ctr; ristretto255: ctrHi·128 + ctrLo/2
			if id == Ristretto255 {
				tries = int(enc[31])*128 + int(enc[0])/2 + 1
			}
			maxTries = max(maxTries, tries)
		}
		t.Logf("%s: max tries over %d chunks: %d", g, n, maxTries)
		// The all-zero chunk (padding) must embed too; on ristretto255 its first candidate
		// is the identity.
		if _, err := g.embedChunk(make([]byte, ChunkSize)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPadKey(t *testing.T) {
	d := newDeployment(t, deployOpts{chunks: 2, seed: 22})
	s := d.suite
	for _, k := range []Key{ipKey(t, "192.0.2.1"), ipKey(t, "2001:db8::1"), opaqueKey(t, nil), opaqueKey(t, bytes.Repeat([]byte{0xab}, s.MaxCanonicalKeySize()-3))} {
		chunks, err := s.embedKey(k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.decodeKey(chunks)
		if err != nil || !got.Equal(k) {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if _, err := s.embedKey(opaqueKey(t, make([]byte, s.MaxCanonicalKeySize()-2))); !errors.Is(err, ErrKeyTooLong) {
		t.Fatalf("over-long key: %v", err)
	}
	p, _ := s.padKey(ipKey(t, "192.0.2.1"))
	p[len(p)-1] = 1
	if _, err := s.unpadKey(p); err == nil {
		t.Fatal("non-zero padding accepted")
	}
}

// Proofs: completeness, soundness against tampered responses and challenges, and binding
// to session, index and parameters (§9.4).
func TestProofBinding(t *testing.T) {
	for _, vals := range [][]uint16{nil, {1, 4, 9}} {
		d := newDeployment(t, deployOpts{values: vals, seed: 23})
		s := d.suite
		var id SessionID
		id[0] = 1
		item, err := NewParticipant(s, d.rnd).Item(id, 7, Observation{ipKey(t, "198.51.100.7"), 4})
		if vals == nil {
			item, err = NewParticipant(s, d.rnd).Item(id, 7, Observation{ipKey(t, "198.51.100.7"), 0})
		}
		if err != nil {
			t.Fatal(err)
		}
		sub, err := s.ParseSubmission(item)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.verify(id, sub); err != nil {
			t.Fatalf("completeness: %v", err)
		}
		other := id
		other[15] = 9
		moved := *sub
		moved.Index = 8
		if s.verify(other, sub) == nil || s.verify(id, &moved) == nil {
			t.Fatal("proof not bound to session and index")
		}
		// Tamper with every scalar and every commitment of the encoding.
		for _, off := range proofFieldOffsets(s) {
			bad := tamper(t, s, item, off)
			if sub2, err := s.ParseSubmission(bad); err == nil && !errors.Is(s.verify(id, sub2), ErrBadProof) {
				t.Fatalf("tampered proof field at %d verified", off)
			}
		}
		// Another deployment's parameters (different digest) reject the same proof.
		d2 := newDeployment(t, deployOpts{values: vals, seed: 23, window: 43})
		if sub2, err := d2.suite.ParseSubmission(item); err == nil && d2.suite.verify(id, sub2) == nil {
			t.Fatal("proof verified under another window's parameters")
		}
	}
}
