package roles

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// Session records on LOIS_SESSIONS carry stream keys (a receiver derives every keystream of
// an epoch from one). Sealed, a record is recordMagic ‖ 12-byte nonce ‖ AES-256-GCM of the
// JSON record under the cloud's record key, with the record's subject as additional data (a
// record moved to another cloud's or kind's subject does not open). Only the registrar and
// the replicas hold the record key; whoever else reads the stream — a NATS operator, the
// server's memory or a file store, a consumer with read rights — learns no key.
//
// The record key is a file (32 bytes as 64 hex digits, --record-key-file): the operator
// generates it per HeaderGateway (Secret <name>-lois-record-key) and mounts it in the
// registrar and the cloud interfaces; a server interface is given the same Secret. A
// Vault Transit call per record at every replica was not chosen: a CI rebuilding its table
// replays every record of the stream at start, one Vault round trip each, and every replica
// would need a Vault identity; Vault still wraps what outlives a process (the registrar's
// seeds, keys.Transit).
const recordMagic = "LRS1"

// RecordKeyLen is the record key's length in bytes.
const RecordKeyLen = 32

// ErrRecordSeal is a record that does not open under the record key, or a clear record
// where sealed ones are required (and the reverse).
var ErrRecordSeal = errors.New("lois: session record seal")

// RecordSeal seals and opens session records under one cloud's record key.
type RecordSeal struct{ aead cipher.AEAD }

// NewRecordSeal is a sealer for key (RecordKeyLen bytes).
func NewRecordSeal(key []byte) (*RecordSeal, error) {
	if len(key) != RecordKeyLen {
		return nil, fmt.Errorf("record key: %d bytes, want %d", len(key), RecordKeyLen)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &RecordSeal{aead: a}, nil
}

// ReadRecordKey reads a record key file (64 hex digits, surrounding space ignored) and wipes
// what it read.
func ReadRecordKey(path string) (*RecordSeal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	t := bytes.TrimSpace(b)
	key := make([]byte, hex.DecodedLen(len(t)))
	defer clear(key)
	if _, err := hex.Decode(key, t); err != nil || len(key) != RecordKeyLen {
		return nil, fmt.Errorf("record key file %s: want %d hex digits", path, 2*RecordKeyLen)
	}
	return NewRecordSeal(key)
}

// NewRecordKey is a fresh record key as its file holds it.
func NewRecordKey() []byte {
	k := make([]byte, RecordKeyLen)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	defer clear(k)
	return []byte(hex.EncodeToString(k))
}

// Seal returns the sealed form of the record data published on subject; s nil returns data.
func (s *RecordSeal) Seal(subject string, data []byte) []byte {
	if s == nil {
		return data
	}
	out := make([]byte, len(recordMagic)+s.aead.NonceSize(), len(recordMagic)+s.aead.NonceSize()+len(data)+s.aead.Overhead())
	copy(out, recordMagic)
	if _, err := rand.Read(out[len(recordMagic):]); err != nil {
		panic(err)
	}
	return s.aead.Seal(out, out[len(recordMagic):], data, []byte(subject))
}

// Open returns the record data of a message received on subject. With s nil only clear
// records are accepted; with s, only records sealed under its key for that subject.
func (s *RecordSeal) Open(subject string, msg []byte) ([]byte, error) {
	sealed := bytes.HasPrefix(msg, []byte(recordMagic))
	switch {
	case s == nil && sealed:
		return nil, fmt.Errorf("%w: a sealed record and no record key (--record-key-file)", ErrRecordSeal)
	case s == nil:
		return msg, nil
	case !sealed:
		return nil, fmt.Errorf("%w: a record in clear where records are sealed", ErrRecordSeal)
	}
	n := len(recordMagic) + s.aead.NonceSize()
	if len(msg) < n+s.aead.Overhead() {
		return nil, fmt.Errorf("%w: short record", ErrRecordSeal)
	}
	out, err := s.aead.Open(nil, msg[len(recordMagic):n], msg[n:], []byte(subject))
	if err != nil {
		return nil, fmt.Errorf("%w: does not open under the record key for %s", ErrRecordSeal, subject)
	}
	return out, nil
}
