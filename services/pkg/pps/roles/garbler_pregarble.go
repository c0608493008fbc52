package roles

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// Garbling ahead (spec §8.5): during the collection window the broker asks for the AND
// tables of its next execution (Pregarble), which depend on no input; at the tick its Garble
// names that execution and the garbler streams only what depends on the inputs (identity
// tables, constant labels, the decoding bits of a freshly allocated function round).

// MaxPregarbled bounds the pregarbled executions a garbler holds (each: Δ and 16 B per input
// wire); beyond it the oldest is erased, and its broker's Garble falls back to a full one.
const MaxPregarbled = 16

// MaxPregarbleANDs bounds the circuits the garbler pregarbles: the broker holds their tables
// in memory (32 B per AND gate, 64 MiB here) until the tick, while a full Garble streams
// within the chunk window whatever the size.
const MaxPregarbleANDs = 1 << 21

// pregarbled is one execution garbled ahead, for one function.
type pregarbled struct {
	fn   string
	hash [32]byte
	pg   *gc.Pregarbled
}

// pregarbledSet holds the pregarbled executions, in memory only, oldest first.
type pregarbledSet struct {
	mu    sync.Mutex
	byID  map[[16]byte]*pregarbled
	order [][16]byte
}

func (s *pregarbledSet) put(id [16]byte, p *pregarbled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[[16]byte]*pregarbled{}
	}
	s.byID[id] = p
	s.order = append(s.order, id)
	for len(s.order) > MaxPregarbled {
		old := s.order[0]
		s.order = s.order[1:]
		if o, ok := s.byID[old]; ok {
			o.pg.Erase()
			delete(s.byID, old)
		}
	}
}

// take removes and returns the execution id's pregarbled execution.
func (s *pregarbledSet) take(id []byte) *pregarbled {
	if len(id) != 16 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [16]byte(id)
	p, ok := s.byID[k]
	if !ok {
		return nil
	}
	delete(s.byID, k)
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	return p
}

// Pregarble garbles one future execution's gates ahead of its inputs and streams the tables
// (ppsv1.GarblerServer): the header with the execution id and the stream's size, then the
// gc tables stream in data messages of at most the chunk size.
func (g *Garbler) Pregarble(req *ppsv1.PregarbleRequest, stream ppsv1.Garbler_PregarbleServer) error {
	ctx := stream.Context()
	start := time.Now()
	cf, err := g.execFunction(ctx, req.GetFnId(), "pregarble", true)
	if err != nil {
		return err
	}
	if !bytes.Equal(req.GetCircuitHash(), cf.hash[:]) {
		return g.reject(codes.FailedPrecondition, "circuit_mismatch", fmt.Errorf("pregarble: circuit hash %x is not function %s's %x", req.GetCircuitHash(), cf.f.ID, cf.hash))
	}
	if cf.plan.ANDCount() > MaxPregarbleANDs {
		return g.reject(codes.FailedPrecondition, "pregarble_too_large", fmt.Errorf("pregarble: %d AND gates, at most %d are garbled ahead", cf.plan.ANDCount(), MaxPregarbleANDs))
	}
	chunk := g.opts.ChunkBytes
	if c := int(req.GetChunkBytes()); c != 0 {
		chunk = min(max(c, MinChunkBytes), MaxChunkBytes)
	}
	size := gc.TablesSize(cf.plan, 0)
	w := &streamSender{chunk: chunk, header: &ppsv1.GarbleHeader{OutputBits: uint32(cf.f.OutputBits()), StreamBytes: uint64(size)},
		send: func(m *ppsv1.GarbleResponse) error {
			if h := m.GetHeader(); h != nil {
				return stream.Send(&ppsv1.PregarbleResponse{Chunk: &ppsv1.PregarbleResponse_Header{Header: h}})
			}
			return stream.Send(&ppsv1.PregarbleResponse{Chunk: &ppsv1.PregarbleResponse_Data{Data: m.GetData()}})
		}}
	pg, err := gc.Pregarble(ctx, cf.plan, w, &gc.Options{ChunkSize: chunk})
	if err != nil {
		if ctx.Err() != nil {
			return status.Errorf(codes.Canceled, "pregarble: %v", ctx.Err())
		}
		return status.Errorf(codes.Internal, "pregarble: %v", err)
	}
	if w.header != nil || w.sent != size {
		pg.Erase()
		return status.Errorf(codes.Internal, "pregarble: streamed %d bytes, the stream is %d", w.sent, size)
	}
	g.pre.put(pg.ExecID(), &pregarbled{fn: cf.f.ID, hash: cf.hash, pg: pg})
	g.m.ands.Add(float64(cf.plan.ANDCount()))
	g.m.bytes.Add(float64(size))
	id := pg.ExecID()
	g.log.Info("pregarbled", "fn", cf.f.ID, "exec", fmt.Sprintf("%x", id[:]), "and_gates", cf.plan.ANDCount(),
		"bytes", size, "seconds", time.Since(start).Seconds())
	return nil
}

// errPregarbledUnknown is Garble's refusal of a pregarbled execution it does not hold.
var errPregarbledUnknown = errors.New("no such pregarbled execution for the function (garbled ahead on another replica, dropped, or used)")
