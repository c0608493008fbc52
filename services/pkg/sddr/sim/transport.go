package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// A Transport exchanges one batch per step between the shards of a run: every shard sends
// exactly one batch (possibly empty) to every other shard for every step, then receives the
// batches the others sent it for that step. The exchange is the only synchronisation between
// shards (a barrier per step).
type Transport interface {
	// Exchange sends out[j] to every shard j ≠ self for step and returns in[j], what shard j
	// sent this shard for the step (in[self] is nil).
	Exchange(ctx context.Context, step int64, out [][]byte) ([][]byte, error)
	Close() error
}

// Hub connects the shards of an in-process run.
type Hub struct {
	shards int
	boxes  []*mailbox
}

type mailbox struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending map[int64][][]byte // step → from → batch
	got     map[int64]int
	closed  bool
}

// NewHub returns an in-process hub for shards shards.
func NewHub(shards int) *Hub {
	h := &Hub{shards: shards}
	for range shards {
		m := &mailbox{pending: map[int64][][]byte{}, got: map[int64]int{}}
		m.cond = sync.NewCond(&m.mu)
		h.boxes = append(h.boxes, m)
	}
	return h
}

// Transport returns shard i's end of the hub.
func (h *Hub) Transport(i int) Transport { return &local{h: h, self: i} }

type local struct {
	h    *Hub
	self int
}

func (l *local) deliver(to int, step int64, b []byte) {
	m := l.h.boxes[to]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending[step] == nil {
		m.pending[step] = make([][]byte, l.h.shards)
	}
	m.pending[step][l.self] = b
	m.got[step]++
	m.cond.Broadcast()
}

func (l *local) Exchange(ctx context.Context, step int64, out [][]byte) ([][]byte, error) {
	if len(out) != l.h.shards {
		return nil, fmt.Errorf("sim: %d batches for %d shards", len(out), l.h.shards)
	}
	for j := range l.h.shards {
		if j != l.self {
			l.deliver(j, step, append([]byte{}, out[j]...))
		}
	}
	m := l.h.boxes[l.self]
	stop := context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.got[step] < l.h.shards-1 {
		if m.closed {
			return nil, errors.New("sim: hub closed")
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m.cond.Wait()
	}
	in := m.pending[step]
	if in == nil {
		in = make([][]byte, l.h.shards)
	}
	delete(m.pending, step)
	delete(m.got, step)
	return in, nil
}

func (l *local) Close() error {
	m := l.h.boxes[l.self]
	m.mu.Lock()
	m.closed = true
	m.cond.Broadcast()
	m.mu.Unlock()
	return nil
}
