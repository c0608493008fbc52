package lois

import (
	"encoding/binary"
	"slices"

	"golang.org/x/crypto/chacha20"
)

// Pair is one keystream and its identifier.
type Pair struct {
	ID uint64
	KS [KeystreamSize]byte
}

// Stream is one (direction, service, epoch) batch of keystreams: the ChaCha20 output of Key,
// cut into 24-byte segments, segment i giving id_i (bytes 0–7, big-endian) and ks_i (bytes
// 8–23) (spec §3.3, D-3). Index i runs over [0, N); indices on Dup (the registrar's dedup
// verdicts, D-5) and ids equal to zero are skipped identically on every side.
type Stream struct {
	Key    [StreamKeySize]byte
	Dir    Dir
	SID    uint16
	Epoch  uint32
	N      uint32
	Dup    []uint32 // sorted ascending
	Expiry int64    // unix seconds; senders stop at Expiry − margin, receivers GC at Expiry + grace
}

// segBlocks is how many ChaCha20 blocks one generation step covers: 3 blocks = 8 segments,
// so segment boundaries and block boundaries align every step.
const segBlocks = 3

// Each visits the usable pairs of the stream in ascending index order, restricted to the
// indices i with i mod replicas == replica (spec §3.11: two replicas never hold the same
// download keystream). replicas ≤ 1 means no partition. fn returning false stops the walk.
func (s *Stream) Each(replicas, replica int, fn func(i uint32, p Pair) bool) {
	if replicas < 1 {
		replicas, replica = 1, 0
	}
	generate(&s.Key, s.N, IDSize, func(i uint32, id uint64, ks []byte) bool {
		if id == 0 || int(i%uint32(replicas)) != replica {
			return true
		}
		if _, dup := slices.BinarySearch(s.Dup, i); dup {
			return true
		}
		p := Pair{ID: id}
		copy(p.KS[:], ks)
		return fn(i, p)
	})
}

// Pairs appends the stream's usable pairs (for partition replica of replicas) to dst.
func (s *Stream) Pairs(dst []Pair, replicas, replica int) []Pair {
	s.Each(replicas, replica, func(_ uint32, p Pair) bool {
		dst = append(dst, p)
		return true
	})
	return dst
}

// Segment returns the raw segment i of the stream under key (random access, spec §3.3 "why
// segment keys"): SIs regenerate only their own services and partitions.
func Segment(key *[StreamKeySize]byte, i uint32) Pair {
	off := uint64(i) * SegmentSize
	var nonce [chacha20.NonceSize]byte
	c, _ := chacha20.NewUnauthenticatedCipher(key[:], nonce[:])
	c.SetCounter(uint32(off / 64))
	var buf [128]byte
	c.XORKeyStream(buf[:], buf[:])
	seg := buf[off%64 : off%64+SegmentSize]
	p := Pair{ID: binary.BigEndian.Uint64(seg[:IDSize])}
	copy(p.KS[:], seg[IDSize:])
	return p
}

// generate runs ChaCha20(key, nonce 0, counter 0) and calls fn for every segment index below
// n with its id (idBytes = 8, or 4 for the 32-bit-id benchmark of Fig. 10a) and keystream.
func generate(key *[StreamKeySize]byte, n uint32, idBytes int, fn func(i uint32, id uint64, ks []byte) bool) {
	var nonce [chacha20.NonceSize]byte
	c, err := chacha20.NewUnauthenticatedCipher(key[:], nonce[:])
	if err != nil {
		panic(err) // fixed-size key and nonce
	}
	seg := idBytes + KeystreamSize
	// A step of segBlocks*64 bytes holds a whole number of segments for seg = 24 (8) and
	// seg = 20 (for which we use 5 blocks = 16 segments).
	step := segBlocks * 64
	if 64*5%seg == 0 && step%seg != 0 {
		step = 5 * 64
	}
	var buf [5 * 64]byte
	b := buf[:step]
	var i uint32
	for i < n {
		clear(b)
		c.XORKeyStream(b, b)
		for o := 0; o+seg <= step && i < n; o += seg {
			var id uint64
			if idBytes == 8 {
				id = binary.BigEndian.Uint64(b[o:])
			} else {
				id = uint64(binary.BigEndian.Uint32(b[o:]))
			}
			if !fn(i, id, b[o+idBytes:o+seg]) {
				return
			}
			i++
		}
	}
}
