package mohito

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// uniformSource draws unbiased integers from a cryptographic byte stream.
type uniformSource struct {
	r   *bufio.Reader
	buf [8]byte
	err error
}

func newUniformSource(rand io.Reader) *uniformSource {
	return &uniformSource{r: bufio.NewReaderSize(rand, 4096)}
}

func (u *uniformSource) uint64() uint64 {
	if u.err != nil {
		return 0
	}
	if _, err := io.ReadFull(u.r, u.buf[:]); err != nil {
		u.err = err
		return 0
	}
	return binary.LittleEndian.Uint64(u.buf[:])
}

// intn returns a uniform integer in [0, n) (Lemire's multiply-and-reject;
// exact, no modulo bias).
func (u *uniformSource) intn(n uint64) uint64 {
	hi, lo := bits.Mul64(u.uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh && u.err == nil {
			hi, lo = bits.Mul64(u.uint64(), n)
		}
	}
	return hi
}

// randomPermutation returns a uniformly random permutation of [0, n) by
// Fisher–Yates driven by rand (crypto/rand in production; spec §3.1).
func randomPermutation(n int, rand io.Reader) ([]uint32, error) {
	perm := make([]uint32, n)
	for i := range perm {
		perm[i] = uint32(i)
	}
	u := newUniformSource(rand)
	for i := n - 1; i > 0; i-- {
		j := u.intn(uint64(i + 1))
		perm[i], perm[j] = perm[j], perm[i]
	}
	if u.err != nil {
		return nil, fmt.Errorf("sample permutation: %w", u.err)
	}
	return perm, nil
}

// TargetPolicy is the public per-vendor policy from which the integrator draws
// the secret per-round target C_v = Base + δ + U{0..Width} (spec G3a). Base is
// chosen as a high quantile of the vendor's real count (spec G5).
type TargetPolicy struct {
	Base  uint64
	Width uint64
}

// DrawTargets draws a fresh target vector C for one round. C stays inside the
// integrator: the shuffler only ever sees Y = C − X₁.
func DrawTargets(policy []TargetPolicy, delta uint64, rand io.Reader) ([]uint64, error) {
	u := newUniformSource(rand)
	c := make([]uint64, len(policy))
	for v, pol := range policy {
		if pol.Width >= MaxRoundMessages || pol.Base >= MaxRoundMessages {
			return nil, fmt.Errorf("%w: policy of vendor %d", ErrParams, v)
		}
		c[v] = pol.Base + delta + u.intn(pol.Width+1)
	}
	if u.err != nil {
		return nil, fmt.Errorf("draw targets: %w", u.err)
	}
	return c, nil
}

// CommandCapacity is the public OKVS size class of a vendor's command table
// (spec G3b): the smallest K·2^i ≥ n. With K above the largest C_v + S seen in
// practice the size is always K, so the table size reveals nothing about C_v;
// the next class is used only on overflow.
func CommandCapacity(n, k int) int {
	c := max(k, 1)
	for c < n {
		c *= 2
	}
	return c
}

// ResponseCapacity is the public coarse capacity of a vendor's response table
// (spec G6): q·|𝒟_a| rounded up to a multiple of quantum, so device churn is
// visible to the integrator only in coarse steps.
func ResponseCapacity(n, quantum int) int {
	quantum = max(quantum, 1)
	return max(1, (n+quantum-1)/quantum) * quantum
}
