package roles

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// The garbler's Redis keyspace (its own Redis, trust domain G). Every value under a record
// key is sealed (Sealer, associated data = the key); the sorted sets and sets hold only
// round numbers and device ids, which the broker knows anyway.
//
//	pps:g:pub:<pubid>              publisher ratchet: K_i, i, signed policy
//	pps:g:seed:<pubid>:<round>     a retained round seed s_round (TTL, erased on Release)
//	pps:g:seeds:<pubid>            sorted set of the retained rounds (score = round)
//	pps:g:fn:<fnid>                function: source, mode, seed TTL, epoch, K'_ρ, ρ
//	pps:g:sub:<fnid>:<device>      subscriber: its session's server→client key, ed_pk, transcript
//	pps:g:subs:<fnid>              set of the function's subscribers
const keyPrefix = "pps:g:"

func pubKey(pub string) string        { return keyPrefix + "pub:" + pub }
func seedsKey(pub string) string      { return keyPrefix + "seeds:" + pub }
func fnKey(fn string) string          { return keyPrefix + "fn:" + fn }
func subsKey(fn string) string        { return keyPrefix + "subs:" + fn }
func subKey(fn, device string) string { return keyPrefix + "sub:" + fn + ":" + device }
func seedKey(pub string, r uint64) string {
	return keyPrefix + "seed:" + pub + ":" + strconv.FormatUint(r, 10)
}

// recordVersion is the first byte of every record's plaintext.
const recordVersion = 1

// maxSource bounds a function's DSL source in its record.
const maxSource = 1 << 20

// pubRecord is a publisher's ratchet: the key K_Round of its current round, and its policy
// (D13, checked again by the garbler at execution time).
type pubRecord struct {
	Key    pps.Seed
	Round  uint64
	Policy contract.Policy
}

func (r *pubRecord) marshal() []byte {
	b := make([]byte, 0, 1+pps.SeedSize+8+4+2+len(r.Policy.Fns)*contract.FnIDLen)
	b = append(b, recordVersion)
	b = append(b, r.Key[:]...)
	b = binary.LittleEndian.AppendUint64(b, r.Round)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Policy.MinInputs))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Policy.Fns)))
	for _, fn := range r.Policy.Fns {
		b = append(b, fn...)
	}
	return b
}

func decodePubRecord(b []byte) (*pubRecord, error) {
	const fixed = 1 + pps.SeedSize + 8 + 4 + 2
	if len(b) < fixed || b[0] != recordVersion {
		return nil, fmt.Errorf("publisher record: %d bytes or version: %w", len(b), ErrSealed)
	}
	r := &pubRecord{}
	copy(r.Key[:], b[1:])
	r.Round = binary.LittleEndian.Uint64(b[1+pps.SeedSize:])
	minIn := binary.LittleEndian.Uint32(b[1+pps.SeedSize+8:])
	n := int(binary.LittleEndian.Uint16(b[1+pps.SeedSize+12:]))
	if minIn > 1<<30 || n > contract.MaxPolicyFns || len(b) != fixed+n*contract.FnIDLen {
		return nil, fmt.Errorf("publisher record: policy of %d functions in %d bytes: %w", n, len(b), ErrSealed)
	}
	r.Policy.MinInputs = int(minIn)
	r.Policy.Fns = make([]string, n)
	for i := range n {
		fn := string(b[fixed+i*contract.FnIDLen : fixed+(i+1)*contract.FnIDLen])
		if contract.ValidFnID(fn) != nil {
			return nil, fmt.Errorf("publisher record: policy function %d: %w", i, ErrSealed)
		}
		r.Policy.Fns[i] = fn
	}
	return r, nil
}

// seedRecord is a retained round seed (D8).
type seedRecord struct {
	Round uint64
	Seed  pps.Seed
}

const seedRecordSize = 1 + 8 + pps.SeedSize

func (r *seedRecord) marshal() []byte {
	b := make([]byte, 0, seedRecordSize)
	b = append(b, recordVersion)
	b = binary.LittleEndian.AppendUint64(b, r.Round)
	return append(b, r.Seed[:]...)
}

func decodeSeedRecord(b []byte) (*seedRecord, error) {
	if len(b) != seedRecordSize || b[0] != recordVersion {
		return nil, fmt.Errorf("seed record: %d bytes or version: %w", len(b), ErrSealed)
	}
	r := &seedRecord{Round: binary.LittleEndian.Uint64(b[1:])}
	copy(r.Seed[:], b[9:])
	return r, nil
}

// fnRecord is a function's persisted state: its source (recompiled after a restart), its
// mode and seed TTL, and its function keys (D14): the epoch, the ratchet key K'_Round of
// the next unallocated round Round. Round only grows within an epoch, and the record is
// written before a round's mask is used, so no round is used twice (§10 #7).
type fnRecord struct {
	Mode    byte
	SeedTTL uint64 // seconds; 0 means the garbler's default
	Epoch   uint64
	Round   uint64
	Key     pps.Seed
	Source  string
}

const fnRecordFixed = 1 + 1 + 8 + 8 + 8 + pps.SeedSize + 4

func (r *fnRecord) marshal() []byte {
	b := make([]byte, 0, fnRecordFixed+len(r.Source))
	b = append(b, recordVersion, r.Mode)
	b = binary.LittleEndian.AppendUint64(b, r.SeedTTL)
	b = binary.LittleEndian.AppendUint64(b, r.Epoch)
	b = binary.LittleEndian.AppendUint64(b, r.Round)
	b = append(b, r.Key[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Source)))
	return append(b, r.Source...)
}

func decodeFnRecord(b []byte) (*fnRecord, error) {
	if len(b) < fnRecordFixed || b[0] != recordVersion {
		return nil, fmt.Errorf("function record: %d bytes or version: %w", len(b), ErrSealed)
	}
	r := &fnRecord{Mode: b[1]}
	r.SeedTTL = binary.LittleEndian.Uint64(b[2:])
	r.Epoch = binary.LittleEndian.Uint64(b[10:])
	r.Round = binary.LittleEndian.Uint64(b[18:])
	copy(r.Key[:], b[26:])
	n := binary.LittleEndian.Uint32(b[26+pps.SeedSize:])
	if n > maxSource || uint64(len(b)) != uint64(fnRecordFixed)+uint64(n) {
		return nil, fmt.Errorf("function record: source of %d bytes in %d: %w", n, len(b), ErrSealed)
	}
	r.Source = string(b[fnRecordFixed:])
	return r, nil
}

// subRecord is what the garbler keeps of a subscriber's handshake to re-grant it a new key
// epoch after a revocation (D14): its session's server→client key, the AD its grants are
// bound to (fn || ed_pk || transcript) and the transcript its regrants are signed over.
type subRecord struct {
	ServerToClient pps.Seed
	EdPK           [contract.KeySize]byte
	Transcript     [32]byte
}

const subRecordSize = 1 + pps.SeedSize + contract.KeySize + 32

func (r *subRecord) marshal() []byte {
	b := make([]byte, 0, subRecordSize)
	b = append(b, recordVersion)
	b = append(b, r.ServerToClient[:]...)
	b = append(b, r.EdPK[:]...)
	return append(b, r.Transcript[:]...)
}

func decodeSubRecord(b []byte) (*subRecord, error) {
	if len(b) != subRecordSize || b[0] != recordVersion {
		return nil, fmt.Errorf("subscriber record: %d bytes or version: %w", len(b), ErrSealed)
	}
	r := &subRecord{}
	copy(r.ServerToClient[:], b[1:])
	copy(r.EdPK[:], b[1+pps.SeedSize:])
	copy(r.Transcript[:], b[1+pps.SeedSize+contract.KeySize:])
	return r, nil
}
