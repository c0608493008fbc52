// Package roundstate is the integrator's per-round state that the response
// path needs (spec §10 "Redis keys, integrator"): admission (index → user,
// the q limit, the M1 submissions the coordinator replays at close), the
// encoders' response slots (pos → z, k_I^resp) per vendor, round status and
// the user mailboxes (spec O13). Redis is the store of record and lives in the
// integrator's trust domain only; Memory is its in-process twin for the
// embedded demo. Every key carries a TTL (response deadline + margin).
package roundstate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors callers branch on.
var (
	ErrClosed    = errors.New("roundstate: round closed")
	ErrRateLimit = errors.New("roundstate: more than q submissions this round")
	ErrDuplicate = errors.New("roundstate: this envelope was already submitted this round")
	ErrNotFound  = errors.New("roundstate: not found")
)

// Status values of a round.
const (
	StatusOpen    = "open"
	StatusClosed  = "closed" // submissions closed; the round's messages are with the shuffler
	StatusDone    = "done"
	StatusAborted = "aborted"
)

// Admission is one admitted M1.
type Admission struct {
	Index     uint32
	User      string
	M1        []byte
	Forwarded bool
}

// Store is the integrator's round state.
type Store interface {
	// Admit assigns the next index of round t to user's m1, atomically with
	// the closed check, the per-user limit q and the refusal of an m1 already
	// admitted in round t under any user (ErrDuplicate: a replayed envelope).
	Admit(ctx context.Context, t uint64, user string, q int, m1 []byte) (uint32, error)
	// MarkForwarded records that M2 of every index in is is durable at V* (one call per
	// forwarded batch).
	MarkForwarded(ctx context.Context, t uint64, is ...uint32) error
	// Close ends admission and returns k.
	Close(ctx context.Context, t uint64) (int, error)
	// Admitted returns every admission of round t by index.
	Admitted(ctx context.Context, t uint64) ([]Admission, error)
	// Users returns the users of indices start … start+n−1 in one read ("" for an index
	// not admitted).
	Users(ctx context.Context, t uint64, start uint32, n int) ([]string, error)
	// PutSlots / Slots hold an encoder's response slots for vendor v.
	PutSlots(ctx context.Context, t uint64, v int, b []byte) error
	Slots(ctx context.Context, t uint64, v int) ([]byte, error)
	// SetStatus / Status hold the round's status.
	SetStatus(ctx context.Context, t uint64, s string) error
	Status(ctx context.Context, t uint64) (string, error)
	// PutResponses stores each M11 in its user's mailbox (one write for a batch); Response
	// fetches one.
	PutResponses(ctx context.Context, t uint64, ms []Mail) error
	Response(ctx context.Context, user string, t uint64, i uint32) ([]byte, error)
}

// Mail is one M11 for a user's mailbox.
type Mail struct {
	User  string
	Index uint32
	M11   []byte
}

// Redis is the Store on a redis-server of the integrator's domain.
type Redis struct {
	c   redis.UniversalClient
	ttl time.Duration

	// Concurrent Response calls — a released round wakes every parked Fetch at once — share
	// one pipelined round trip (readResponses), and so do concurrent Admit calls
	// (admitBatch).
	responses batcher[*respCall]
	admits    batcher[*admitCall]
}

// batcher runs concurrent calls a batch at a time (group commit): the first caller to find no
// batch running runs every call queued meanwhile, then those queued during that batch, until
// none is left. Each call carries its own done channel, which run closes.
type batcher[C any] struct {
	mu      sync.Mutex
	queue   []C
	running bool
}

// do queues c and, unless a batch is already running, runs the queue a batch at a time.
func (b *batcher[C]) do(c C, run func(calls []C)) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if !lead {
		return
	}
	for {
		b.mu.Lock()
		calls := b.queue
		b.queue = nil
		if len(calls) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		run(calls)
	}
}

type respCall struct {
	key, field string
	b          []byte
	err        error
	done       chan struct{}
}

// NewRedis returns a Redis store whose keys expire after ttl.
func NewRedis(c redis.UniversalClient, ttl time.Duration) *Redis { return &Redis{c: c, ttl: ttl} }

func key(t uint64, parts ...string) string {
	k := "I:" + strconv.FormatUint(t, 10)
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

// admitScript admits one M1. Every key of the round gets its TTL once, when the script creates
// it (the first INCR, SADD or HSET of the round), not on every admission: a PEXPIRE is a write
// the server applies, propagates and notifies, and six of them were half of the script's calls.
// A round's keys so expire ttl after their creation instead of after its last admission;
// ttl (10 min) outlasts a round's collection and response phase by far, and the status,
// mailboxes and forwarded set keep their own TTLs.
var admitScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('SADD', KEYS[6], ARGV[5]) == 0 then return -3 end
if redis.call('SCARD', KEYS[6]) == 1 then redis.call('PEXPIRE', KEYS[6], ARGV[4]) end
local c = redis.call('INCR', KEYS[2])
if c == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
if c > tonumber(ARGV[1]) then return -2 end
local i = redis.call('INCR', KEYS[3]) - 1
redis.call('HSET', KEYS[4], i, ARGV[3])
redis.call('HSET', KEYS[5], i, ARGV[2])
if i == 0 then
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
end
return i
`)

// Admit implements Store. Concurrent admissions — a gateway's Submits arrive together — share
// one pipelined round trip (group commit): the first caller sends every admission queued
// meanwhile as one pipeline of EVALSHAs and hands each caller its own script's answer. Each
// admission is still its own atomic script, and a caller returns only once Redis has answered
// its script, so what a Submit acknowledges is in Redis as before; the pipeline saves the
// per-command write and read on both ends (the gateway's syscalls and redis-server's).
func (r *Redis) Admit(ctx context.Context, t uint64, user string, q int, m1 []byte) (uint32, error) {
	c := &admitCall{t: t, user: user, q: q, m1: m1, done: make(chan struct{})}
	ctx0 := context.WithoutCancel(ctx) // the leader admits for other callers too
	r.admits.do(c, func(calls []*admitCall) { r.admitBatch(ctx0, calls) })
	select {
	case <-c.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if c.err != nil {
		return 0, fmt.Errorf("admit in round %d: %w", t, c.err)
	}
	switch c.n {
	case -1:
		return 0, ErrClosed
	case -2:
		return 0, ErrRateLimit
	case -3:
		return 0, ErrDuplicate
	}
	return uint32(c.n), nil
}

type admitCall struct {
	t    uint64
	user string
	q    int
	m1   []byte
	n    int64
	err  error
	done chan struct{}
}

func (r *Redis) admitArgs(c *admitCall) ([]string, []any) {
	t := c.t
	keys := []string{key(t, "closed"), key(t, "quota", c.user), key(t, "seq"), key(t, "m1"), key(t, "user"), key(t, "seen")}
	digest := sha256.Sum256(c.m1)
	return keys, []any{c.q, c.user, c.m1, r.ttl.Milliseconds(), digest[:]}
}

// admitBatch runs one batch of admissions: a lone one as its script, more as one pipeline.
func (r *Redis) admitBatch(ctx context.Context, calls []*admitCall) {
	if len(calls) == 1 {
		c := calls[0]
		keys, args := r.admitArgs(c)
		c.n, c.err = admitScript.Run(ctx, r.c, keys, args...).Int64()
		close(c.done)
		return
	}
	p := r.c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for j, c := range calls {
		keys, args := r.admitArgs(c)
		cmds[j] = admitScript.EvalSha(ctx, p, keys, args...)
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	for j, c := range calls {
		c.n, c.err = cmds[j].Int64()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			// Redis lost its scripts (a restart): this one did not run; Run loads it again.
			keys, args := r.admitArgs(c)
			c.n, c.err = admitScript.Run(ctx, r.c, keys, args...).Int64()
		}
		close(c.done)
	}
}

// MarkForwarded implements Store.
func (r *Redis) MarkForwarded(ctx context.Context, t uint64, is ...uint32) error {
	if len(is) == 0 {
		return nil
	}
	members := make([]any, len(is))
	for j, i := range is {
		members[j] = i
	}
	p := r.c.TxPipeline()
	p.SAdd(ctx, key(t, "fwd"), members...)
	p.PExpire(ctx, key(t, "fwd"), r.ttl)
	_, err := p.Exec(ctx)
	return err
}

var closeScript = redis.NewScript(`
redis.call('SET', KEYS[1], 1, 'PX', ARGV[1])
local k = redis.call('GET', KEYS[2])
if not k then return 0 end
return tonumber(k)
`)

// Close implements Store.
func (r *Redis) Close(ctx context.Context, t uint64) (int, error) {
	k, err := closeScript.Run(ctx, r.c, []string{key(t, "closed"), key(t, "seq")}, r.ttl.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("close round %d: %w", t, err)
	}
	return k, nil
}

// Admitted implements Store.
func (r *Redis) Admitted(ctx context.Context, t uint64) ([]Admission, error) {
	m1s, err := r.c.HGetAll(ctx, key(t, "m1")).Result()
	if err != nil {
		return nil, err
	}
	users, err := r.c.HGetAll(ctx, key(t, "user")).Result()
	if err != nil {
		return nil, err
	}
	fwd, err := r.c.SMembers(ctx, key(t, "fwd")).Result()
	if err != nil {
		return nil, err
	}
	isFwd := map[string]bool{}
	for _, f := range fwd {
		isFwd[f] = true
	}
	out := make([]Admission, 0, len(m1s))
	for k, m := range m1s {
		i, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("round %d: bad index %q", t, k)
		}
		out = append(out, Admission{Index: uint32(i), User: users[k], M1: []byte(m), Forwarded: isFwd[k]})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out, nil
}

// Users implements Store.
func (r *Redis) Users(ctx context.Context, t uint64, start uint32, n int) ([]string, error) {
	if n == 0 {
		return nil, nil // a round without a real command: one empty M10 batch (HMGET needs a field)
	}
	fields := make([]string, n)
	for j := range fields {
		fields[j] = strconv.FormatUint(uint64(start)+uint64(j), 10)
	}
	vals, err := r.c.HMGet(ctx, key(t, "user"), fields...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]string, n)
	for j, v := range vals {
		if u, ok := v.(string); ok {
			out[j] = u
		}
	}
	return out, nil
}

// PutSlots implements Store.
func (r *Redis) PutSlots(ctx context.Context, t uint64, v int, b []byte) error {
	return r.c.Set(ctx, key(t, "zv", strconv.Itoa(v)), b, r.ttl).Err()
}

// Slots implements Store.
func (r *Redis) Slots(ctx context.Context, t uint64, v int) ([]byte, error) {
	b, err := r.c.Get(ctx, key(t, "zv", strconv.Itoa(v))).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, err
}

// SetStatus implements Store.
func (r *Redis) SetStatus(ctx context.Context, t uint64, s string) error {
	return r.c.Set(ctx, key(t, "status"), s, r.ttl).Err()
}

// Status implements Store.
func (r *Redis) Status(ctx context.Context, t uint64) (string, error) {
	s, err := r.c.Get(ctx, key(t, "status")).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNotFound
	}
	return s, err
}

func mbox(user string) string { return "I:mbox:" + user }

func mboxField(t uint64, i uint32) string {
	return strconv.FormatUint(t, 10) + ":" + strconv.FormatUint(uint64(i), 10)
}

// PutResponses implements Store: one pipelined round trip for the batch (each mailbox write
// is idempotent, so a retried batch needs no transaction).
func (r *Redis) PutResponses(ctx context.Context, t uint64, ms []Mail) error {
	if len(ms) == 0 {
		return nil
	}
	p := r.c.Pipeline()
	for _, m := range ms {
		p.HSet(ctx, mbox(m.User), mboxField(t, m.Index), m.M11)
		p.PExpire(ctx, mbox(m.User), r.ttl)
	}
	_, err := p.Exec(ctx)
	return err
}

// Response implements Store.
func (r *Redis) Response(ctx context.Context, user string, t uint64, i uint32) ([]byte, error) {
	c := &respCall{key: mbox(user), field: mboxField(t, i), done: make(chan struct{})}
	ctx0 := context.WithoutCancel(ctx) // the leader reads for other callers too
	r.responses.do(c, func(calls []*respCall) { r.readResponses(ctx0, calls) })
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if errors.Is(c.err, redis.Nil) {
		return nil, ErrNotFound
	}
	return c.b, c.err
}

// readResponses answers one batch of Response calls: a lone one as its HGET, more as one
// pipeline.
func (r *Redis) readResponses(ctx context.Context, calls []*respCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.b, c.err = r.c.HGet(ctx, c.key, c.field).Bytes()
		close(c.done)
		return
	}
	p := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(calls))
	for j, c := range calls {
		cmds[j] = p.HGet(ctx, c.key, c.field)
	}
	_, _ = p.Exec(ctx) // each command carries its own error (redis.Nil for a missing one)
	for j, c := range calls {
		c.b, c.err = cmds[j].Bytes()
		close(c.done)
	}
}

// Memory is the in-process twin of Redis, for the embedded demo only. It
// keeps the same semantics (atomic admission, close, mailboxes) without TTLs
// beyond a bounded number of rounds.
type Memory struct {
	mu     sync.Mutex
	rounds map[uint64]*memRound
	mbox   map[string][]byte
	keep   int
}

type memRound struct {
	closed bool
	quota  map[string]int
	seen   map[[sha256.Size]byte]bool
	adm    []Admission
	fwd    map[uint32]bool
	slots  map[int][]byte
	status string
}

// NewMemory returns a Memory store keeping the last keep rounds.
func NewMemory(keep int) *Memory {
	return &Memory{rounds: map[uint64]*memRound{}, mbox: map[string][]byte{}, keep: max(keep, 4)}
}

func (m *Memory) round(t uint64) *memRound {
	r := m.rounds[t]
	if r == nil {
		r = &memRound{quota: map[string]int{}, seen: map[[sha256.Size]byte]bool{}, fwd: map[uint32]bool{}, slots: map[int][]byte{}}
		m.rounds[t] = r
		if len(m.rounds) > m.keep {
			var oldest uint64 = t
			for k := range m.rounds {
				oldest = min(oldest, k)
			}
			delete(m.rounds, oldest)
			for k := range m.mbox {
				if strconv.FormatUint(oldest, 10) == k[:len(strconv.FormatUint(oldest, 10))] {
					delete(m.mbox, k)
				}
			}
		}
	}
	return r
}

// Admit implements Store.
func (m *Memory) Admit(_ context.Context, t uint64, user string, q int, m1 []byte) (uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.round(t)
	if r.closed {
		return 0, ErrClosed
	}
	digest := sha256.Sum256(m1)
	if r.seen[digest] {
		return 0, ErrDuplicate
	}
	r.seen[digest] = true
	if r.quota[user] >= q {
		return 0, ErrRateLimit
	}
	r.quota[user]++
	i := uint32(len(r.adm))
	r.adm = append(r.adm, Admission{Index: i, User: user, M1: append([]byte(nil), m1...)})
	return i, nil
}

// MarkForwarded implements Store.
func (m *Memory) MarkForwarded(_ context.Context, t uint64, is ...uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.round(t)
	for _, i := range is {
		r.fwd[i] = true
	}
	return nil
}

// Close implements Store.
func (m *Memory) Close(_ context.Context, t uint64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.round(t)
	r.closed = true
	return len(r.adm), nil
}

// Admitted implements Store.
func (m *Memory) Admitted(_ context.Context, t uint64) ([]Admission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.round(t)
	out := append([]Admission(nil), r.adm...)
	for i := range out {
		out[i].Forwarded = r.fwd[out[i].Index]
	}
	return out, nil
}

// Users implements Store.
func (m *Memory) Users(_ context.Context, t uint64, start uint32, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.round(t)
	out := make([]string, n)
	for j := range out {
		if i := int(start) + j; i < len(r.adm) {
			out[j] = r.adm[i].User
		}
	}
	return out, nil
}

// PutSlots implements Store.
func (m *Memory) PutSlots(_ context.Context, t uint64, v int, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.round(t).slots[v] = append([]byte(nil), b...)
	return nil
}

// Slots implements Store.
func (m *Memory) Slots(_ context.Context, t uint64, v int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.round(t).slots[v]
	if !ok {
		return nil, ErrNotFound
	}
	return b, nil
}

// SetStatus implements Store.
func (m *Memory) SetStatus(_ context.Context, t uint64, s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.round(t).status = s
	return nil
}

// Status implements Store.
func (m *Memory) Status(_ context.Context, t uint64) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.round(t).status
	if s == "" {
		return "", ErrNotFound
	}
	return s, nil
}

// PutResponses implements Store.
func (m *Memory) PutResponses(_ context.Context, t uint64, ms []Mail) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range ms {
		m.mbox[mboxField(t, x.Index)+":"+x.User] = append([]byte(nil), x.M11...)
	}
	return nil
}

// Response implements Store.
func (m *Memory) Response(_ context.Context, user string, t uint64, i uint32) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.mbox[mboxField(t, i)+":"+user]
	if !ok {
		return nil, ErrNotFound
	}
	return b, nil
}
