package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

func shards(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("shard-%d", i)
	}
	return s
}

// T-DIST-2: 8 shards, 10⁶ random positions. [!] The spec asks for ±5 % of the mean, but
// with V = 256 points per shard a shard's share of the ring has a relative standard
// deviation of about 1/√V ≈ 6 %, so ±5 % cannot hold in general (here shard-0 is at −7 %).
// The test pins the deviations of this deterministic ring at ±10 % and logs them; ±5 %
// needs V in the thousands.
func TestBalance(t *testing.T) {
	r, err := New(1, shards(8))
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	const n = 1_000_000
	load := map[string]int{}
	for range n {
		load[r.Owner(rnd.Uint64())]++
	}
	mean := float64(n) / 8
	for _, s := range r.Shards() {
		c := load[s]
		dev := float64(c)/mean - 1
		t.Logf("%s: %+.1f%%", s, 100*dev)
		if dev > 0.10 || dev < -0.10 {
			t.Errorf("%s: load %d, %.1f%% from the mean", s, c, 100*dev)
		}
	}
}

// T-DIST-3: adding a ninth shard moves about 1/9 of positions, all of them to the new shard.
func TestAddShardMovesOneNth(t *testing.T) {
	r8, _ := New(1, shards(8))
	r9, _ := New(2, shards(9))
	rnd := rand.New(rand.NewPCG(3, 4))
	const n = 200_000
	moved := 0
	for range n {
		p := rnd.Uint64()
		a, b := r8.Owner(p), r9.Owner(p)
		if a != b {
			moved++
			if b != "shard-8" {
				t.Fatalf("position moved between old shards %s → %s", a, b)
			}
		}
	}
	if f := float64(moved) / n; f < 0.08 || f > 0.145 {
		t.Fatalf("moved fraction %.3f, want ≈ 1/9", f)
	}
}

// Known answers pin the point derivation and the wrap-around.
func TestPointsAndWrap(t *testing.T) {
	sum := sha256.Sum256(append([]byte("PDA-ringshard-0"), 0, 1))
	if Point("shard-0", 1) != binary.BigEndian.Uint64(sum[:8]) {
		t.Fatal("point derivation differs from spec §4.3")
	}
	r, _ := New(7, []string{"b", "a"})
	first, last := r.points[0], r.points[len(r.points)-1]
	if r.Owner(last.pos+1) != r.shards[first.shard] || r.Owner(0) != r.shards[first.shard] {
		t.Fatal("no wrap-around to the smallest point")
	}
	if r.Owner(first.pos) != r.shards[first.shard] || r.Owner(last.pos) != r.shards[last.shard] {
		t.Fatal("a point does not own its own position")
	}
	if r.Version() != 7 || r.Shards()[0] != "a" {
		t.Fatal("version or shard order")
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	r, _ := New(3, shards(3))
	b, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Decode(b)
	if err != nil || r2.Version() != 3 || len(r2.points) != len(r.points) {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{
		``, `{}`, `{"version":1,"virtual_nodes":256,"shards":[]}`,
		`{"version":1,"virtual_nodes":255,"shards":["a"]}`,
		`{"version":1,"virtual_nodes":256,"shards":["b","a"]}`,
		`{"version":1,"virtual_nodes":256,"shards":["a","a"]}`,
		`{"version":1,"virtual_nodes":256,"shards":[""]}`,
		`{"version":1,"virtual_nodes":256,"shards":["a"],"x":1}`,
		`{"version":1,"virtual_nodes":256,"shards":["a"]} {}`,
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r, _ := New(1, shards(2))
	b, _ := r.MarshalJSON()
	f.Add(b)
	f.Add([]byte(`{"version":1,"virtual_nodes":256,"shards":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Decode(b2)
		if err != nil || r2.Owner(12345) != r.Owner(12345) {
			t.Fatal("re-encoded ring differs")
		}
	})
}
