package pda

import (
	"crypto/rand"
	"fmt"
	"io"
)

// This file holds the small additions the services (services/pkg/pda/roles) need to run the
// stages outside the in-memory Table: a shard whose rows live in Redis builds its reveal
// requests from stored entries, and benchmarks count scalar multiplications per key.

// NewRevealRequest builds a reveal request for the row Y of a shard that keeps its entries
// outside a Table (spec §3.9.5 step 1, A9): each entry's E_PRX(k) chunks are re-randomised
// under h_PRX and the entries are put in a fresh uniform order with a fresh random request
// id. order[i] is the index into inner of the entry at request position i; the caller keeps
// it inside the DB domain to map the oracle's bitmap back. Nothing the proxy has seen
// before (entry ids, tags, values, forwarded ciphertexts) goes into the request (T-PRIV-13).
func (s *Suite) NewRevealRequest(y []byte, inner [][]Ciphertext, r io.Reader) (req []byte, id [RequestIDSize]byte, order []int, err error) {
	if r == nil {
		r = rand.Reader
	}
	order = make([]int, len(inner))
	for i := range order {
		order[i] = i
	}
	if err := permute(order, r); err != nil {
		return nil, id, nil, err
	}
	q := &RevealRequest{Window: s.params.Window, Y: y, Entries: make([][]Ciphertext, len(inner))}
	if _, err := io.ReadFull(r, q.RequestID[:]); err != nil {
		return nil, id, nil, fmt.Errorf("%w: %v", ErrRandomness, err)
	}
	for i, j := range order {
		if len(inner[j]) != int(s.params.Chunks) {
			return nil, id, nil, fmt.Errorf("%w: entry chunks", ErrMalformed)
		}
		q.Entries[i] = make([]Ciphertext, len(inner[j]))
		for c, ct := range inner[j] {
			if q.Entries[i][c], err = s.g.rerandomize(s.hPRX, ct, r); err != nil {
				return nil, id, nil, err
			}
		}
	}
	b, err := s.MarshalRevealRequest(q)
	if err != nil {
		return nil, id, nil, err
	}
	return b, q.RequestID, order, nil
}

// MulCounts are scalar multiplications by kind: variable-base, fixed-base on the generator,
// fixed-base on a public key through the comb table (ristretto255 only), and points in
// the batched proof check's variable-time multi-scalar multiplication.
type MulCounts struct{ Variable, Fixed, Table, MSM int }

// CountMultiplications runs f with the multiplication counter on and returns the counts.
// The counter is a plain global: f must do all of its group operations on the calling
// goroutine, and nothing else may use the package concurrently. For benchmarks only.
func CountMultiplications(f func()) MulCounts {
	countMuls = &mulCounts{}
	f()
	c := *countMuls
	countMuls = nil
	return MulCounts{Variable: c.variable, Fixed: c.fixed, Table: c.table, MSM: c.msm}
}
