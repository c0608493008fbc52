package pda

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func unhexT(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimPrefix(s, "0x"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RFC 9380 J.1.1 through our wrapper with the RFC's DST; our DecodeElement accepts the
// compressed form of each result and rejects its uncompressed form (not canonical here).
func TestRFC9380P256Vectors(t *testing.T) {
	var f struct {
		DST     string `json:"dst"`
		Vectors []struct{ Msg, X, Y string }
	}
	readJSON(t, "rfc9380_p256_xmd_sha256_sswu_ro.json", &f)
	g, _ := NewGroup(P256)
	for _, v := range f.Vectors {
		p := g.HashToElement([]byte(v.Msg), []byte(f.DST))
		unc, _ := p.MarshalBinary()
		want := append(append([]byte{4}, unhexT(t, v.X)...), unhexT(t, v.Y)...)
		if !bytes.Equal(unc, want) {
			t.Fatalf("msg %q: got %x", v.Msg, unc)
		}
		enc := g.encodeElement(p)
		if q, err := g.DecodeElement(enc); err != nil || !q.IsEqual(p) {
			t.Fatalf("msg %q: compressed round trip: %v", v.Msg, err)
		}
		if _, err := g.DecodeElement(unc); !errors.Is(err, ErrInvalidElement) {
			t.Fatal("uncompressed encoding accepted")
		}
	}
}

// RFC 9497 A.1.1 / A.3.1 (OPRF mode): BlindedElement = Blind·HashToGroup(Input) with the
// RFC's DST and EvaluationElement = skSm·BlindedElement, through our Group. This pins
// hash_to_ristretto255 (RFC 9380 / RFC 9496 §4.3.4) and our scalar and element codecs.
func TestRFC9497HashToGroupVectors(t *testing.T) {
	var f struct {
		Suites []struct {
			Identifier, GroupDST, SkSm string
			Vectors                    []struct{ Input, Blind, BlindedElement, EvaluationElement string }
		}
	}
	readJSON(t, "rfc9497_oprf_mode0.json", &f)
	if len(f.Suites) != 2 {
		t.Fatalf("%d suites", len(f.Suites))
	}
	for _, s := range f.Suites {
		id := map[string]GroupID{"ristretto255-SHA512": Ristretto255, "P256-SHA256": P256}[s.Identifier]
		g, _ := NewGroup(id)
		sk, err := g.DecodeNonZeroScalar(unhexT(t, s.SkSm))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range s.Vectors {
			blind, err := g.DecodeNonZeroScalar(unhexT(t, v.Blind))
			if err != nil {
				t.Fatal(err)
			}
			p := g.HashToElement(unhexT(t, v.Input), unhexT(t, s.GroupDST))
			be := g.mul(p, blind)
			if got := g.encodeElement(be); !bytes.Equal(got, unhexT(t, v.BlindedElement)) {
				t.Fatalf("%s: BlindedElement %x", s.Identifier, got)
			}
			if got := g.encodeElement(g.mul(be, sk)); !bytes.Equal(got, unhexT(t, v.EvaluationElement)) {
				t.Fatalf("%s: EvaluationElement %x", s.Identifier, got)
			}
		}
	}
}

// RFC 9496 A.1 and A.2: generator multiples encode as listed; every invalid encoding
// (non-canonical, negative, non-square, negative xy, s = −1) is rejected, and the
// identity (A.1's B·0) is rejected by our decoder as well.
func TestRFC9496Vectors(t *testing.T) {
	var f struct{ Multiples, Invalid []string }
	readJSON(t, "rfc9496_ristretto255.json", &f)
	g, _ := NewGroup(Ristretto255)
	acc := g.NewElement()
	tab := newCombTable(g, g.Generator())
	for i, m := range f.Multiples {
		if i == 0 {
			if _, err := g.DecodeElement(unhexT(t, m)); !errors.Is(err, ErrInvalidElement) {
				t.Fatal("identity accepted")
			}
			continue
		}
		acc.Add(acc, g.Generator())
		if got := g.encodeElement(acc); !bytes.Equal(got, unhexT(t, m)) {
			t.Fatalf("B·%d = %x", i, got)
		}
		if e, err := g.DecodeElement(unhexT(t, m)); err != nil || !e.IsEqual(acc) {
			t.Fatalf("decode B·%d: %v", i, err)
		}
		s := g.NewScalar().SetUint64(uint64(i))
		if !g.mulGen(s).IsEqual(acc) || !tab.mul(s).IsEqual(acc) || !g.mul(g.Generator(), s).IsEqual(acc) {
			t.Fatalf("B·%d by multiplication", i)
		}
	}
	if len(f.Invalid) != 29 {
		t.Fatalf("%d invalid vectors", len(f.Invalid))
	}
	for _, v := range f.Invalid {
		if _, err := g.DecodeElement(unhexT(t, v)); !errors.Is(err, ErrInvalidElement) {
			t.Errorf("invalid encoding %s accepted", v)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, id := range []GroupID{Ristretto255, P256} {
		g, _ := NewGroup(id)
		gen := g.encodeElement(g.Generator())
		cases := map[string][]byte{
			"empty": nil, "short": gen[:len(gen)-1], "long": append(bytes.Clone(gen), 0),
			"zeros": make([]byte, g.ElementSize()), "ones": bytes.Repeat([]byte{0xff}, g.ElementSize()),
		}
		if id == P256 {
			off := bytes.Clone(gen)
			off[0] = 0x04 // wrong prefix for 33 bytes
			cases["prefix"] = off
			cases["identity"] = []byte{0}
			// x = 5 is not the x-coordinate of a P-256 point (5³ − 15 + b is a non-residue).
			notOnCurve := make([]byte, 33)
			notOnCurve[0], notOnCurve[32] = 2, 5
			if _, err := g.DecodeElement(notOnCurve); err == nil {
				t.Log("x=5 happens to be on the curve; skipping that case")
			} else {
				cases["off-curve"] = notOnCurve
			}
			// x = p (non-canonical encoding of 0).
			cases["x=p"] = unhexT(t, "02ffffffff00000001000000000000000000000000ffffffffffffffffffffffff")
		}
		for name, b := range cases {
			if _, err := g.DecodeElement(b); !errors.Is(err, ErrInvalidElement) {
				t.Errorf("%s: %s accepted", g, name)
			}
		}
		// Scalars: the order itself and all-ones are not canonical; zero only for keys.
		order := map[GroupID]string{
			Ristretto255: "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010",
			P256:         "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551",
		}[id]
		for _, b := range [][]byte{unhexT(t, order), bytes.Repeat([]byte{0xff}, 32), make([]byte, 31), make([]byte, 33)} {
			if _, err := g.DecodeScalar(b); !errors.Is(err, ErrInvalidScalar) {
				t.Errorf("%s: scalar %x accepted", g, b)
			}
		}
		if _, err := g.DecodeScalar(make([]byte, 32)); err != nil {
			t.Errorf("%s: zero scalar rejected", g)
		}
		if _, err := g.DecodeNonZeroScalar(make([]byte, 32)); !errors.Is(err, ErrInvalidScalar) {
			t.Errorf("%s: zero key accepted", g)
		}
	}
}

func TestRandomScalarDeterministic(t *testing.T) {
	for _, id := range []GroupID{Ristretto255, P256} {
		g, _ := NewGroup(id)
		a, _ := g.RandomScalar(detRand(7))
		b, _ := g.RandomScalar(detRand(7))
		c, _ := g.RandomScalar(detRand(8))
		if !a.IsEqual(b) || a.IsEqual(c) || a.IsZero() {
			t.Fatalf("%s: RandomScalar not a deterministic function of its reader", g)
		}
	}
}

// The comb table must agree with circl's Mul for random and edge scalars.
func TestCombTable(t *testing.T) {
	g, _ := NewGroup(Ristretto255)
	rnd := detRand(3)
	p := g.HashToElement([]byte("base"), []byte("PDA-test"))
	tab := newCombTable(g, p)
	minusOne := g.NewScalar().Neg(g.NewScalar().SetUint64(1))
	scalars := []Scalar{g.NewScalar(), g.NewScalar().SetUint64(1), g.NewScalar().SetUint64(8), g.NewScalar().SetUint64(0x88888888), minusOne}
	for range 50 {
		s, _ := g.RandomScalar(rnd)
		scalars = append(scalars, s)
	}
	for _, s := range scalars {
		if !tab.mul(s).IsEqual(g.mul(p, s)) {
			t.Fatalf("comb mismatch for %v", s)
		}
	}
	if newCombTable(groupP256, groupP256.Generator()) != nil {
		t.Fatal("P-256 should not build a comb table")
	}
}
