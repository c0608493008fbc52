package gc

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
)

// Label is a 128-bit wire label. Its permute (point-and-permute) bit is the least
// significant bit of byte 0; the engine reads a label as two little-endian 64-bit halves,
// lo = bytes 0–7 and hi = bytes 8–15.
type Label [16]byte

// LabelSize is the size of a label and of a garbled row.
const LabelSize = 16

// Lsb returns the label's permute bit.
func (l Label) Lsb() int { return int(l[0] & 1) }

func (l Label) lo() uint64 { return binary.LittleEndian.Uint64(l[:8]) }
func (l Label) hi() uint64 { return binary.LittleEndian.Uint64(l[8:]) }

func mkLabel(lo, hi uint64) (l Label) {
	binary.LittleEndian.PutUint64(l[:8], lo)
	binary.LittleEndian.PutUint64(l[8:], hi)
	return l
}

func xorLabel(a, b Label) Label { return mkLabel(a.lo()^b.lo(), a.hi()^b.hi()) }

// sigma is the GKWY20 linear orthomorphism σ(xL‖xR) = (xL⊕xR)‖xL, with xL the high half
// (bytes 8–15) and xR the low half: lo' = hi, hi' = lo ⊕ hi.
func sigma(x Label) Label { return mkLabel(x.hi(), x.lo()^x.hi()) }

// gateTweakHi is the high half of every half-gate tweak (lo is the half-gate index). Identity
// gates use tweakID(exec, u) = LE64(execID low 64 bits) ‖ LE64(u) (spec §8.5) with u < 2³²,
// so the two tweak sets never meet under one π.
const gateTweakHi = ^uint64(0)

// fixedKey is π: AES-128 under one key, expanded once per garbled circuit.
type fixedKey struct {
	rk    [11]Label    // encryption round keys, FIPS-197 byte order (what AESENC takes)
	rk256 [11][32]byte // each round key twice, for the VAES-256 kernels
	blk   cipher.Block // the pure-Go path (crypto/aes)
	// x, y are the pure-Go kernels' hash inputs and outputs: kept here, per execution,
	// because slices handed to blk's interface method escape and would be allocated per gate.
	x, y [4]Label
}

func newFixedKey(key Label) *fixedKey {
	k := &fixedKey{}
	expandKey128(key, &k.rk)
	for i := range k.rk {
		copy(k.rk256[i][:16], k.rk[i][:])
		copy(k.rk256[i][16:], k.rk[i][:])
	}
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // 16-byte keys are always accepted
	}
	k.blk = b
	return k
}

// expandKey128 is the FIPS-197 key expansion (§5.2) for AES-128.
func expandKey128(key Label, rk *[11]Label) {
	var w [44]uint32
	for i := range 4 {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := 4; i < 44; i++ {
		t := w[i-1]
		if i%4 == 0 {
			t = subWord(t<<8|t>>24) ^ rcon<<24
			rcon = uint32(xtime(byte(rcon)))
		}
		w[i] = w[i-4] ^ t
	}
	for r := range 11 {
		for j := range 4 {
			binary.BigEndian.PutUint32(rk[r][4*j:], w[4*r+j])
		}
	}
}

func xtime(b byte) byte {
	if b&0x80 != 0 {
		return b<<1 ^ 0x1b
	}
	return b << 1
}

func subWord(w uint32) uint32 {
	return uint32(sbox[w>>24])<<24 | uint32(sbox[w>>16&0xff])<<16 | uint32(sbox[w>>8&0xff])<<8 | uint32(sbox[w&0xff])
}

var sbox = func() (s [256]byte) {
	// Multiplicative inverse in GF(2⁸) followed by the affine map (FIPS-197 §5.1.1).
	p, q := byte(1), byte(1)
	for {
		p = p ^ p<<1 ^ bit7(p)*0x1b
		q ^= q << 1
		q ^= q << 2
		q ^= q << 4
		q ^= bit7(q) * 0x09
		x := q ^ rotl8(q, 1) ^ rotl8(q, 2) ^ rotl8(q, 3) ^ rotl8(q, 4)
		s[p] = x ^ 0x63
		if p == 1 {
			break
		}
	}
	s[0] = 0x63
	return s
}()

func bit7(b byte) byte          { return b >> 7 }
func rotl8(b byte, n uint) byte { return b<<n | b>>(8-n) }

// encryptGeneric is π on each block of src into dst with crypto/aes, one block at a time:
// the standard library has no multi-block path for independent blocks.
func (k *fixedKey) encryptGeneric(dst, src []Label) {
	for i := range src {
		k.blk.Encrypt(dst[i][:], src[i][:])
	}
}
