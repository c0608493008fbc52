package pps

import (
	"encoding/binary"
	"fmt"
	"math"

	"golang.org/x/crypto/chacha20"
)

// Label is a 128-bit wire label (spec §3.1).
type Label [LabelSize]byte

// LSB is lsb(X): bit 0 of byte 0 (spec §3.1), the point-and-permute bit.
func (l *Label) LSB() byte { return l[0] & 1 }

// LabelPair holds (w0, w1), the labels of one input bit for the values 0 and 1.
type LabelPair [2]Label

// valueLabelBytes is the PRG output consumed by one value: 2 labels per bit.
const valueLabelBytes = 2 * ValueBits * LabelSize

// ValueLabels derives the label pairs of value index v of a message published with round
// seed s_k (spec §8.2): bit j uses PRG blocks 2(vL+j) and 2(vL+j)+1, and lsb(w1) is forced
// to ¬lsb(w0) so the identity gate's row is selected by lsb(w) (D2). The PRG restarts for
// every round seed (D5).
func ValueLabels(seed *Seed, v int) [ValueBits]LabelPair {
	if v < 0 {
		panic(fmt.Sprintf("pps: negative value index %d", v))
	}
	var buf [valueLabelBytes]byte
	valueKeystream(seed, v, &buf)
	var out [ValueBits]LabelPair
	splitLabels(out[:], buf[:])
	clear(buf[:])
	return out
}

// DeriveLabels derives the label pairs of all values of a message of the given number of
// values: pair v*ValueBits+j is bit j of value v (spec §8.2).
func DeriveLabels(seed *Seed, values int) []LabelPair {
	out := make([]LabelPair, values*ValueBits)
	if hasChaChaX16 && uint64(values)*16 <= math.MaxUint32 {
		var buf [valueLabelBytes]byte
		for v := range values {
			valueKeystream(seed, v, &buf)
			splitLabels(out[v*ValueBits:(v+1)*ValueBits], buf[:])
		}
		clear(buf[:])
		return out
	}
	c, err := chacha20.NewUnauthenticatedCipher(seed[:], drgNonce)
	if err != nil {
		panic("pps: chacha20 with fixed-size key and nonce: " + err.Error()) // unreachable
	}
	var buf [valueLabelBytes]byte
	for v := range values {
		clear(buf[:])
		c.XORKeyStream(buf[:], buf[:])
		splitLabels(out[v*ValueBits:(v+1)*ValueBits], buf[:])
	}
	clear(buf[:])
	return out
}

// valueKeystream sets buf to the PRG output of value v: ChaCha20 blocks 16v…16v+15 of the
// seed's stream (what prgAt(seed, 64v, …) XORs in). With AVX-512 the sixteen blocks are
// computed side by side (chacha_amd64.s, 5–10× x/crypto's pure-Go ChaCha20, which has no
// amd64 assembly); TestChaChaX16 checks it against x/crypto.
func valueKeystream(seed *Seed, v int, buf *[valueLabelBytes]byte) {
	ctr := uint64(v) * 16
	if !hasChaChaX16 || ctr+15 > math.MaxUint32 {
		clear(buf[:])
		prgAt(seed, uint64(v)*2*ValueBits, buf[:])
		return
	}
	var st [16]uint32
	st[0], st[1], st[2], st[3] = 0x61707865, 0x3320646e, 0x79622d32, 0x6b206574
	for i := range 8 {
		st[4+i] = binary.LittleEndian.Uint32(seed[4*i:])
	}
	st[12] = uint32(ctr)
	for i := range 3 {
		st[13+i] = binary.LittleEndian.Uint32(drgNonce[4*i:])
	}
	var ws [256]uint32
	chacha20x16(&st, &ws)
	for b := range 16 {
		for w := range 16 {
			binary.LittleEndian.PutUint32(buf[64*b+4*w:], ws[16*w+b])
		}
	}
	clear(st[:])
	clear(ws[:])
}

func splitLabels(dst []LabelPair, buf []byte) {
	for j := range dst {
		copy(dst[j][0][:], buf[32*j:32*j+16])
		copy(dst[j][1][:], buf[32*j+16:32*j+32])
		dst[j][1][0] = dst[j][1][0]&0xFE | (1 ^ dst[j][0][0]&1)
	}
}

// PublishLabels is what a publisher sends for the values xs published at round seed s_k:
// for every value v and bit j (LSB first), the label w_{x_v[j]}, concatenated (spec §8.3).
func PublishLabels(seed *Seed, xs []Fixed) []byte {
	pairs := DeriveLabels(seed, len(xs))
	out := make([]byte, 0, len(pairs)*LabelSize)
	for v, x := range xs {
		for j := range ValueBits {
			out = append(out, pairs[v*ValueBits+j][uint32(x)>>j&1][:]...)
		}
	}
	for i := range pairs {
		clear(pairs[i][0][:])
		clear(pairs[i][1][:])
	}
	return out
}

// SplitPublished cuts a publisher's label payload into labels, checking that it holds
// exactly values×32 labels (spec §8.3: the Broker rejects a wrong length).
func SplitPublished(payload []byte, values int) ([]Label, error) {
	want := values * ValueBits * LabelSize
	if values <= 0 || len(payload) != want {
		return nil, fmt.Errorf("publisher labels: %d bytes for %d values, want %d: %w", len(payload), values, want, ErrMalformed)
	}
	out := make([]Label, values*ValueBits)
	for i := range out {
		copy(out[i][:], payload[i*LabelSize:])
	}
	return out, nil
}
