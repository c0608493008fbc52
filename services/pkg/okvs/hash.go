package okvs

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// maxStackKey is the longest key hashed from a stack buffer. Longer keys are still accepted
// but cost one allocation per hash (sha256.New); Mohito's ephemeral ids are 32 bytes.
const maxStackKey = 240

// position is where a key lives in the table: one cell in each sparse half and a dense row
// of p.dense bits (bit i set means dense cell i takes part).
type position struct {
	h1, h2 uint32 // h1 ∈ [0, |L|), h2 ∈ [|L|, m′)
	r0, r1 uint64 // dense row, low and high 64 bits
}

// locate computes H(seed, key) = SHA-256(seed ‖ key) as spec §4.2 prescribes and splits the
// digest: bytes 0–7 and 8–15 (little-endian) pick h₁ and h₂ by multiply-shift reduction, and
// bytes 16–31 are the dense row r(k), masked to d + λ bits. One digest covers every
// n ≤ MaxPairs because d + λ ≤ 128, so no expansion is needed.
func (p *params) locate(seed *[SeedSize]byte, key []byte) position {
	var sum [sha256.Size]byte
	if len(key) <= maxStackKey {
		var buf [SeedSize + maxStackKey]byte
		copy(buf[:], seed[:])
		copy(buf[SeedSize:], key)
		sum = sha256.Sum256(buf[:SeedSize+len(key)])
	} else {
		h := sha256.New()
		h.Write(seed[:])
		h.Write(key)
		h.Sum(sum[:0])
	}
	return p.split(&sum)
}

func (p *params) split(sum *[sha256.Size]byte) position {
	// Multiply-shift maps a uniform 64-bit word to [0, k) with bias below k/2^64, far under
	// anything observable; it avoids a division on the decode path.
	h1, _ := bits.Mul64(binary.LittleEndian.Uint64(sum[0:8]), uint64(p.halfL))
	h2, _ := bits.Mul64(binary.LittleEndian.Uint64(sum[8:16]), uint64(p.halfR))
	m0, m1 := p.denseMask()
	return position{
		h1: uint32(h1),
		h2: uint32(p.halfL) + uint32(h2),
		r0: binary.LittleEndian.Uint64(sum[16:24]) & m0,
		r1: binary.LittleEndian.Uint64(sum[24:32]) & m1,
	}
}
