package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

const (
	// VirtualNodes is the number of ring points per shard of a new ring. The spec's 256 (§4.3)
	// leaves a shard's share a relative standard deviation of about 1/√256 ≈ 6 %, so its own
	// T-DIST-2 (every one of 8 shards within ±5 % of the mean) fails for most shard names;
	// with 4,096 the deviation is ≈ 1.6 % and T-DIST-2 holds [R].
	VirtualNodes = 4096
	// LegacyVirtualNodes is the spec's count, which ring documents published before the change
	// carry; they still decode, so windows pinned to them finish as they started.
	LegacyVirtualNodes = 256
	// MaxShards bounds a ring document (at most 1,024 × 4,096 points of 16 bytes: 64 MiB).
	MaxShards = 1024
	// MaxShardIDLen bounds a shard id.
	MaxShardIDLen = 128
)

// ErrInvalidRing is returned for a ring document that is malformed or inconsistent.
var ErrInvalidRing = errors.New("ring: invalid ring")

type point struct {
	pos   uint64
	shard int // index into shards
}

// Ring is an immutable consistent-hash ring; safe for concurrent use.
type Ring struct {
	version uint64
	vnodes  int
	shards  []string
	points  []point
}

// New builds a ring of the given version over shard ids (order irrelevant), with
// VirtualNodes points per shard.
func New(version uint64, shards []string) (*Ring, error) { return build(version, shards, VirtualNodes) }

func build(version uint64, shards []string, vnodes int) (*Ring, error) {
	if len(shards) == 0 || len(shards) > MaxShards {
		return nil, fmt.Errorf("%w: %d shards", ErrInvalidRing, len(shards))
	}
	s := slices.Clone(shards)
	slices.Sort(s)
	for i, id := range s {
		if id == "" || len(id) > MaxShardIDLen {
			return nil, fmt.Errorf("%w: shard id length %d", ErrInvalidRing, len(id))
		}
		if i > 0 && s[i-1] == id {
			return nil, fmt.Errorf("%w: duplicate shard id %q", ErrInvalidRing, id)
		}
	}
	r := &Ring{version: version, vnodes: vnodes, shards: s, points: make([]point, 0, len(s)*vnodes)}
	for i, id := range s {
		for v := range vnodes {
			r.points = append(r.points, point{pos: Point(id, uint16(v)), shard: i})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		if a.pos != b.pos {
			if a.pos < b.pos {
				return -1
			}
			return 1
		}
		return a.shard - b.shard
	})
	return r, nil
}

// Point is shard id's v-th virtual point: uint64(SHA-256("PDA-ring" || id || I2OSP(v,2))[0:8]).
func Point(id string, v uint16) uint64 {
	h := sha256.New()
	h.Write([]byte("PDA-ring"))
	h.Write([]byte(id))
	h.Write([]byte{byte(v >> 8), byte(v)})
	var sum [32]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0])[:8])
}

// Owner returns the shard owning key position pos: the first point ≥ pos, wrapping to the
// smallest point.
func (r *Ring) Owner(pos uint64) string {
	i, _ := slices.BinarySearchFunc(r.points, pos, func(p point, x uint64) int {
		switch {
		case p.pos < x:
			return -1
		case p.pos > x:
			return 1
		}
		return 0
	})
	if i == len(r.points) {
		i = 0
	}
	return r.shards[r.points[i].shard]
}

// Version returns the ring version carried by every Entry.
func (r *Ring) Version() uint64 { return r.version }

// Shards returns the sorted shard ids.
func (r *Ring) Shards() []string { return slices.Clone(r.shards) }

type document struct {
	Version      uint64   `json:"version"`
	VirtualNodes int      `json:"virtual_nodes"`
	Shards       []string `json:"shards"`
}

// MarshalJSON encodes the ring document stored in NATS KV.
func (r *Ring) MarshalJSON() ([]byte, error) {
	return json.Marshal(document{Version: r.version, VirtualNodes: r.vnodes, Shards: r.shards})
}

// Decode parses and validates a ring document. Shard ids must be listed sorted, so one
// ring has exactly one encoding.
func Decode(b []byte) (*Ring, error) {
	var d document
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRing, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrInvalidRing)
	}
	if d.VirtualNodes != VirtualNodes && d.VirtualNodes != LegacyVirtualNodes {
		return nil, fmt.Errorf("%w: %d virtual nodes, want %d (or %d)", ErrInvalidRing, d.VirtualNodes, VirtualNodes, LegacyVirtualNodes)
	}
	if !slices.IsSorted(d.Shards) {
		return nil, fmt.Errorf("%w: shard ids not sorted", ErrInvalidRing)
	}
	return build(d.Version, d.Shards, d.VirtualNodes)
}
