package ot

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"unsafe"
)

// BlockSize is κ/8: the size of one OT message and of one row of the extension matrix.
const BlockSize = 16

// Kappa is the computational security parameter and the number of base OTs.
const Kappa = 128

// Block is a 128-bit string: an OT message, a row of the IKNP matrix, or the sender's
// secret s (bit i of s is bit i%8 of byte i/8, LSB first, the convention of every bit string
// here).
type Block [BlockSize]byte

// Lsb is bit 0 of byte 0, the point-and-permute bit of a garbled-circuit label.
func (b *Block) Lsb() byte { return b[0] & 1 }

// xorBlock returns a ⊕ b.
func xorBlock(a, b Block) Block {
	var o Block
	subtle.XORBytes(o[:], a[:], b[:])
	return o
}

// maskBlock returns b if bit is 1 and zero if it is 0, without a branch on bit.
func maskBlock(b Block, bit byte) Block {
	m := -(bit & 1)
	for i := range b {
		b[i] &= m
	}
	return b
}

// crHash is H(x, j) = π(σ(x) ⊕ j) ⊕ σ(x), with σ(lo‖hi) = (hi ‖ lo⊕hi) on the little-endian
// 64-bit halves and the tweak j in the low half (GKWY20's MMO^σ; see doc.go).
type crHash struct{ pi cipher.Block }

func newCRHash(key *[16]byte) crHash {
	c, err := aes.NewCipher(key[:])
	if err != nil {
		panic("ot: AES-128 with a 16-byte key: " + err.Error()) // unreachable
	}
	return crHash{pi: c}
}

// hashChunk is how many blocks hash encrypts per pass through its scratch buffer.
const hashChunk = 512

// hash sets dst[k] = H(src[k], base+k) for every k (dst may be src). The blocks go through
// one scratch buffer so that the calls into π allocate nothing per block.
func (h crHash) hash(dst, src []Block, base uint64) {
	buf := make([]byte, BlockSize*min(len(src), hashChunk))
	for c := 0; c < len(src); c += hashChunk {
		n := min(hashChunk, len(src)-c)
		for k := range n {
			x := &src[c+k]
			lo := binary.LittleEndian.Uint64(x[:8])
			hi := binary.LittleEndian.Uint64(x[8:])
			d := &dst[c+k]
			binary.LittleEndian.PutUint64(d[:8], hi)
			binary.LittleEndian.PutUint64(d[8:], lo^hi)
			binary.LittleEndian.PutUint64(buf[16*k:], hi^(base+uint64(c+k)))
			binary.LittleEndian.PutUint64(buf[16*k+8:], lo^hi)
		}
		for k := range n {
			b := buf[16*k : 16*k+16]
			h.pi.Encrypt(b, b)
		}
		subtle.XORBytes(blockBytes(dst[c:c+n]), blockBytes(dst[c:c+n]), buf[:16*n])
	}
	clear(buf)
}

// blockBytes views blocks as bytes.
func blockBytes(b []Block) []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice(&b[0][0], len(b)*BlockSize)
}
