package pps

import (
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/crypto/chacha20poly1305"
)

// Grant is what the Garbler hands a subscriber of a function: the function ratchet key K'
// at a round, and the key epoch it belongs to (spec §8.9, D14).
type Grant struct {
	Key   Seed
	Round uint64
	Epoch uint64
}

// Zero erases the key.
func (g *Grant) Zero() { g.Key.Zero() }

const (
	grantPlainSize = SeedSize + 8 + 8
	// SealedGrantSize is the size of a sealed Grant: a 24-byte nonce, the ciphertext of
	// K' || LE64(round) || LE64(epoch), and the 16-byte tag.
	SealedGrantSize = chacha20poly1305.NonceSizeX + grantPlainSize + chacha20poly1305.Overhead
)

// SealGrant encrypts g for the subscriber with XChaCha20-Poly1305 under k.ServerToClient
// (the Garbler's tx, spec §8.9), binding ad (fn || ed_pk || transcript hash). rand supplies
// the nonce.
func SealGrant(k *SessionKeys, g *Grant, ad []byte, rand io.Reader) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(k.ServerToClient[:])
	if err != nil {
		return nil, fmt.Errorf("seal grant: %w", err)
	}
	out := make([]byte, chacha20poly1305.NonceSizeX, SealedGrantSize)
	if _, err := io.ReadFull(rand, out); err != nil {
		return nil, fmt.Errorf("seal grant: nonce: %w", err)
	}
	var pt [grantPlainSize]byte
	copy(pt[:], g.Key[:])
	binary.LittleEndian.PutUint64(pt[SeedSize:], g.Round)
	binary.LittleEndian.PutUint64(pt[SeedSize+8:], g.Epoch)
	out = aead.Seal(out, out[:chacha20poly1305.NonceSizeX], pt[:], ad)
	clear(pt[:])
	return out, nil
}

// OpenGrant is the subscriber's side of SealGrant (its rx key is k.ServerToClient).
func OpenGrant(k *SessionKeys, sealed, ad []byte) (Grant, error) {
	if len(sealed) != SealedGrantSize {
		return Grant{}, fmt.Errorf("open grant: %d bytes, want %d: %w", len(sealed), SealedGrantSize, ErrMalformed)
	}
	aead, err := chacha20poly1305.NewX(k.ServerToClient[:])
	if err != nil {
		return Grant{}, fmt.Errorf("open grant: %w", err)
	}
	n := chacha20poly1305.NonceSizeX
	pt, err := aead.Open(nil, sealed[:n], sealed[n:], ad)
	if err != nil {
		return Grant{}, fmt.Errorf("open grant: %w", err)
	}
	var g Grant
	copy(g.Key[:], pt)
	g.Round = binary.LittleEndian.Uint64(pt[SeedSize:])
	g.Epoch = binary.LittleEndian.Uint64(pt[SeedSize+8:])
	clear(pt)
	return g, nil
}
