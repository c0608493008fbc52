package roundstate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Concurrent Admit calls — every user's Submit lands on the gateway at its own time, but at
// load many are in flight at once — share one pipelined round trip to Redis: the first caller
// sends the admission scripts of every call queued meanwhile, one EVALSHA each, and reads their
// replies in order. Each script stays atomic on its own (closed check, quota, duplicate
// envelope, index), so the pipeline changes the number of round trips and system calls, not the
// outcome of any admission: each caller gets its own index or refusal, exactly as from a
// Redis.Admit of its own. No linger: an idle gateway's single call is sent at once.

// admitBatchMax bounds one pipeline (a burst beyond it is sent as several).
const admitBatchMax = 256

type admitQueue struct {
	mu      sync.Mutex
	queue   []*admitCall
	sending bool
}

type admitCall struct {
	ctx  context.Context
	t    uint64
	user string
	q    int
	m1   []byte
	idx  uint32
	err  error
	done chan struct{}
}

func admitKeys(t uint64, user string) []string {
	return []string{key(t, "closed"), key(t, "quota", user), key(t, "seq"), key(t, "m1"), key(t, "user"), key(t, "seen")}
}

func admitResult(t uint64, n int64, err error) (uint32, error) {
	if err != nil {
		return 0, fmt.Errorf("admit in round %d: %w", t, err)
	}
	switch n {
	case -1:
		return 0, ErrClosed
	case -2:
		return 0, ErrRateLimit
	case -3:
		return 0, ErrDuplicate
	}
	return uint32(n), nil
}

// admitOne runs one admission on its own round trip (EVALSHA, EVAL if Redis lacks the script).
func (r *Redis) admitOne(ctx context.Context, c *admitCall) {
	digest := sha256.Sum256(c.m1)
	n, err := admitScript.Run(ctx, r.c, admitKeys(c.t, c.user), c.q, c.user, c.m1, r.ttl.Milliseconds(), digest[:]).Int64()
	c.idx, c.err = admitResult(c.t, n, err)
}

// Admit implements Store.
func (r *Redis) Admit(ctx context.Context, t uint64, user string, q int, m1 []byte) (uint32, error) {
	c := &admitCall{ctx: ctx, t: t, user: user, q: q, m1: m1, done: make(chan struct{})}
	a := &r.adm
	a.mu.Lock()
	a.queue = append(a.queue, c)
	lead := !a.sending
	a.sending = true
	a.mu.Unlock()
	if lead {
		r.sendAdmissions(ctx)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		// Sent or not, the caller has gone: an admission that reached Redis is forwarded by
		// the coordinator at close, as one whose reply was lost would be.
		return 0, ctx.Err()
	}
	return c.idx, c.err
}

// sendAdmissions sends the queued admissions, a pipeline at a time, until none is left.
func (r *Redis) sendAdmissions(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // it sends for other callers too
	a := &r.adm
	for {
		a.mu.Lock()
		calls := a.queue
		if len(calls) > admitBatchMax {
			calls, a.queue = calls[:admitBatchMax:admitBatchMax], calls[admitBatchMax:]
		} else {
			a.queue = nil
		}
		if len(calls) == 0 {
			a.sending = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		live := calls[:0:0]
		for _, c := range calls {
			if err := c.ctx.Err(); err != nil {
				// Its caller gave up before the send: do not admit it.
				c.err = err
				close(c.done)
				continue
			}
			live = append(live, c)
		}
		switch len(live) {
		case 0:
			continue
		case 1:
			r.admitOne(ctx, live[0])
			close(live[0].done)
			continue
		}
		p := r.c.Pipeline()
		cmds := make([]*redis.Cmd, len(live))
		ttl := r.ttl.Milliseconds()
		for j, c := range live {
			digest := sha256.Sum256(c.m1)
			cmds[j] = admitScript.EvalSha(ctx, p, admitKeys(c.t, c.user), c.q, c.user, c.m1, ttl, digest[:])
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		for j, c := range live {
			n, err := cmds[j].Int64()
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				// Redis lost its script cache (a restart): this one again on its own, which
				// loads the script; the script did not run, so nothing is admitted twice.
				r.admitOne(ctx, c)
			} else {
				c.idx, c.err = admitResult(c.t, n, err)
			}
			close(c.done)
		}
	}
}
