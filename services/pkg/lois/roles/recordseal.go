package roles

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/keys"
)

// Session records on LOIS_SESSIONS carry stream keys (a receiver derives every keystream of
// an epoch from one). Sealed, a record is recordMagic2 ‖ key id ‖ 12-byte nonce ‖
// AES-256-GCM of the JSON record under the cloud's record key of that id, with the record's
// subject as additional data (a record moved to another cloud's or kind's subject does not
// open). Only the registrar and
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
//
// Rotation: the file may hold several keys, one a line as "<id> <64 hex digits>" (id a
// decimal 0–4294967295; a bare line of 64 hex digits, the original format, is key id 0;
// blank lines and lines starting with # are ignored). Records are sealed under the current
// key — the highest id, or the one a line "current <id>" names — and carry its id
// (recordMagic2), so a record opens under whichever key of the file sealed it: records
// sealed before a rotation still open, every record written after it (a new session, a
// grant, a READY, a session re-published) is sealed under the new key. A record under an id
// the file does not hold is refused (ErrUnknownRecordKey); a replica that meets one reads
// its key file again (at most once a second: a mounted Secret changes under a running
// pod) before it refuses; the sealer reads it again before sealing (at most once a second),
// so a registrar seals under a key made current in its file without a restart. The
// procedure is in docs/lois.md ("Record key rotation"); the HeaderGateway operator drives it
// on spec.registrar.recordKeyRotation.
const (
	recordMagic  = "LRS1" // ‖ nonce ‖ AES-256-GCM: key id 0 (records before key ids)
	recordMagic2 = "LRS2" // ‖ key id (4 bytes, big-endian) ‖ nonce ‖ AES-256-GCM
)

// RecordKeyLen is the record key's length in bytes.
const RecordKeyLen = 32

// ErrRecordSeal is a record that does not open under the record key, or a clear record
// where sealed ones are required (and the reverse).
var ErrRecordSeal = errors.New("lois: session record seal")

// ErrUnknownRecordKey is a record sealed under a key id the record key file does not hold
// (errors.Is it ErrRecordSeal too).
var ErrUnknownRecordKey = fmt.Errorf("%w: unknown record key id", ErrRecordSeal)

// recordKeys are the keys of one record key file.
type recordKeys struct {
	aead    map[uint32]cipher.AEAD
	current uint32
}

func (k *recordKeys) ids() []uint32 {
	return slices.Sorted(maps.Keys(k.aead))
}

// RecordSeal seals and opens session records under one cloud's record keys.
type RecordSeal struct {
	keys atomic.Pointer[recordKeys]
	// path is the key file, read again when a record names an id it lacks (not more than
	// once a second: lastRead, unix nanoseconds).
	path     string
	lastRead atomic.Int64
}

// NewRecordSeal is a sealer with one key (RecordKeyLen bytes), id 0.
func NewRecordSeal(key []byte) (*RecordSeal, error) {
	a, err := newRecordAEAD(key)
	if err != nil {
		return nil, err
	}
	s := &RecordSeal{}
	s.keys.Store(&recordKeys{aead: map[uint32]cipher.AEAD{0: a}})
	return s, nil
}

func newRecordAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != RecordKeyLen {
		return nil, fmt.Errorf("record key: %d bytes, want %d", len(key), RecordKeyLen)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// ReadRecordKey reads a record key file (above: one key, or "<id> <hex>" lines and an
// optional "current <id>") and wipes what it read; the sealer reads it again when a record
// names a key id it does not hold.
func ReadRecordKey(path string) (*RecordSeal, error) {
	k, err := readRecordKeys(path)
	if err != nil {
		return nil, err
	}
	s := &RecordSeal{path: path}
	s.keys.Store(k)
	s.lastRead.Store(time.Now().UnixNano())
	return s, nil
}

func readRecordKeys(path string) (*recordKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	k, err := parseRecordKeys(b)
	if err != nil {
		return nil, fmt.Errorf("record key file %s: %w", path, err)
	}
	return k, nil
}

// parseRecordKeys parses a record key file's content (keys.ParseIDFile; error
// messages never quote a key).
func parseRecordKeys(b []byte) (*recordKeys, error) {
	k := &recordKeys{aead: map[uint32]cipher.AEAD{}}
	f, err := keys.ParseIDFile(b, RecordKeyLen, func(id uint32, key []byte) error {
		a, err := newRecordAEAD(key)
		if err == nil {
			k.aead[id] = a
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	k.current = f.Current
	return k, nil
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

// CurrentKeyID is the id of the key new records are sealed under.
func (s *RecordSeal) CurrentKeyID() uint32 { return s.keys.Load().current }

// Seal returns the sealed form of the record data published on subject, under the current
// key; s nil returns data. A sealer read from a file reads it again first when the last read
// is a second old or more, so a running registrar follows a rotation of its mounted Secret
// (the operator's "current <id>" line removed: the new key is current) without a restart.
func (s *RecordSeal) Seal(subject string, data []byte) []byte {
	if s == nil {
		return data
	}
	k := s.keys.Load()
	if r := s.reload(); r != nil {
		k = r
	}
	a := k.aead[k.current]
	hdr := len(recordMagic2) + 4
	out := make([]byte, hdr+a.NonceSize(), hdr+a.NonceSize()+len(data)+a.Overhead())
	copy(out, recordMagic2)
	binary.BigEndian.PutUint32(out[len(recordMagic2):], k.current)
	if _, err := rand.Read(out[hdr:]); err != nil {
		panic(err)
	}
	return a.Seal(out, out[hdr:], data, []byte(subject))
}

// Open returns the record data of a message received on subject. With s nil only clear
// records are accepted; with s, only records sealed for that subject under one of its keys.
func (s *RecordSeal) Open(subject string, msg []byte) ([]byte, error) {
	v1, v2 := bytes.HasPrefix(msg, []byte(recordMagic)), bytes.HasPrefix(msg, []byte(recordMagic2))
	switch {
	case s == nil && (v1 || v2):
		return nil, fmt.Errorf("%w: a sealed record and no record key (--record-key-file)", ErrRecordSeal)
	case s == nil:
		return msg, nil
	case !v1 && !v2:
		return nil, fmt.Errorf("%w: a record in clear where records are sealed", ErrRecordSeal)
	}
	id, body := uint32(0), msg[len(recordMagic):]
	if v2 {
		if len(body) < 4 {
			return nil, fmt.Errorf("%w: short record", ErrRecordSeal)
		}
		id, body = binary.BigEndian.Uint32(body), body[4:]
	}
	k := s.keys.Load()
	a, ok := k.aead[id]
	if !ok {
		if k = s.reload(); k != nil {
			a, ok = k.aead[id]
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w %d for %s: the record key file holds ids %v (a rotation not yet mounted here?)",
			ErrUnknownRecordKey, id, subject, s.keys.Load().ids())
	}
	if len(body) < a.NonceSize()+a.Overhead() {
		return nil, fmt.Errorf("%w: short record", ErrRecordSeal)
	}
	out, err := a.Open(nil, body[:a.NonceSize()], body[a.NonceSize():], []byte(subject))
	if err != nil {
		return nil, fmt.Errorf("%w: does not open under record key %d for %s", ErrRecordSeal, id, subject)
	}
	return out, nil
}

// reload reads the key file again, unless there is none or it was read less than a second
// ago; it returns the keys read, or nil.
func (s *RecordSeal) reload() *recordKeys {
	last := s.lastRead.Load()
	now := time.Now().UnixNano()
	if s.path == "" || now-last < int64(time.Second) || !s.lastRead.CompareAndSwap(last, now) {
		return nil
	}
	k, err := readRecordKeys(s.path)
	if err != nil {
		return nil // the keys in use stay; the refusal names them
	}
	s.keys.Store(k)
	return k
}
