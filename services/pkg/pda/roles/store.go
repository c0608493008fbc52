package roles

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ProxyStore is the proxy domain's Redis: the replay cache of session ids, the accepted
// item indices of each session, and per-participant quotas and rate limits (spec §4.2).
// Participants appear only as pid = HMAC(K_mix, identity).
type ProxyStore interface {
	// OpenSession records a fresh session id for pid and window; false if the id exists.
	OpenSession(ctx context.Context, sid, pid string, w uint64, ttl time.Duration) (bool, error)
	// Session returns the owner and window of a session.
	Session(ctx context.Context, sid string) (pid string, w uint64, ok bool, err error)
	// Seen reports, per index, whether it was already accepted in the session.
	Seen(ctx context.Context, sid string, idx []uint32) ([]bool, error)
	// Accept records indices as accepted in the session.
	Accept(ctx context.Context, sid string, idx []uint32, ttl time.Duration) error
	// Admit atomically grants up to n items against pid's quota for window w and its
	// per-second rate; limit says what stopped it (LimitNone, LimitQuota, LimitRate).
	Admit(ctx context.Context, w uint64, pid string, n, quota, rate int, ttl time.Duration) (granted int, limit Limit, err error)
	// Refund returns n unused items to pid's quota.
	Refund(ctx context.Context, w uint64, pid string, n int) error
}

// Limit names what stopped an admission.
type Limit int

const (
	LimitNone Limit = iota
	LimitQuota
	LimitRate
)

// ShardStore is one DB shard's Redis (spec A9, §4.5): per window, rows keyed by the
// blinded key Y, each a set of entries keyed by the dedup tag Z or the entry id (first
// write wins), the applied sub-batch ids, the candidate set, row states, and the
// outstanding reveal requests with their position → entry mapping. Entry ids and tags stay
// here; they never leave the DB domain.
type ShardStore interface {
	// Apply inserts one sub-batch atomically; false when its id was applied before.
	Apply(ctx context.Context, w uint64, batch string, tau int, ents []StoredEntry) (bool, error)
	// AppliedAll reports whether every listed sub-batch id was applied.
	AppliedAll(ctx context.Context, w uint64, batches []string) (bool, error)
	// Candidates returns the rows that satisfy f and are neither pending nor revealed.
	Candidates(ctx context.Context, w uint64) ([]string, error)
	// Row returns a row's entry keys and encoded entries.
	Row(ctx context.Context, w uint64, y string) (keys []string, entries [][]byte, err error)
	// Pend marks row y pending on request id, keeping the request bytes and the entry key
	// at each request position.
	Pend(ctx context.Context, w uint64, y, id string, keys []string, req []byte) error
	// Pending returns the stored requests still outstanding.
	Pending(ctx context.Context, w uint64) ([][]byte, error)
	// Settle applies a response atomically: drop the entries at the given request
	// positions, then mark the row revealed with key (when key is non-empty and count ≥ τ)
	// or rejected. ok is false for an unknown or settled request (idempotence).
	Settle(ctx context.Context, w uint64, id string, drop []int, key []byte, tau int) (ok bool, err error)
	// Revealed returns revealed rows: y → canonical key.
	Revealed(ctx context.Context, w uint64) (map[string][]byte, error)
	// Counts returns each row's entry count (the keyless histogram source).
	Counts(ctx context.Context, w uint64) ([]int, error)
	// Mark and Marked keep per-window flags ("evaluated", "published").
	Mark(ctx context.Context, w uint64, flag string) error
	Marked(ctx context.Context, w uint64, flag string) (bool, error)
}

// StoredEntry is one entry as the shard stores it.
type StoredEntry struct {
	Y     string // encoded blinded key
	Key   string // dedup tag Z or entry id
	Entry []byte // encoded pda.Entry (value and E_PRX(k) index-aligned, spec §3.3 step 5)
}

// MemoryProxyStore is the in-memory twin of the Redis proxy store, for the demo only.
type MemoryProxyStore struct {
	mu       sync.Mutex
	sessions map[string]string
	accepted map[string]map[uint32]bool
	counters map[string]int
}

// NewMemoryProxyStore returns an empty store.
func NewMemoryProxyStore() *MemoryProxyStore {
	return &MemoryProxyStore{sessions: map[string]string{}, accepted: map[string]map[uint32]bool{}, counters: map[string]int{}}
}

func (m *MemoryProxyStore) OpenSession(_ context.Context, sid, pid string, w uint64, _ time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[sid]; ok {
		return false, nil
	}
	m.sessions[sid] = pid + "|" + strconv.FormatUint(w, 10)
	return true, nil
}

func (m *MemoryProxyStore) Session(_ context.Context, sid string) (string, uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.sessions[sid]
	if !ok {
		return "", 0, false, nil
	}
	pid, w, err := splitSession(v)
	return pid, w, err == nil, err
}

func (m *MemoryProxyStore) Seen(_ context.Context, sid string, idx []uint32) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]bool, len(idx))
	for i, x := range idx {
		out[i] = m.accepted[sid][x]
	}
	return out, nil
}

func (m *MemoryProxyStore) Accept(_ context.Context, sid string, idx []uint32, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.accepted[sid] == nil {
		m.accepted[sid] = map[uint32]bool{}
	}
	for _, x := range idx {
		m.accepted[sid][x] = true
	}
	return nil
}

func (m *MemoryProxyStore) Admit(_ context.Context, w uint64, pid string, n, quota, rate int, _ time.Duration) (int, Limit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	qk, rk := quotaKey(w, pid), rateKey(pid, time.Now())
	return admit(n, quota-m.counters[qk], rate-m.counters[rk], func(g int) { m.counters[qk] += g; m.counters[rk] += g })
}

func (m *MemoryProxyStore) Refund(_ context.Context, w uint64, pid string, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters[quotaKey(w, pid)] -= n
	return nil
}

func admit(n, qLeft, rLeft int, take func(int)) (int, Limit, error) {
	qLeft, rLeft = max(qLeft, 0), max(rLeft, 0)
	g := min(n, qLeft, rLeft)
	if g > 0 {
		take(g)
	}
	switch {
	case g == n:
		return g, LimitNone, nil
	case qLeft <= rLeft:
		return g, LimitQuota, nil
	default:
		return g, LimitRate, nil
	}
}

func quotaKey(w uint64, pid string) string {
	return "pda:quota:" + strconv.FormatUint(w, 10) + ":" + pid
}

func rateKey(pid string, now time.Time) string {
	return "pda:rate:" + pid + ":" + strconv.FormatInt(now.Unix(), 10)
}

// MemoryShardStore is the in-memory twin of the Redis shard store, for the demo only.
type MemoryShardStore struct {
	mu sync.Mutex
	ws map[uint64]*memWindow
}

type memWindow struct {
	applied  map[string]bool
	rows     map[string]map[string][]byte
	state    map[string]byte // 'P' pending, 'R' revealed, 'X' rejected
	cand     map[string]bool
	reqs     map[string]*memReq
	revealed map[string][]byte
	flags    map[string]bool
}

type memReq struct {
	y    string
	keys []string
	req  []byte
}

// NewMemoryShardStore returns an empty store.
func NewMemoryShardStore() *MemoryShardStore { return &MemoryShardStore{ws: map[uint64]*memWindow{}} }

func (m *MemoryShardStore) win(w uint64) *memWindow {
	x := m.ws[w]
	if x == nil {
		x = &memWindow{applied: map[string]bool{}, rows: map[string]map[string][]byte{}, state: map[string]byte{},
			cand: map[string]bool{}, reqs: map[string]*memReq{}, revealed: map[string][]byte{}, flags: map[string]bool{}}
		m.ws[w] = x
	}
	return x
}

func (m *MemoryShardStore) Apply(_ context.Context, w uint64, batch string, tau int, ents []StoredEntry) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.win(w)
	if x.applied[batch] {
		return false, nil
	}
	x.applied[batch] = true
	for _, e := range ents {
		r := x.rows[e.Y]
		if r == nil {
			r = map[string][]byte{}
			x.rows[e.Y] = r
		}
		if _, dup := r[e.Key]; dup {
			continue
		}
		r[e.Key] = slices.Clone(e.Entry)
		if st := x.state[e.Y]; len(r) >= tau && (st == 0 || st == 'X') {
			x.cand[e.Y] = true
		}
	}
	return true, nil
}

func (m *MemoryShardStore) AppliedAll(_ context.Context, w uint64, batches []string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range batches {
		if !m.win(w).applied[b] {
			return false, nil
		}
	}
	return true, nil
}

func (m *MemoryShardStore) Candidates(_ context.Context, w uint64) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for y := range m.win(w).cand {
		out = append(out, y)
	}
	slices.Sort(out)
	return out, nil
}

func (m *MemoryShardStore) Row(_ context.Context, w uint64, y string) ([]string, [][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	var ents [][]byte
	for k, e := range m.win(w).rows[y] {
		keys = append(keys, k)
		ents = append(ents, e)
	}
	return keys, ents, nil
}

func (m *MemoryShardStore) Pend(_ context.Context, w uint64, y, id string, keys []string, req []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.win(w)
	x.reqs[id] = &memReq{y: y, keys: slices.Clone(keys), req: slices.Clone(req)}
	x.state[y] = 'P'
	delete(x.cand, y)
	return nil
}

func (m *MemoryShardStore) Pending(_ context.Context, w uint64) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for _, r := range m.win(w).reqs {
		out = append(out, r.req)
	}
	return out, nil
}

func (m *MemoryShardStore) Settle(_ context.Context, w uint64, id string, drop []int, key []byte, tau int) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.win(w)
	r := x.reqs[id]
	if r == nil {
		return false, nil
	}
	delete(x.reqs, id)
	row := x.rows[r.y]
	for _, p := range drop {
		if p >= 0 && p < len(r.keys) {
			delete(row, r.keys[p])
		}
	}
	if len(key) > 0 && len(row) >= tau {
		x.state[r.y] = 'R'
		x.revealed[r.y] = slices.Clone(key)
	} else {
		x.state[r.y] = 'X'
	}
	return true, nil
}

func (m *MemoryShardStore) Revealed(_ context.Context, w uint64) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]byte{}
	for y, k := range m.win(w).revealed {
		out[y] = k
	}
	return out, nil
}

func (m *MemoryShardStore) Counts(_ context.Context, w uint64) ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, r := range m.win(w).rows {
		out = append(out, len(r))
	}
	return out, nil
}

func (m *MemoryShardStore) Mark(_ context.Context, w uint64, flag string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.win(w).flags[flag] = true
	return nil
}

func (m *MemoryShardStore) Marked(_ context.Context, w uint64, flag string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.win(w).flags[flag], nil
}
