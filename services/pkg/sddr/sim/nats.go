package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// SubjectPrefix is the root of a run's subjects: <prefix>.<runID>.data.<shard> carries the
// batches for a shard, <prefix>.<runID>.ready.<shard> answers once the shard listens.
const SubjectPrefix = "sddr.sim"

// chunkBytes keeps each NATS message under the default 1 MiB max_payload.
const chunkBytes = 512 << 10

// NATS is the Transport of a sharded run over core NATS. Each shard subscribes to its data
// subject, answers requests on its ready subject, and before the first step waits until
// every other shard has answered one (so no batch is published before its receiver listens).
// Batches are split in chunks of ≤ 512 KiB; a header (from, step, chunk, chunks) lets the
// receiver reassemble them and keep early batches of the next step.
type NATS struct {
	nc            *nats.Conn
	run           string
	self, shards  int
	sub, readySub *nats.Subscription
	mu            sync.Mutex
	queue         [][]byte
	arrived       chan struct{}
	// ReadyTimeout bounds the wait for the other shards at the start (default 10 min: the
	// pods of an Indexed Job may start minutes apart).
	ReadyTimeout time.Duration

	started bool
	pending map[int64]*stepIn
}

type stepIn struct {
	chunks [][][]byte // from → chunk → bytes
	left   []int      // from → chunks missing (−1: header not seen yet)
	done   int
}

// NewNATS joins run as shard self of shards over nc (which the caller owns and closes).
func NewNATS(nc *nats.Conn, runID string, self, shards int) (*NATS, error) {
	if runID == "" || !validToken(runID) {
		return nil, fmt.Errorf("sim: run id %q must be a non-empty NATS subject token ([A-Za-z0-9_-])", runID)
	}
	t := &NATS{nc: nc, run: runID, self: self, shards: shards, arrived: make(chan struct{}, 1),
		ReadyTimeout: 10 * time.Minute, pending: map[int64]*stepIn{}}
	var err error
	// The callback only queues (unbounded): a shard busy with a long step must not become a
	// slow consumer and lose a batch.
	if t.sub, err = nc.Subscribe(t.subject("data", self), func(m *nats.Msg) {
		t.mu.Lock()
		t.queue = append(t.queue, m.Data)
		t.mu.Unlock()
		select {
		case t.arrived <- struct{}{}:
		default:
		}
	}); err != nil {
		return nil, err
	}
	if err = t.sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	if t.readySub, err = nc.Subscribe(t.subject("ready", self), func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		return nil, err
	}
	if err = nc.Flush(); err != nil {
		return nil, err
	}
	return t, nil
}

func validToken(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (t *NATS) subject(kind string, shard int) string {
	return SubjectPrefix + "." + t.run + "." + kind + "." + strconv.Itoa(shard)
}

func (t *NATS) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.ReadyTimeout)
	defer cancel()
	for j := range t.shards {
		if j == t.self {
			continue
		}
		for {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := t.nc.RequestWithContext(rctx, t.subject("ready", j), nil)
			rcancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("sim: shard %d never became ready: %w", j, err)
			}
			if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
				return fmt.Errorf("sim: ready request to shard %d: %w", j, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

const hdrBytes = 2 + 8 + 4 + 4

// Exchange implements Transport.
func (t *NATS) Exchange(ctx context.Context, step int64, out [][]byte) ([][]byte, error) {
	if len(out) != t.shards {
		return nil, fmt.Errorf("sim: %d batches for %d shards", len(out), t.shards)
	}
	if !t.started {
		if err := t.waitReady(ctx); err != nil {
			return nil, err
		}
		t.started = true
	}
	for j := range t.shards {
		if j == t.self {
			continue
		}
		b := out[j]
		n := max(1, (len(b)+chunkBytes-1)/chunkBytes)
		for c := range n {
			part := b[min(len(b), c*chunkBytes):min(len(b), (c+1)*chunkBytes)]
			msg := make([]byte, hdrBytes, hdrBytes+len(part))
			binary.BigEndian.PutUint16(msg, uint16(t.self))
			binary.BigEndian.PutUint64(msg[2:], uint64(step))
			binary.BigEndian.PutUint32(msg[10:], uint32(c))
			binary.BigEndian.PutUint32(msg[14:], uint32(n))
			if err := t.nc.Publish(t.subject("data", j), append(msg, part...)); err != nil {
				return nil, err
			}
		}
	}
	fctx, fcancel := context.WithTimeout(ctx, time.Minute) // FlushWithContext needs a deadline
	err := t.nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		return nil, err
	}
	for {
		if in := t.take(step); in != nil {
			return in, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.arrived:
			t.mu.Lock()
			q := t.queue
			t.queue = nil
			t.mu.Unlock()
			for _, b := range q {
				if err := t.add(b); err != nil {
					return nil, err
				}
			}
		case <-time.After(time.Minute):
			if t.nc.IsClosed() {
				return nil, errors.New("sim: NATS connection closed")
			}
		}
	}
}

func (t *NATS) add(b []byte) error {
	if len(b) < hdrBytes {
		return errors.New("sim: short batch message")
	}
	from := int(binary.BigEndian.Uint16(b))
	step := int64(binary.BigEndian.Uint64(b[2:]))
	c, n := int(binary.BigEndian.Uint32(b[10:])), int(binary.BigEndian.Uint32(b[14:]))
	if from < 0 || from >= t.shards || from == t.self || n < 1 || c >= n {
		return fmt.Errorf("sim: bad batch header (from %d, chunk %d/%d)", from, c, n)
	}
	p := t.pending[step]
	if p == nil {
		p = &stepIn{chunks: make([][][]byte, t.shards), left: make([]int, t.shards)}
		for i := range p.left {
			p.left[i] = -1
		}
		t.pending[step] = p
	}
	if p.left[from] == -1 {
		p.chunks[from] = make([][]byte, n)
		p.left[from] = n
	}
	if len(p.chunks[from]) != n || p.chunks[from][c] != nil {
		return fmt.Errorf("sim: duplicate or inconsistent chunk from shard %d step %d", from, step)
	}
	p.chunks[from][c] = append([]byte{}, b[hdrBytes:]...)
	p.left[from]--
	if p.left[from] == 0 {
		p.done++
	}
	return nil
}

func (t *NATS) take(step int64) [][]byte {
	p := t.pending[step]
	if t.shards == 1 {
		return make([][]byte, 1)
	}
	if p == nil || p.done < t.shards-1 {
		return nil
	}
	delete(t.pending, step)
	in := make([][]byte, t.shards)
	for j, cs := range p.chunks {
		for _, c := range cs {
			in[j] = append(in[j], c...)
		}
	}
	return in
}

// Close unsubscribes; the connection stays the caller's.
func (t *NATS) Close() error {
	err := t.nc.Flush()
	return errors.Join(err, t.sub.Unsubscribe(), t.readySub.Unsubscribe())
}
