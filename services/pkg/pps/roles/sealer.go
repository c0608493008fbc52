package roles

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// Sealer encrypts the garbler's records before they reach Redis (spec §5.3: ratchet state
// is sealed; D8: retained seeds too). The associated data is the record's Redis key, so a
// record copied under another key (another publisher, another round) does not open.
type Sealer interface {
	Seal(ctx context.Context, plaintext, ad []byte) ([]byte, error)
	Open(ctx context.Context, sealed, ad []byte) ([]byte, error)
}

// ErrSealed: a sealed record that does not parse or does not authenticate. Redis is the
// garbler's own store, but a record is still treated as untrusted bytes.
var ErrSealed = errors.New("pps garbler: sealed record does not open")

// The sealed record format, version 1:
//
//	offset  size  field
//	0       2     magic "PG"
//	2       1     version 1
//	3       1     scheme: 1 local XChaCha20-Poly1305 key, 2 Vault Transit envelope
//	4       2     w, length of the wrapping field (little-endian)
//	6       w     wrapping: scheme 1 the key id (8 bytes of SHA-256 of the key), scheme 2
//	              the data key as Vault Transit ciphertext ("vault:v<n>:…")
//	6+w     24    XChaCha20 nonce
//	30+w    n+16  ciphertext and Poly1305 tag
//
// The AEAD's associated data is the header (bytes 0 to 6+w) followed by the caller's AD, so
// the scheme and the wrapped key are authenticated with the plaintext.
const (
	sealMagic      = "PG"
	sealVersion    = 1
	schemeLocal    = 1
	schemeVault    = 2
	sealHeaderSize = 6
	keyIDSize      = 8
	// maxWrapped bounds the wrapping field (a Transit ciphertext of a 32-byte key is ~90 B).
	maxWrapped = 1024
	// MaxSealedRecord bounds a record (a function's state holds its DSL source).
	MaxSealedRecord = 4 << 20
)

// sealedRecord is a parsed record.
type sealedRecord struct {
	scheme   byte
	wrapped  []byte
	nonce    []byte
	box      []byte // ciphertext and tag
	aeadHead []byte // bytes authenticated as part of the AD
}

func parseSealed(b []byte) (*sealedRecord, error) {
	if len(b) > MaxSealedRecord {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrSealed, len(b), MaxSealedRecord)
	}
	if len(b) < sealHeaderSize || string(b[:2]) != sealMagic || b[2] != sealVersion {
		return nil, fmt.Errorf("%w: not a version %d record", ErrSealed, sealVersion)
	}
	scheme := b[3]
	if scheme != schemeLocal && scheme != schemeVault {
		return nil, fmt.Errorf("%w: scheme %d", ErrSealed, scheme)
	}
	w := int(binary.LittleEndian.Uint16(b[4:]))
	if w > maxWrapped || (scheme == schemeLocal && w != keyIDSize) || (scheme == schemeVault && w == 0) {
		return nil, fmt.Errorf("%w: wrapping field of %d bytes for scheme %d", ErrSealed, w, scheme)
	}
	rest := b[sealHeaderSize:]
	if len(rest) < w+chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead {
		return nil, fmt.Errorf("%w: truncated", ErrSealed)
	}
	return &sealedRecord{
		scheme:   scheme,
		wrapped:  rest[:w],
		nonce:    rest[w : w+chacha20poly1305.NonceSizeX],
		box:      rest[w+chacha20poly1305.NonceSizeX:],
		aeadHead: b[:sealHeaderSize+w],
	}, nil
}

// sealWith encrypts plaintext under key (32 bytes) into a record of the scheme.
func sealWith(key []byte, scheme byte, wrapped, plaintext, ad []byte, rnd io.Reader) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, sealHeaderSize+len(wrapped)+chacha20poly1305.NonceSizeX+len(plaintext)+chacha20poly1305.Overhead)
	out = append(out, sealMagic...)
	out = append(out, sealVersion, scheme)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(wrapped)))
	out = append(out, wrapped...)
	head := len(out)
	out = out[:head+chacha20poly1305.NonceSizeX]
	if _, err := io.ReadFull(rnd, out[head:]); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	fullAD := append(append([]byte(nil), out[:head]...), ad...)
	return aead.Seal(out, out[head:], plaintext, fullAD), nil
}

// openWith decrypts a parsed record with key.
func openWith(key []byte, r *sealedRecord, ad []byte) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	fullAD := append(append([]byte(nil), r.aeadHead...), ad...)
	pt, err := aead.Open(nil, r.nonce, r.box, fullAD)
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed", ErrSealed)
	}
	return pt, nil
}

// FileSealer is the local Sealer: XChaCha20-Poly1305 under a 32-byte key read from a file
// (for `obscura demo` and single-machine runs; production seals with Vault Transit).
type FileSealer struct {
	key   [32]byte
	keyID [keyIDSize]byte
	rand  io.Reader
}

// NewFileSealer seals with key (32 bytes; copied). rnd nil means crypto/rand.
func NewFileSealer(key []byte, rnd io.Reader) (*FileSealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("seal key of %d bytes, want 32", len(key))
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	s := &FileSealer{rand: rnd}
	copy(s.key[:], key)
	id := sha256.Sum256(append([]byte("pps/v1/garbler-seal-key-id"), key...))
	copy(s.keyID[:], id[:])
	return s, nil
}

// LoadFileSealer reads the key file (32 raw bytes, hex or base64, as package keys reads).
func LoadFileSealer(path string) (*FileSealer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal key file: %w", err)
	}
	defer clear(b)
	k, err := keys.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("seal key file %s: %w", path, err)
	}
	defer clear(k)
	return NewFileSealer(k, nil)
}

// Seal implements Sealer.
func (s *FileSealer) Seal(_ context.Context, plaintext, ad []byte) ([]byte, error) {
	return sealWith(s.key[:], schemeLocal, s.keyID[:], plaintext, ad, s.rand)
}

// Open implements Sealer.
func (s *FileSealer) Open(_ context.Context, sealed, ad []byte) ([]byte, error) {
	r, err := parseSealed(sealed)
	if err != nil {
		return nil, err
	}
	if r.scheme != schemeLocal {
		return nil, fmt.Errorf("%w: sealed by Vault Transit, this garbler seals with a local key", ErrSealed)
	}
	if string(r.wrapped) != string(s.keyID[:]) {
		return nil, fmt.Errorf("%w: sealed under another local key", ErrSealed)
	}
	return openWith(s.key[:], r, ad)
}
