package pda

import (
	"fmt"
	"io"
)

// PrivateKey is an ElGamal key pair (a, h = g^a) in a Group: the DB key a_DB or the
// proxy's oracle key a_PRX (spec §3.1, A1).
type PrivateKey struct {
	g   *Group
	a   Scalar
	pub []byte
}

// GenerateKey draws a ←$ Z_p^* from rand.
func GenerateKey(g *Group, rand io.Reader) (*PrivateKey, error) {
	a, err := g.RandomScalar(rand)
	if err != nil {
		return nil, err
	}
	return newPrivateKey(g, a), nil
}

func newPrivateKey(g *Group, a Scalar) *PrivateKey {
	return &PrivateKey{g: g, a: a, pub: g.encodeElement(g.mulGen(a))}
}

// ParsePrivateKey decodes a non-zero scalar as a private key (for keys loaded from Vault).
func ParsePrivateKey(g *Group, b []byte) (*PrivateKey, error) {
	a, err := g.DecodeNonZeroScalar(b)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	return newPrivateKey(g, a), nil
}

// PublicKey returns the encoded public key h = g^a, as it goes into PublicParams.
func (k *PrivateKey) PublicKey() []byte { return append([]byte(nil), k.pub...) }

// MarshalBinary returns the encoded secret scalar. Handle with care: it is the key.
func (k *PrivateKey) MarshalBinary() ([]byte, error) { return k.a.MarshalBinary() }

// Ciphertext is an ElGamal ciphertext (A, B) = (g^b, x·h^b), written additively
// (b·G, X + b·H) in code.
type Ciphertext struct{ A, B Element }

func (g *Group) appendCiphertext(dst []byte, c Ciphertext) ([]byte, error) {
	dst, err := g.AppendElement(dst, c.A)
	if err != nil {
		return dst, err
	}
	return g.AppendElement(dst, c.B)
}

func (g *Group) decodeCiphertext(b []byte) (Ciphertext, error) {
	n := g.elementSize
	if len(b) != 2*n {
		return Ciphertext{}, fmt.Errorf("%w: ciphertext length", ErrMalformed)
	}
	a, err := g.DecodeElement(b[:n])
	if err != nil {
		return Ciphertext{}, err
	}
	bb, err := g.DecodeElement(b[n:])
	if err != nil {
		return Ciphertext{}, err
	}
	return Ciphertext{a, bb}, nil
}

// encrypt returns Enc_h(x; r) for fresh r and r itself (the prover needs it).
func (g *Group) encrypt(h *base, x Element, rand io.Reader) (Ciphertext, Scalar, error) {
	r, err := g.RandomScalar(rand)
	if err != nil {
		return Ciphertext{}, nil, err
	}
	return Ciphertext{g.mulGen(r), g.add(x, h.mul(r))}, r, nil
}

// decrypt returns B − a·A.
func (k *PrivateKey) decrypt(c Ciphertext) Element {
	t := k.g.mul(c.A, k.a)
	return k.g.NewElement().Add(c.B, t.Neg(t))
}

// stripLayer turns Enc_{h1·h2}(x; b) into Enc_{h2}(x; b) with the key of h1 (§3.1).
func (k *PrivateKey) stripLayer(c Ciphertext) Ciphertext {
	return Ciphertext{c.A.Copy(), k.decrypt(c)}
}

// rerandomize returns (A + r·G, B + r·H) for fresh r: the same plaintext under fresh
// randomness. For a double ciphertext H must be the product key, or stripping the DB layer
// later yields garbage (spec §3.1 [!], tested).
func (g *Group) rerandomize(h *base, c Ciphertext, rand io.Reader) (Ciphertext, error) {
	r, err := g.RandomScalar(rand)
	if err != nil {
		return Ciphertext{}, err
	}
	return Ciphertext{g.add(c.A, g.mulGen(r)), g.add(c.B, h.mul(r))}, nil
}

// base is a fixed group element that is multiplied by many scalars (a public key).
type base struct {
	g   *Group
	e   Element
	tab *combTable // nil when the group has no cheap additions (P-256 in circl)
}

func newBase(g *Group, e Element) *base {
	return &base{g: g, e: e, tab: newCombTable(g, e)}
}

// mul returns s·e in constant time.
func (b *base) mul(s Scalar) Element {
	if b.tab != nil {
		return b.tab.mul(s)
	}
	return b.g.mul(b.e, s)
}
