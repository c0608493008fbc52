package mohito

import (
	"crypto/ecdh"
	"crypto/hpke"
	"fmt"
)

// Suite names the HPKE ciphersuite used for the two public-key layers (to the
// integrator and to the shuffler). Both use HKDF-SHA256 and ChaCha20-Poly1305 in
// base mode (RFC 9180); they differ in the KEM.
type Suite uint8

const (
	// SuiteX25519 is DHKEM(X25519, HKDF-SHA256), the default (spec §3.1 with
	// the project's standard-library binding instead of NaCl sealed boxes).
	SuiteX25519 Suite = 1
	// SuiteMLKEM768X25519 is the post-quantum hybrid KEM MLKEM768-X25519.
	SuiteMLKEM768X25519 Suite = 2
)

const aeadTagSize = 16

func (s Suite) kem() (hpke.KEM, error) {
	switch s {
	case SuiteX25519:
		return hpke.DHKEM(ecdh.X25519()), nil
	case SuiteMLKEM768X25519:
		return hpke.MLKEM768X25519(), nil
	}
	return nil, fmt.Errorf("%w: unknown suite %d", ErrParams, s)
}

// Valid reports whether s is a known suite.
func (s Suite) Valid() bool { return s == SuiteX25519 || s == SuiteMLKEM768X25519 }

// EncSize is the size of the KEM encapsulation that prefixes every sealed layer.
func (s Suite) EncSize() int {
	if s == SuiteMLKEM768X25519 {
		return 1088 + 32
	}
	return 32
}

// PublicKeySize is the serialized public key size.
func (s Suite) PublicKeySize() int {
	if s == SuiteMLKEM768X25519 {
		return 1184 + 32
	}
	return 32
}

// Overhead is the ciphertext expansion of one sealed layer.
func (s Suite) Overhead() int { return s.EncSize() + aeadTagSize }

func (s Suite) String() string {
	switch s {
	case SuiteX25519:
		return "X25519-HKDF-SHA256-ChaCha20Poly1305"
	case SuiteMLKEM768X25519:
		return "MLKEM768X25519-HKDF-SHA256-ChaCha20Poly1305"
	}
	return fmt.Sprintf("Suite(%d)", uint8(s))
}

// PublicKey is a service's HPKE public key (integrator or vendor).
type PublicKey struct {
	suite Suite
	pk    hpke.PublicKey
}

// PrivateKey is a service's HPKE private key. Services load it once at start
// (spec §10: never one key-store call per message).
type PrivateKey struct {
	suite Suite
	sk    hpke.PrivateKey
}

// GenerateKey returns a fresh key pair for suite s.
func GenerateKey(s Suite) (*PrivateKey, error) {
	kem, err := s.kem()
	if err != nil {
		return nil, err
	}
	sk, err := kem.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("generate %v key: %w", s, err)
	}
	return &PrivateKey{suite: s, sk: sk}, nil
}

// DeriveKey deterministically derives a key pair from ikm (RFC 9180
// DeriveKeyPair); for tests and vectors.
func DeriveKey(s Suite, ikm []byte) (*PrivateKey, error) {
	kem, err := s.kem()
	if err != nil {
		return nil, err
	}
	sk, err := kem.DeriveKeyPair(ikm)
	if err != nil {
		return nil, fmt.Errorf("derive %v key: %w", s, err)
	}
	return &PrivateKey{suite: s, sk: sk}, nil
}

// ParsePrivateKey parses a serialized private key.
func ParsePrivateKey(s Suite, b []byte) (*PrivateKey, error) {
	kem, err := s.kem()
	if err != nil {
		return nil, err
	}
	sk, err := kem.NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w: private key: %v", ErrNonCanonical, err)
	}
	return &PrivateKey{suite: s, sk: sk}, nil
}

// ParsePublicKey parses a serialized public key.
func ParsePublicKey(s Suite, b []byte) (*PublicKey, error) {
	kem, err := s.kem()
	if err != nil {
		return nil, err
	}
	if len(b) != s.PublicKeySize() {
		return nil, fmt.Errorf("%w: public key of %d bytes", ErrSize, len(b))
	}
	pk, err := kem.NewPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w: public key: %v", ErrNonCanonical, err)
	}
	return &PublicKey{suite: s, pk: pk}, nil
}

// Bytes serializes the private key.
func (k *PrivateKey) Bytes() ([]byte, error) { return k.sk.Bytes() }

// Suite returns the key's suite.
func (k *PrivateKey) Suite() Suite { return k.suite }

// PublicKey returns the matching public key.
func (k *PrivateKey) PublicKey() *PublicKey {
	return &PublicKey{suite: k.suite, pk: k.sk.PublicKey()}
}

// Bytes serializes the public key.
func (k *PublicKey) Bytes() []byte { return k.pk.Bytes() }

// Suite returns the key's suite.
func (k *PublicKey) Suite() Suite { return k.suite }

// seal is single-shot HPKE base mode: enc ‖ AEAD(aad, pt).
func (k *PublicKey) seal(info, aad, pt []byte) ([]byte, error) {
	enc, s, err := hpke.NewSender(k.pk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), info)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(enc), len(enc)+len(pt)+aeadTagSize)
	copy(out, enc)
	ct, err := s.Seal(aad, pt)
	if err != nil {
		return nil, err
	}
	return append(out, ct...), nil
}

// open reverses seal. Every failure is reported as ErrDecrypt.
func (k *PrivateKey) open(info, aad, ct []byte) ([]byte, error) {
	es := k.suite.EncSize()
	if len(ct) < es+aeadTagSize {
		return nil, ErrDecrypt
	}
	r, err := hpke.NewRecipient(ct[:es], k.sk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), info)
	if err != nil {
		return nil, ErrDecrypt
	}
	pt, err := r.Open(aad, ct[es:])
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// HPKE info strings: one label per layer so that a ciphertext for one layer
// can never be opened as another.
const (
	infoInner = "mohito/v1/inner"
	infoOuter = "mohito/v1/outer"
)
