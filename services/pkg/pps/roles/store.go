package roles

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// BrokerStore is the broker's state in its own Redis (trust domain B, spec §5.3): the
// publisher registry (policy, last round), one label per input bit by (publisher, round)
// with a TTL, the function registry with its subscriber set S_C and recent executions, and
// the scheduler's leader lock with its fencing token. Nothing here is secret from the broker,
// and nothing the broker must not see (a second label, a seed, r) is ever written.
//
// Keys:
//
//	pps:pub:<id>              hash: fns (policy JSON), min, last (round, 20 digits)
//	pps:pub:<id>:rounds       sorted set: round (20 digits) scored by arrival (Unix ms)
//	pps:lab:<id>:<round>      the round's labels as published, with the retention TTL
//	pps:mask:<id>:<round>     the round's H1 masked values y = x ⊕ m (4 B each, D21), same TTL
//	pps:fn:<fnid>             hash: pipeline, status, reason, circuit, and, slots, bits,
//	                          epoch, round, tick (last claimed), executions, last_*
//	pps:fn:<fnid>:subs        set: subscribers S_C
//	pps:fn:<fnid>:execs       list: the latest executions, newest first (JSON)
//	pps:sched:leader          the scheduler lease: "<replica>:<token>"
//	pps:sched:fence           the fencing token counter
type BrokerStore struct {
	rdb redis.UniversalClient
	// ttl is how long labels and round indexes live (ns): the longest retention any
	// pipeline needs.
	ttl atomic.Int64
}

// NewBrokerStore returns the store over rdb keeping labels for ttl.
func NewBrokerStore(rdb redis.UniversalClient, ttl time.Duration) *BrokerStore {
	s := &BrokerStore{rdb: rdb}
	s.SetRetention(ttl)
	return s
}

// SetRetention changes how long labels are kept from now on.
func (s *BrokerStore) SetRetention(ttl time.Duration) { s.ttl.Store(int64(ttl)) }

// Sentinel errors of the store: the ingest counts each as a rejection reason.
var (
	ErrUnknownPublisher = errors.New("pps broker: unknown publisher")
	ErrReplay           = errors.New("pps broker: round not after the last one (replay)")
)

// BrokerExecutionsKept bounds each function's list of recent executions.
const BrokerExecutionsKept = 100

func storePubKey(id string) string             { return "pps:pub:" + id }
func storeRoundsKey(id string) string          { return "pps:pub:" + id + ":rounds" }
func storeLabelKey(id string, r uint64) string { return "pps:lab:" + id + ":" + storeRound(r) }
func storeMaskKey(id string, r uint64) string  { return "pps:mask:" + id + ":" + storeRound(r) }
func storeFnKey(fn string) string              { return "pps:fn:" + fn }
func storeSubsKey(fn string) string            { return "pps:fn:" + fn + ":subs" }
func storeExecsKey(fn string) string           { return "pps:fn:" + fn + ":execs" }

// storeSubscribedKey is the set of functions with a subscriber set: a function whose
// pipeline was removed is still found there, so its subscribers can be revoked.
const storeSubscribedKey = "pps:fns:subscribed"

func storeRound(r uint64) string               { return fmt.Sprintf("%020d", r) }
func storeTick(t uint64) string                { return fmt.Sprintf("%020d", t) }
func storeParseRound(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
func storeMillis(t time.Time) string           { return strconv.FormatInt(t.UnixMilli(), 10) }
func storeLockValue(replica string, tok int64) string {
	return replica + ":" + strconv.FormatInt(tok, 10)
}

const (
	storeLeaderKey = "pps:sched:leader"
	storeFenceKey  = "pps:sched:fence"
)

// RegisterPublisher records an accepted publisher hello: its policy as the garbler read it
// from the signed hello. A new hello is a new key exchange and a new ratchet from round 0,
// so the round history of a previous registration is dropped.
func (s *BrokerStore) RegisterPublisher(ctx context.Context, id string, p contract.Policy) error {
	fns, err := json.Marshal(p.Fns)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.Del(ctx, storePubKey(id), storeRoundsKey(id))
		tx.HSet(ctx, storePubKey(id), "fns", fns, "min", p.MinInputs, "registered", storeMillis(time.Now()))
		return nil
	})
	if err != nil {
		return fmt.Errorf("register publisher: %w", err)
	}
	return nil
}

// Policy returns a registered publisher's policy, or ErrUnknownPublisher.
func (s *BrokerStore) Policy(ctx context.Context, id string) (*contract.Policy, error) {
	v, err := s.rdb.HMGet(ctx, storePubKey(id), "fns", "min").Result()
	if err != nil {
		return nil, fmt.Errorf("read publisher: %w", err)
	}
	return policyOf(v)
}

// Policies returns the policies of publishers ids in one round trip: nil where a publisher
// is not registered.
func (s *BrokerStore) Policies(ctx context.Context, ids []string) ([]*contract.Policy, error) {
	cmds := make([]*redis.SliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, storePubKey(id), "fns", "min")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read publishers: %w", err)
	}
	out := make([]*contract.Policy, len(ids))
	for i, c := range cmds {
		p, err := policyOf(c.Val())
		switch {
		case errors.Is(err, ErrUnknownPublisher):
		case err != nil:
			return nil, err
		default:
			out[i] = p
		}
	}
	return out, nil
}

// policyOf parses a publisher hash's fns and min fields.
func policyOf(v []any) (*contract.Policy, error) {
	fns, ok := v[0].(string)
	if !ok {
		return nil, ErrUnknownPublisher
	}
	p := &contract.Policy{}
	if err := json.Unmarshal([]byte(fns), &p.Fns); err != nil {
		return nil, fmt.Errorf("read publisher policy: %w", err)
	}
	if m, ok := v[1].(string); ok {
		var err error
		if p.MinInputs, err = strconv.Atoi(m); err != nil {
			return nil, fmt.Errorf("read publisher policy: %w", err)
		}
	}
	return p, nil
}

// storeIngest is atomic so that two broker replicas consuming the same stream cannot both
// accept one round: the replay check (§10 #8) and the write are one step. Rounds are
// compared as fixed-width decimal strings (Lua numbers are doubles).
var storeIngest = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local last = redis.call('HGET', KEYS[1], 'last')
if last and last >= ARGV[1] then return -2 end
redis.call('HSET', KEYS[1], 'last', ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3]) end
if ARGV[6] ~= '' then redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[3]) end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`)

// StoreLabels stores the labels a publisher sent for round r, received at now, unless the
// publisher is unknown (ErrUnknownPublisher) or r is not after its last round (ErrReplay).
func (s *BrokerStore) StoreLabels(ctx context.Context, id string, r uint64, labels []byte, now time.Time) error {
	return s.StoreRound(ctx, id, r, labels, nil, now)
}

// StoreRound stores what a publisher sent for round r, received at now: the faithful-mode
// labels and the H1 masked values, either possibly empty (not stored), in one atomic step
// with the replay check.
func (s *BrokerStore) StoreRound(ctx context.Context, id string, r uint64, labels, masked []byte, now time.Time) error {
	ttl := time.Duration(s.ttl.Load())
	res, err := storeIngest.Run(ctx, s.rdb, []string{storePubKey(id), storeRoundsKey(id), storeLabelKey(id, r), storeMaskKey(id, r)},
		storeRound(r), labels, ttl.Milliseconds(), storeMillis(now), storeMillis(now.Add(-ttl)), masked).Int()
	if err != nil {
		return fmt.Errorf("store labels: %w", err)
	}
	switch res {
	case -1:
		return ErrUnknownPublisher
	case -2:
		return ErrReplay
	}
	return nil
}

// LatestRound is the publisher's newest round received at or after since (D9: `val` is the
// latest value within the window); ok is false when none arrived.
func (s *BrokerStore) LatestRound(ctx context.Context, id string, since, until time.Time) (uint64, bool, error) {
	rs, err := s.LatestRounds(ctx, []RoundQuery{{Pub: id, Since: since, Until: until}})
	if err != nil {
		return 0, false, err
	}
	return rs[0].Round, rs[0].OK, nil
}

// RoundQuery asks for a publisher's newest round received in [Since, Until].
type RoundQuery struct {
	Pub          string
	Since, Until time.Time
}

// LatestRoundOf is a RoundQuery's answer: OK is false when no round arrived then.
type LatestRoundOf struct {
	Round uint64
	OK    bool
}

// LatestRounds answers every query as LatestRound does, in one round trip.
func (s *BrokerStore) LatestRounds(ctx context.Context, qs []RoundQuery) ([]LatestRoundOf, error) {
	cmds := make([]*redis.StringSliceCmd, len(qs))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range qs {
			cmds[i] = p.ZRevRangeByScore(ctx, storeRoundsKey(q.Pub), &redis.ZRangeBy{
				Min: storeMillis(q.Since), Max: storeMillis(q.Until), Count: 1})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("latest round: %w", err)
	}
	out := make([]LatestRoundOf, len(qs))
	for i, c := range cmds {
		if v := c.Val(); len(v) > 0 {
			r, err := storeParseRound(v[0])
			if err != nil {
				return nil, fmt.Errorf("latest round: %w", err)
			}
			out[i] = LatestRoundOf{Round: r, OK: true}
		}
	}
	return out, nil
}

// Labels returns the labels stored for (publisher, round), or nil when they are not (never
// received, or past their TTL).
func (s *BrokerStore) Labels(ctx context.Context, id string, r uint64) ([]byte, error) {
	b, err := s.rdb.Get(ctx, storeLabelKey(id, r)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read labels: %w", err)
	}
	return b, nil
}

// LabelRef names the labels of one (publisher, round).
type LabelRef struct {
	Pub   string
	Round uint64
}

// LabelsOf returns the labels stored for each ref in one round trip (nil where none are).
func (s *BrokerStore) LabelsOf(ctx context.Context, refs []LabelRef) ([][]byte, error) {
	return s.getAll(ctx, refs, storeLabelKey, "labels")
}

// MaskedOf returns the H1 masked values stored for each ref in one round trip (nil where
// none are).
func (s *BrokerStore) MaskedOf(ctx context.Context, refs []LabelRef) ([][]byte, error) {
	return s.getAll(ctx, refs, storeMaskKey, "masked values")
}

func (s *BrokerStore) getAll(ctx context.Context, refs []LabelRef, key func(string, uint64) string, what string) ([][]byte, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([][]byte, len(refs))
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		// One MGET: a Table 2 tick reads 2,592 rounds, which as many pipelined GETs cost
		// Redis and the client a command each.
		keys := make([]string, len(refs))
		for i, r := range refs {
			keys[i] = key(r.Pub, r.Round)
		}
		vs, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		if len(vs) != len(refs) {
			return nil, fmt.Errorf("read %s: %d values for %d keys", what, len(vs), len(refs))
		}
		for i, v := range vs {
			if b, ok := v.(string); ok {
				out[i] = []byte(b)
			}
		}
		return out, nil
	}
	// A pipeline of GETs rather than MGET: a Redis Cluster serves keys of different slots.
	cmds := make([]*redis.StringCmd, len(refs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			cmds[i] = p.Get(ctx, key(r.Pub, r.Round))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	for i, c := range cmds {
		b, err := c.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", what, err)
		default:
			out[i] = b
		}
	}
	return out, nil
}

// FunctionState is what the broker records about a function for status and operators.
type FunctionState struct {
	Pipeline    string
	Status      string // "registered" or "refused"
	Reason      string
	CircuitHash [32]byte
	ANDGates    uint64
	Slots       uint32
	OutputBits  uint32
	Epoch       uint64
	Round       uint64
}

// Function statuses.
const (
	FunctionRegistered = "registered"
	FunctionRefused    = "refused"
)

// SetFunction records a function's registration (or refusal).
func (s *BrokerStore) SetFunction(ctx context.Context, fn string, st FunctionState) error {
	err := s.rdb.HSet(ctx, storeFnKey(fn), "pipeline", st.Pipeline, "status", st.Status, "reason", st.Reason,
		"circuit", hex.EncodeToString(st.CircuitHash[:]), "and", st.ANDGates, "slots", st.Slots, "bits", st.OutputBits,
		"epoch", st.Epoch, "round", st.Round).Err()
	if err != nil {
		return fmt.Errorf("record function: %w", err)
	}
	return nil
}

// FunctionStatus returns a function's recorded status and reason ("" when unknown).
func (s *BrokerStore) FunctionStatus(ctx context.Context, fn string) (status, reason string, err error) {
	v, err := s.rdb.HMGet(ctx, storeFnKey(fn), "status", "reason").Result()
	if err != nil {
		return "", "", err
	}
	status, _ = v[0].(string)
	reason, _ = v[1].(string)
	return status, reason, nil
}

// AddSubscriber adds device id to S_C of function fn.
func (s *BrokerStore) AddSubscriber(ctx context.Context, fn, id string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, storeSubsKey(fn), id)
		p.SAdd(ctx, storeSubscribedKey, fn)
		return nil
	})
	if err != nil {
		return fmt.Errorf("add subscriber: %w", err)
	}
	return nil
}

// SubscribedFunctions returns the functions that have (or had) subscribers.
func (s *BrokerStore) SubscribedFunctions(ctx context.Context) ([]string, error) {
	v, err := s.rdb.SMembers(ctx, storeSubscribedKey).Result()
	if err != nil {
		return nil, fmt.Errorf("read subscribed functions: %w", err)
	}
	return v, nil
}

// MarkSubscribed lists fn among the subscribed functions (for subscribers stored before
// the list existed).
func (s *BrokerStore) MarkSubscribed(ctx context.Context, fn string) error {
	return s.rdb.SAdd(ctx, storeSubscribedKey, fn).Err()
}

// ForgetSubscribed drops fn from the subscribed functions if it has no subscriber left.
func (s *BrokerStore) ForgetSubscribed(ctx context.Context, fn string) error {
	n, err := s.rdb.SCard(ctx, storeSubsKey(fn)).Result()
	if err != nil {
		return fmt.Errorf("forget subscribed function: %w", err)
	}
	if n == 0 {
		return s.rdb.SRem(ctx, storeSubscribedKey, fn).Err()
	}
	return nil
}

// RemoveSubscriber removes device id from S_C of function fn.
func (s *BrokerStore) RemoveSubscriber(ctx context.Context, fn, id string) error {
	if err := s.rdb.SRem(ctx, storeSubsKey(fn), id).Err(); err != nil {
		return fmt.Errorf("remove subscriber: %w", err)
	}
	return nil
}

// Subscribers returns S_C of function fn.
func (s *BrokerStore) Subscribers(ctx context.Context, fn string) ([]string, error) {
	v, err := s.rdb.SMembers(ctx, storeSubsKey(fn)).Result()
	if err != nil {
		return nil, fmt.Errorf("read subscribers: %w", err)
	}
	return v, nil
}

// Execution is the record of one execution of a function (what the operator reports in the
// SecurePipeline's status). It holds counts and timings only: no label, and no masked
// output next to its round.
type Execution struct {
	Exec      string              `json:"exec"`
	Tick      uint64              `json:"tick"`
	At        time.Time           `json:"at"`
	Status    string              `json:"status"`            // contract.StatusOK, StatusInsufficient, or "failed"
	Mode      string              `json:"mode,omitempty"`    // contract.ModeFaithful or ModeHardened
	Checker   string              `json:"checker,omitempty"` // faithful: contract.CheckKKRT or CheckOPRF
	Round     uint64              `json:"round,omitempty"`
	Epoch     uint64              `json:"epoch,omitempty"`
	Valid     int                 `json:"valid"`
	Nullified map[string][]uint32 `json:"nullified,omitempty"` // slots by pps.NullReason name
	ANDGates  uint64              `json:"and_gates,omitempty"`
	Bytes     uint64              `json:"bytes,omitempty"`
	// AheadBytes is the part of Bytes garbled and sent ahead, during the window (the AND
	// tables of a pregarbled execution, BrokerOptions.Pregarble); zero when garbled in full.
	AheadBytes uint64 `json:"ahead_bytes,omitempty"`
	// Ahead is how long those tables took to garble, send and read, during the window.
	Ahead time.Duration `json:"ahead_ns,omitempty"`
	Check time.Duration `json:"check_ns,omitempty"`
	// WindowChecked is the number of valid slots whose labels were checked during the
	// collection window (exactly the labels evaluated); the tick's check covered the rest.
	WindowChecked int           `json:"window_checked,omitempty"`
	Garble        time.Duration `json:"garble_ns,omitempty"`
	Evaluate      time.Duration `json:"evaluate_ns,omitempty"`
	Total         time.Duration `json:"total_ns"`
	Error         string        `json:"error,omitempty"`
}

// RecordExecution appends e to the function's bounded list of executions and updates its
// counters.
func (s *BrokerStore) RecordExecution(ctx context.Context, fn string, e *Execution) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.LPush(ctx, storeExecsKey(fn), b)
		tx.LTrim(ctx, storeExecsKey(fn), 0, BrokerExecutionsKept-1)
		tx.HIncrBy(ctx, storeFnKey(fn), "executions", 1)
		tx.HSet(ctx, storeFnKey(fn), "last_exec", e.Exec, "last_status", e.Status, "last_latency_ns", int64(e.Total),
			"last_and", e.ANDGates, "last_bytes", e.Bytes)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record execution: %w", err)
	}
	return nil
}

// Executions returns the function's recent executions, newest first.
func (s *BrokerStore) Executions(ctx context.Context, fn string) ([]Execution, error) {
	v, err := s.rdb.LRange(ctx, storeExecsKey(fn), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Execution, len(v))
	for i, x := range v {
		if err := json.Unmarshal([]byte(x), &out[i]); err != nil {
			return nil, fmt.Errorf("execution %d: %w", i, err)
		}
	}
	return out, nil
}

// AcquireLeader tries to take the scheduler lease for ttl; on success it returns the lock
// value holding a fresh fencing token. ok is false while another replica holds it.
func (s *BrokerStore) AcquireLeader(ctx context.Context, replica string, ttl time.Duration) (value string, ok bool, err error) {
	tok, err := s.rdb.Incr(ctx, storeFenceKey).Result()
	if err != nil {
		return "", false, fmt.Errorf("fencing token: %w", err)
	}
	value = storeLockValue(replica, tok)
	ok, err = s.rdb.SetNX(ctx, storeLeaderKey, value, ttl).Result()
	if err != nil {
		return "", false, fmt.Errorf("take leader lease: %w", err)
	}
	return value, ok, nil
}

var storeRenew = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

var storeRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

// RenewLeader extends the lease if value still holds it; false means it was lost.
func (s *BrokerStore) RenewLeader(ctx context.Context, value string, ttl time.Duration) (bool, error) {
	n, err := storeRenew.Run(ctx, s.rdb, []string{storeLeaderKey}, value, ttl.Milliseconds()).Int()
	return n == 1, err
}

// ReleaseLeader gives the lease up if value holds it, so a standby takes over at once.
func (s *BrokerStore) ReleaseLeader(ctx context.Context, value string) error {
	return storeRelease.Run(ctx, s.rdb, []string{storeLeaderKey}, value).Err()
}

// storeClaim is the fencing check: a tick is claimed only by the current lease holder and
// only once (ticks only move forward), so a deposed leader that has not noticed yet, or a
// new leader re-reading the schedule, can never run a tick twice.
var storeClaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local last = redis.call('HGET', KEYS[2], 'tick')
if last and last >= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], 'tick', ARGV[2])
return 1
`)

// ErrNotLeader: the lease was lost; the caller stops scheduling.
var ErrNotLeader = errors.New("pps broker: not the scheduler leader")

// ClaimTick claims tick t of function fn for the lease holder value: false when the tick (or
// a later one) was claimed already, ErrNotLeader when value no longer holds the lease.
func (s *BrokerStore) ClaimTick(ctx context.Context, value, fn string, t uint64) (bool, error) {
	n, err := storeClaim.Run(ctx, s.rdb, []string{storeLeaderKey, storeFnKey(fn)}, value, storeTick(t)).Int()
	if err != nil {
		return false, fmt.Errorf("claim tick: %w", err)
	}
	if n < 0 {
		return false, ErrNotLeader
	}
	return n == 1, nil
}

// splitLabels cuts a stored payload into the labels of value v (32 labels, bit 0 first).
func splitLabels(payload []byte, values, v int) ([]pps.Label, error) {
	ls, err := pps.SplitPublished(payload, values)
	if err != nil {
		return nil, err
	}
	return ls[v*pps.ValueBits : (v+1)*pps.ValueBits], nil
}
