package pps

import (
	"golang.org/x/crypto/chacha20"
)

// Fixed sizes of the protocol (spec §3.1, §8).
const (
	// SeedSize is the size of a ratchet key, a round seed and every PRG/PRF key.
	SeedSize = 32
	// LabelSize is κ/8: one wire label or PRG block.
	LabelSize = 16
	// ValueBits is L, the width of a published value (Q24.8, D1).
	ValueBits = 32
)

// drgNonce is libsodium's randombytes_buf_deterministic nonce; using it makes PRG
// byte-identical to the C publisher's libsodium call (spec §8, D6).
var drgNonce = []byte("LibsodiumDRG")

// Seed is a 32-byte PRG/PRF key: a ratchet key, a round seed s_k, or the PSI seed s2 (spec §8.4).
type Seed [SeedSize]byte

// Zero overwrites the seed; callers zeroise every seed they are done with (spec §10 #9).
func (s *Seed) Zero() { clear(s[:]) }

// PRG fills out with the ChaCha20-IETF keystream for key seed, nonce "LibsodiumDRG" and
// block counter 0: libsodium's randombytes_buf_deterministic(out, len(out), seed).
func PRG(seed *Seed, out []byte) {
	clear(out)
	prgAt(seed, 0, out)
}

// PRGBlock returns the 16-byte block at index pos of PRG(seed, …) without generating the
// blocks before it (spec §8.4 PRG_block).
func PRGBlock(seed *Seed, pos uint64) [LabelSize]byte {
	var b [LabelSize]byte
	prgAt(seed, pos, b[:])
	return b
}

// prgAt XORs into out the keystream starting at 16-byte block index pos. ChaCha20 blocks
// are 64 bytes, so the stream is seeked to block pos/4 and the first (pos%4)*16 bytes skipped.
func prgAt(seed *Seed, pos uint64, out []byte) {
	c, err := chacha20.NewUnauthenticatedCipher(seed[:], drgNonce)
	if err != nil {
		panic("pps: chacha20 with fixed-size key and nonce: " + err.Error()) // unreachable
	}
	if pos/4 > 0xFFFFFFFF {
		panic("pps: PRG position beyond the 2^32-block ChaCha20-IETF stream")
	}
	c.SetCounter(uint32(pos / 4))
	if skip := int(pos%4) * LabelSize; skip > 0 {
		var waste [64]byte
		c.XORKeyStream(waste[:skip], waste[:skip])
	}
	c.XORKeyStream(out, out)
}
