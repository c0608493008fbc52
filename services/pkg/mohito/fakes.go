package mohito

import (
	"fmt"
	"io"
	"sync"
)

// MakeFake builds one fake entry for vendor v: ⟨(z_rand, v, rand, k_rand)⟩_I,
// sealed with the same function as real entries (spec §3.6 C4 step 3, G1 step
// 2: a fake carries a random k_I^resp).
func MakeFake(p Params, pkI *PublicKey, v uint32, rand io.Reader) ([]byte, error) {
	var z EphemeralID
	var k [KeySize]byte
	ct := make([]byte, p.DeviceCiphertextSize())
	if err := readAll(rand, z[:], k[:], ct); err != nil {
		return nil, fmt.Errorf("sample fake: %w", err)
	}
	return sealInner(pkI, p, &z, v, ct, &k)
}

// FakePool holds pre-generated fakes per vendor (spec §3.6 C4, G7: taking a
// fake costs the same whatever the count, so the shuffler's emission cadence
// does not depend on how many fakes a round needs). Each fake is used once.
// Safe for concurrent use.
type FakePool struct {
	mu     sync.Mutex
	params Params
	pkI    *PublicKey
	fakes  [][][]byte
	misses int
}

// NewFakePool returns an empty pool for fakes to pkI.
func NewFakePool(p Params, pkI *PublicKey) *FakePool {
	return &FakePool{params: p, pkI: pkI, fakes: make([][][]byte, p.Vendors)}
}

// Key returns the integrator key the pool's fakes are sealed to.
func (fp *FakePool) Key() *PublicKey { return fp.pkI }

// Fill pre-generates fakes until vendor v has at least n.
func (fp *FakePool) Fill(v uint32, n int, rand io.Reader) error {
	if int(v) >= fp.params.Vendors {
		return fmt.Errorf("%w: vendor %d", ErrParams, v)
	}
	for fp.Len(v) < n {
		f, err := MakeFake(fp.params, fp.pkI, v, rand)
		if err != nil {
			return err
		}
		fp.mu.Lock()
		fp.fakes[v] = append(fp.fakes[v], f)
		fp.mu.Unlock()
	}
	return nil
}

// Len is the number of pooled fakes for vendor v.
func (fp *FakePool) Len(v uint32) int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return len(fp.fakes[v])
}

// Misses counts fakes that had to be generated inline because the pool ran
// dry; a non-zero value is an operational alarm (timing, spec G7).
func (fp *FakePool) Misses() int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return fp.misses
}

// take removes n fakes for vendor v, generating the shortfall inline.
func (fp *FakePool) take(v uint32, n int, rand io.Reader) ([][]byte, error) {
	fp.mu.Lock()
	have := fp.fakes[v]
	k := min(n, len(have))
	out := make([][]byte, 0, n)
	out = append(out, have[len(have)-k:]...)
	fp.fakes[v] = have[:len(have)-k]
	fp.misses += n - k
	fp.mu.Unlock()
	for len(out) < n {
		f, err := MakeFake(fp.params, fp.pkI, v, rand)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
