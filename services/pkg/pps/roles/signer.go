package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// Signer is the garbler's Ed25519 identity (spec §3.11, §5.3): it signs every answer to a
// device, which verifies it under the garbler key pinned at provisioning (D20), so a broker
// relaying the handshake cannot substitute its own key exchange.
type Signer interface {
	// Public is the identity's public key (what devices pin).
	Public() ed25519.PublicKey
	// Sign signs msg with pure Ed25519.
	Sign(ctx context.Context, msg []byte) ([]byte, error)
}

// FileSigner is a local Ed25519 identity read from a file (`pps keys garbler`), for
// `obscura demo` and single-machine runs; production signs with Vault Transit.
type FileSigner struct{ key ed25519.PrivateKey }

// NewFileSigner signs with the Ed25519 private key of seed (32 bytes; copied).
func NewFileSigner(seed []byte) (*FileSigner, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("identity key of %d bytes, want a %d-byte Ed25519 seed", len(seed), ed25519.SeedSize)
	}
	return &FileSigner{key: ed25519.NewKeyFromSeed(seed)}, nil
}

// LoadFileSigner reads an identity key file: the 32-byte Ed25519 seed, raw, hex or base64.
func LoadFileSigner(path string) (*FileSigner, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity key file: %w", err)
	}
	defer clear(b)
	seed, err := keys.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("identity key file %s: %w", path, err)
	}
	defer clear(seed)
	return NewFileSigner(seed)
}

// GenerateIdentityFile writes a fresh Ed25519 seed, hex, to path (mode 0600, refusing to
// overwrite) and returns the public key.
func GenerateIdentityFile(path string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	defer clear(priv)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	enc := []byte(hex.EncodeToString(priv.Seed()) + "\n")
	defer clear(enc)
	if _, err := f.Write(enc); err != nil {
		f.Close()
		return nil, err
	}
	return pub, f.Close()
}

// Public implements Signer.
func (s *FileSigner) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign implements Signer.
func (s *FileSigner) Sign(_ context.Context, msg []byte) ([]byte, error) {
	return ed25519.Sign(s.key, msg), nil
}
