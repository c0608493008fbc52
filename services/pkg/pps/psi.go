package pps

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/oprf"
)

// psiSuite is RFC 9497 OPRF over ristretto255 with SHA-512 (D16a).
var psiSuite = oprf.SuiteRistretto255

// PSITransport carries the Broker's PSIRequest to the Garbler and its PSIResponse back
// (gRPC in the services; a loopback in tests).
type PSITransport interface {
	EvaluatePSI(ctx context.Context, req *PSIRequest) (*PSIResponse, error)
}

// OPRFChecker is the ConsistencyChecker of D16a: an OPRF-based PSI in which only the Broker
// learns the intersection. The Broker blinds its position-masked labels R_B; the Garbler,
// holding a fresh OPRF key per check, evaluates them obliviously and sends the OPRF tags of
// R_G = {w0⊕r_pos, w1⊕r_pos} sorted; the Broker unblinds and looks its tags up. The Garbler
// learns |R_B| and the positions (which it knows anyway); the Broker learns, for each of its
// labels, only whether it is in R_G — never which of w0 and w1 it matched, nor the other label.
type OPRFChecker struct {
	Garbler PSITransport
	// Rand draws s2 and the blinds; nil means crypto/rand.
	Rand io.Reader
}

var _ ConsistencyChecker = (*OPRFChecker)(nil)

// Check runs one consistency check. received must name each position at most once.
func (c *OPRFChecker) Check(ctx context.Context, exec ExecID, received []ReceivedLabel) ([]Position, error) {
	if len(received) == 0 {
		return nil, nil
	}
	if len(received) > MaxPSIElements {
		return nil, fmt.Errorf("consistency check: %d labels, at most %d", len(received), MaxPSIElements)
	}
	rnd := c.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	recv := slices.Clone(received)
	slices.SortFunc(recv, func(a, b ReceivedLabel) int { return cmp.Compare(a.Pos, b.Pos) })
	for i := 1; i < len(recv); i++ {
		if recv[i].Pos == recv[i-1].Pos {
			return nil, fmt.Errorf("consistency check: position %d received twice", recv[i].Pos)
		}
	}
	req := &PSIRequest{Exec: exec, Positions: make([]Position, len(recv)), Blinded: make([][elementSize]byte, len(recv))}
	if _, err := io.ReadFull(rnd, req.S2[:]); err != nil {
		return nil, fmt.Errorf("consistency check: draw s2: %w", err)
	}
	client := oprf.NewClient(psiSuite)
	chunks := chunkRanges(len(recv))
	fin := make([]*oprf.FinalizeData, len(chunks))
	err := forEachChunk(chunks, func(ci, lo, hi int) error {
		inputs := make([][]byte, hi-lo)
		for i := lo; i < hi; i++ {
			req.Positions[i] = recv[i].Pos
			m := maskLabel(&recv[i].Label, &req.S2, recv[i].Pos)
			inputs[i-lo] = m[:]
		}
		f, er, err := client.Blind(inputs)
		if err != nil {
			return err
		}
		for i, e := range er.Elements {
			if err := marshalElement(req.Blinded[lo+i][:], e); err != nil {
				return err
			}
		}
		fin[ci] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("consistency check: blind: %w", err)
	}
	resp, err := c.Garbler.EvaluatePSI(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("consistency check: garbler: %w", err)
	}
	if resp.Exec != exec || len(resp.Evaluated) != len(recv) {
		return nil, fmt.Errorf("consistency check: response for exec %x with %d elements, want %x with %d: %w",
			resp.Exec, len(resp.Evaluated), exec, len(recv), ErrMalformed)
	}
	if !slices.IsSortedFunc(resp.Tags, func(a, b [TagSize]byte) int { return bytes.Compare(a[:], b[:]) }) {
		return nil, fmt.Errorf("consistency check: garbler tags are not sorted: %w", ErrMalformed)
	}
	found := make([]bool, len(recv))
	err = forEachChunk(chunks, func(ci, lo, hi int) error {
		ev := &oprf.Evaluation{Elements: make([]group.Element, hi-lo)}
		for i := lo; i < hi; i++ {
			e, err := unmarshalElement(resp.Evaluated[i][:])
			if err != nil {
				return err
			}
			ev.Elements[i-lo] = e
		}
		outs, err := client.Finalize(fin[ci], ev)
		if err != nil {
			return err
		}
		for i, o := range outs {
			_, found[lo+i] = slices.BinarySearchFunc(resp.Tags, o[:TagSize], func(t [TagSize]byte, o []byte) int {
				return bytes.Compare(t[:], o)
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("consistency check: finalize: %w: %w", err, ErrMalformed)
	}
	var bad []Position
	for i, ok := range found {
		if !ok {
			bad = append(bad, recv[i].Pos)
		}
	}
	return bad, nil
}

// LabelSource gives the Garbler both labels of a position, regenerated from the
// publisher's round seed. RespondPSI calls it from one goroutine, in position order. An error (ErrRoundErased, an unknown slot) leaves the position
// out of R_G, so the Broker finds it inconsistent and the slot is nullified.
type LabelSource func(Position) (LabelPair, error)

// RespondPSI is the Garbler's side of OPRFChecker: with a fresh OPRF key it evaluates the
// Broker's blinded elements and computes the sorted tags of R_G over the requested positions.
func RespondPSI(req *PSIRequest, labels LabelSource) (*PSIResponse, error) {
	if len(req.Positions) != len(req.Blinded) {
		return nil, fmt.Errorf("respond PSI: %d positions, %d elements: %w", len(req.Positions), len(req.Blinded), ErrMalformed)
	}
	key, err := oprf.GenerateKey(psiSuite, rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("respond PSI: oprf key: %w", err)
	}
	server := oprf.NewServer(psiSuite, key)
	resp := &PSIResponse{Exec: req.Exec, Evaluated: make([][elementSize]byte, len(req.Blinded))}
	chunks := chunkRanges(len(req.Blinded))
	err = forEachChunk(chunks, func(_, lo, hi int) error {
		er := &oprf.EvaluationRequest{Elements: make([]group.Element, hi-lo)}
		for i := lo; i < hi; i++ {
			e, err := unmarshalElement(req.Blinded[i][:])
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			er.Elements[i-lo] = e
		}
		ev, err := server.Evaluate(er)
		if err != nil {
			return err
		}
		for i, e := range ev.Elements {
			if err := marshalElement(resp.Evaluated[lo+i][:], e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("respond PSI: evaluate: %w", err)
	}
	// Labels are gathered in order on this goroutine (a LabelSource usually advances a
	// ratchet, which is single-writer); only the group operations run in parallel.
	masked := make([]Label, 0, 2*len(req.Positions))
	for _, pos := range req.Positions {
		pair, err := labels(pos)
		if err != nil {
			continue
		}
		masked = append(masked, maskLabel(&pair[0], &req.S2, pos), maskLabel(&pair[1], &req.S2, pos))
		clear(pair[0][:])
		clear(pair[1][:])
	}
	defer clear(masked)
	tags := make([][TagSize]byte, len(masked))
	err = forEachChunk(chunkRanges(len(masked)), func(_, lo, hi int) error {
		for i := lo; i < hi; i++ {
			out, err := server.FullEvaluate(masked[i][:])
			if err != nil {
				return err
			}
			copy(tags[i][:], out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("respond PSI: tags: %w", err)
	}
	slices.SortFunc(tags, func(a, b [TagSize]byte) int { return bytes.Compare(a[:], b[:]) })
	resp.Tags = slices.CompactFunc(tags, func(a, b [TagSize]byte) bool { return a == b })
	return resp, nil
}

var errElement = errors.New("not a canonical non-identity ristretto255 element")

func unmarshalElement(b []byte) (group.Element, error) {
	e := psiSuite.Group().NewElement()
	if err := e.UnmarshalBinary(b); err != nil || e.IsIdentity() {
		return nil, errElement
	}
	return e, nil
}

func marshalElement(dst []byte, e group.Element) error {
	b, err := e.MarshalBinaryCompress()
	if err != nil {
		return err
	}
	if len(b) != elementSize {
		return fmt.Errorf("element of %d bytes", len(b))
	}
	copy(dst, b)
	return nil
}

// minChunk keeps goroutine overhead small against ~50µs of group operations per element.
const minChunk = 64

type chunk struct{ lo, hi int }

func chunkRanges(n int) []chunk {
	workers := runtime.GOMAXPROCS(0)
	size := max(minChunk, (n+workers-1)/workers)
	var cs []chunk
	for lo := 0; lo < n; lo += size {
		cs = append(cs, chunk{lo, min(n, lo+size)})
	}
	return cs
}

// forEachChunk runs f on every chunk concurrently and returns the first error.
func forEachChunk(cs []chunk, f func(i, lo, hi int) error) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = f(i, c.lo, c.hi) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
