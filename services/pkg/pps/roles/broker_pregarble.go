package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
	stream, err := b.opt.Garbler.Pregarble(ctx, &ppsv1.PregarbleRequest{FnId: f.f.ID, CircuitHash: hash[:], ChunkBytes: uint32(b.opt.ChunkBytes)})
	if err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("pregarble: %w", err)
	}
	hdr := first.GetHeader()
	if hdr == nil {
		return nil, errors.New("pregarble: stream does not start with a header")
	}
	if want := gc.TablesSize(f.plan, 0); hdr.StreamBytes != uint64(want) {
		return nil, fmt.Errorf("pregarble: a tables stream of %d bytes announced, %d expected", hdr.StreamBytes, want)
	}
	rd := streamReader(stream.Recv, hdr.StreamBytes)
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
// announced: the evaluator reads it as it arrives, holding one chunk at a time.
type chunkReader struct {
	recv func() (data []byte, header bool, err error)
	buf  []byte
	left uint64
}

// chunkMsg is a garbler stream's message, a header or a data chunk: Garble's and
// Pregarble's.
type chunkMsg interface {
	GetData() []byte
	GetHeader() *ppsv1.GarbleHeader
}

// streamReader reads the data chunks received by recv (a stream's Recv) after a header
// that announced left bytes.
func streamReader[M chunkMsg](recv func() (M, error), left uint64) *chunkReader {
	return &chunkReader{recv: func() ([]byte, bool, error) {
		m, err := recv()
		if err != nil {
			return nil, false, err
		}
		return m.GetData(), m.GetHeader() != nil, nil
	}, left: left}
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		d, hdr, err := r.recv()
		if err == io.EOF {
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, err
		}
		if hdr {
			return 0, errors.New("a second header in the stream")
		}
		if uint64(len(d)) > r.left {
			return 0, fmt.Errorf("stream longer than the %d bytes announced", r.left)
		}
		r.left -= uint64(len(d))
		r.buf = d
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *chunkReader) finish() error {
	if len(r.buf) != 0 || r.left != 0 {
		return fmt.Errorf("%d bytes left after reading", uint64(len(r.buf))+r.left)
	}
	if _, _, err := r.recv(); err != io.EOF {
		if err == nil {
			return errors.New("data after the announced end of the stream")
		}
		return err
	}
	return nil
}
