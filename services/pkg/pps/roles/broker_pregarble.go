package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// Garbling ahead, the broker's side (BrokerOptions.Pregarble; garbler_pregarble.go): each
// registered faithful function keeps the AND tables of its next execution, fetched from the
// garbler after registration and on the first publish of each window (so during the
// collection window, not on the tick's path);
// the tick's Garble names them and streams only what depends on the inputs. Tables are used
// once (gc.EvaluatePregarbled); a Garble the garbler refuses (pregarbled_unknown: another
// replica, dropped) falls back to a full one.

// pregarbleState is a function's pregarbled execution, guarded by brokerFunction.mu.
type pregarbleState struct {
	tables *gc.Tables
	took   time.Duration // the tables' Pregarble call, request to the last byte read
	busy   bool          // a Pregarble call is under way
}

// pregarbles reports whether f's executions are garbled ahead on this broker.
func (b *Broker) pregarbles(f *brokerFunction) bool {
	return b.opt.Pregarble && !f.hardened && f.plan.ANDCount() <= MaxPregarbleANDs
}

// pregarble fetches f's next execution's tables in the background unless f holds them or a
// fetch is under way.
func (b *Broker) pregarble(ctx context.Context, f *brokerFunction) {
	if !b.pregarbles(f) {
		return
	}
	f.mu.Lock()
	if f.pre.tables != nil || f.pre.busy || f.status != FunctionRegistered {
		f.mu.Unlock()
		return
	}
	f.pre.busy = true
	f.mu.Unlock()
	go func() {
		t0 := time.Now()
		t, err := b.fetchTables(ctx, f)
		f.mu.Lock()
		f.pre.busy = false
		if err == nil {
			f.pre.tables, f.pre.took = t, time.Since(t0)
		}
		f.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			b.log.Warn("garble ahead: the next execution will be garbled in full", "pipeline", f.p.Name, "err", err)
		}
	}()
}

// fetchTables calls Pregarble and reads the tables stream.
func (b *Broker) fetchTables(ctx context.Context, f *brokerFunction) (*gc.Tables, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hash := f.plan.Hash()
	codec := &chunkCodec{}
	call, err := b.opt.Garbler.Pregarble(ctx, &ppsv1.PregarbleRequest{FnId: f.f.ID, CircuitHash: hash[:], ChunkBytes: uint32(b.opt.ChunkBytes)}, codec.callOption())
	if err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	stream := &codecStream[ppsv1.PregarbleResponse]{call, codec}
	first, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	hdr := first.GetHeader()
	if hdr == nil {
		codec.release()
		return nil, errors.New("pregarble: stream does not start with a header")
	}
	if want := gc.TablesSize(f.plan, 0); hdr.StreamBytes != uint64(want) {
		return nil, fmt.Errorf("pregarble: a tables stream of %d bytes announced, %d expected", hdr.StreamBytes, want)
	}
	rd := streamReader(stream, hdr.StreamBytes)
	t, err := gc.ReadTables(f.plan, rd)
	if err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	if id := t.ExecID(); !bytes.Equal(id[:], hdr.ExecId) {
		return nil, errors.New("pregarble: execution id differs from the header's")
	}
	if err := rd.finish(); err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	return t, nil
}

// takeTables removes f's pregarbled tables (nil when it holds none) and returns how long
// they took to garble, send and read.
func (f *brokerFunction) takeTables() (*gc.Tables, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.pre.tables
	f.pre.tables = nil
	return t, f.pre.took
}

// PregarbleReady reports whether every registered function this broker garbles ahead holds
// its next execution's tables.
func (b *Broker) PregarbleReady() bool {
	for _, f := range b.current().fns {
		if st, _ := f.state(); st != FunctionRegistered || !b.pregarbles(f) {
			continue
		}
		f.mu.Lock()
		ok := f.pre.tables != nil
		f.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// chunkReader is a stream's data chunks as an io.Reader that refuses more bytes than
// announced: the evaluator reads it as it arrives, holding one message at a time. A message
// the call's chunkCodec took is read from gRPC's receive buffers in place (its pieces) and
// freed once read.
type chunkReader struct {
	recv   func(pieces [][]byte) ([][]byte, mem.BufferSlice, bool, error)
	buf    []byte          // the unread bytes of the current piece
	pieces [][]byte        // the current message's pieces after buf
	held   mem.BufferSlice // the current message's buffers when the codec took it
	spare  [][]byte
	left   uint64
}

// chunkMsg is a garbler stream's message, a header or a data chunk: Garble's and
// Pregarble's.
type chunkMsg interface {
	GetData() []byte
	GetHeader() *ppsv1.GarbleHeader
}

// chunkStream is a garbler stream: Garble's or Pregarble's client stream.
type chunkStream[M chunkMsg] interface {
	Recv() (M, error)
}

// codecStream is a garbler stream whose call decodes its data messages with codec.
type codecStream[R any] struct {
	grpc.ServerStreamingClient[R]
	codec *chunkCodec
}

func (s *codecStream[R]) chunkCodec() *chunkCodec { return s.codec }

// streamReader reads the data chunks s receives after a header that announced left bytes.
func streamReader[M chunkMsg](s chunkStream[M], left uint64) *chunkReader {
	var c *chunkCodec
	if cs, ok := s.(interface{ chunkCodec() *chunkCodec }); ok {
		c = cs.chunkCodec()
	}
	return &chunkReader{recv: func(ps [][]byte) ([][]byte, mem.BufferSlice, bool, error) {
		m, err := s.Recv()
		if err != nil {
			return nil, nil, false, err
		}
		if c != nil {
			if held, skip := c.take(); held != nil {
				for _, b := range held {
					d := b.ReadOnlyData()
					if skip >= len(d) {
						skip -= len(d)
						continue
					}
					ps, skip = append(ps, d[skip:]), 0
				}
				return ps, held, false, nil
			}
		}
		if d := m.GetData(); len(d) > 0 {
			ps = append(ps, d)
		}
		return ps, nil, m.GetHeader() != nil, nil
	}, left: left}
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if len(r.pieces) > 0 {
			r.buf, r.pieces = r.pieces[0], r.pieces[1:]
			continue
		}
		r.free()
		if r.left == 0 {
			return 0, io.EOF
		}
		ps, held, hdr, err := r.recv(r.spare[:0])
		if err == io.EOF {
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, err
		}
		r.held, r.spare = held, ps
		if hdr {
			return 0, errors.New("a second header in the stream")
		}
		n := uint64(0)
		for _, d := range ps {
			n += uint64(len(d))
		}
		if n > r.left {
			return 0, fmt.Errorf("stream longer than the %d bytes announced", r.left)
		}
		r.left -= n
		r.pieces = ps
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// free returns the current message's buffers to gRPC once read.
func (r *chunkReader) free() {
	if r.held != nil {
		r.held.Free()
		r.held = nil
	}
	r.buf, r.pieces = nil, nil
}

func (r *chunkReader) finish() error {
	left := uint64(len(r.buf)) + r.left
	for _, d := range r.pieces {
		left += uint64(len(d))
	}
	r.free()
	if left != 0 {
		return fmt.Errorf("%d bytes left after reading", left)
	}
	ps, held, _, err := r.recv(r.spare[:0])
	if held != nil {
		held.Free()
	}
	if err != io.EOF {
		if err == nil {
			if len(ps) == 0 {
				return errors.New("a message after the announced end of the stream")
			}
			return errors.New("data after the announced end of the stream")
		}
		return err
	}
	return nil
}
