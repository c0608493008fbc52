package roles

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProxyStore is the proxy domain's ProxyStore on its own Redis.
type RedisProxyStore struct{ c redis.UniversalClient }

// NewRedisProxyStore wraps a client of the proxy domain's Redis.
func NewRedisProxyStore(c redis.UniversalClient) *RedisProxyStore { return &RedisProxyStore{c: c} }

func sessionKey(sid string) string  { return "pda:sess:" + sid }
func acceptedKey(sid string) string { return "pda:sess:" + sid + ":idx" }

func (r *RedisProxyStore) OpenSession(ctx context.Context, sid, pid string, w uint64, ttl time.Duration) (bool, error) {
	ok, err := r.c.SetNX(ctx, sessionKey(sid), pid+"|"+strconv.FormatUint(w, 10), ttl).Result()
	if err != nil {
		return false, fmt.Errorf("open session: %w", err)
	}
	return ok, nil
}

func (r *RedisProxyStore) Session(ctx context.Context, sid string) (string, uint64, bool, error) {
	v, err := r.c.Get(ctx, sessionKey(sid)).Result()
	if errors.Is(err, redis.Nil) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("get session: %w", err)
	}
	pid, w, err := splitSession(v)
	return pid, w, err == nil, err
}

func splitSession(v string) (string, uint64, error) {
	pid, ws, ok := strings.Cut(v, "|")
	if !ok {
		return "", 0, fmt.Errorf("corrupt session record")
	}
	w, err := strconv.ParseUint(ws, 10, 64)
	return pid, w, err
}

func (r *RedisProxyStore) Seen(ctx context.Context, sid string, idx []uint32) ([]bool, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	members := make([]any, len(idx))
	for i, x := range idx {
		members[i] = strconv.FormatUint(uint64(x), 10)
	}
	out, err := r.c.SMIsMember(ctx, acceptedKey(sid), members...).Result()
	if err != nil {
		return nil, fmt.Errorf("replay check: %w", err)
	}
	return out, nil
}

func (r *RedisProxyStore) Accept(ctx context.Context, sid string, idx []uint32, ttl time.Duration) error {
	if len(idx) == 0 {
		return nil
	}
	members := make([]any, len(idx))
	for i, x := range idx {
		members[i] = strconv.FormatUint(uint64(x), 10)
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, acceptedKey(sid), members...)
		p.Expire(ctx, acceptedKey(sid), ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record accepted items: %w", err)
	}
	return nil
}

// admitScript grants min(n, quota left, rate left) atomically and says which limit bound.
var admitScript = redis.NewScript(`
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local rate = tonumber(redis.call('GET', KEYS[2]) or '0')
local n = tonumber(ARGV[1])
local q = math.max(tonumber(ARGV[2]) - used, 0)
local r = math.max(tonumber(ARGV[3]) - rate, 0)
local g = math.min(n, q, r)
if g > 0 then
  redis.call('INCRBY', KEYS[1], g)
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
  redis.call('INCRBY', KEYS[2], g)
  redis.call('EXPIRE', KEYS[2], 2)
end
local why = 0
if g < n then
  if q <= r then why = 1 else why = 2 end
end
return {g, why}
`)

func (r *RedisProxyStore) Admit(ctx context.Context, w uint64, pid string, n, quota, rate int, ttl time.Duration) (int, Limit, error) {
	res, err := admitScript.Run(ctx, r.c, []string{quotaKey(w, pid), rateKey(pid, time.Now())},
		n, quota, rate, int(ttl/time.Second)+1).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, LimitNone, fmt.Errorf("admit: %w", err)
	}
	return int(res[0]), Limit(res[1]), nil
}

func (r *RedisProxyStore) Refund(ctx context.Context, w uint64, pid string, n int) error {
	if n <= 0 {
		return nil
	}
	return r.c.DecrBy(ctx, quotaKey(w, pid), int64(n)).Err()
}

// RedisShardStore is one DB shard's ShardStore on the shard's own Redis. All keys of a
// window share the hash tag {w}, so the Lua scripts touch one slot even on a cluster.
type RedisShardStore struct{ c redis.UniversalClient }

// NewRedisShardStore wraps a client of the shard's Redis.
func NewRedisShardStore(c redis.UniversalClient) *RedisShardStore { return &RedisShardStore{c: c} }

// WindowKeyPrefix is the prefix of every key a shard store keeps for window w (one hash slot).
func WindowKeyPrefix(w uint64) string { return "pda:{" + strconv.FormatUint(w, 10) + "}:" }

// applyScript inserts a sub-batch: once per sub-batch id, first write wins per entry key,
// and a row joins the candidate set when it reaches τ and is open or rejected (A9).
var applyScript = redis.NewScript(`
if redis.call('SADD', KEYS[1], ARGV[2]) == 0 then return 0 end
local p = ARGV[1]
local tau = tonumber(ARGV[3])
for i = 4, #ARGV, 3 do
  local y, k, e = ARGV[i], ARGV[i+1], ARGV[i+2]
  local rk = p .. 'row:' .. y
  if redis.call('HSETNX', rk, k, e) == 1 then
    redis.call('SADD', p .. 'rows', y)
    if redis.call('HLEN', rk) >= tau then
      local st = redis.call('HGET', p .. 'state', y)
      if (not st) or st == 'X' then redis.call('SADD', p .. 'cand', y) end
    end
  end
end
return 1
`)

func (r *RedisShardStore) Apply(ctx context.Context, w uint64, batch string, tau int, ents []StoredEntry) (bool, error) {
	p := WindowKeyPrefix(w)
	args := make([]any, 0, 3+3*len(ents))
	args = append(args, p, batch, tau)
	for _, e := range ents {
		args = append(args, e.Y, e.Key, e.Entry)
	}
	n, err := applyScript.Run(ctx, r.c, []string{p + "applied"}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("apply sub-batch: %w", err)
	}
	return n == 1, nil
}

func (r *RedisShardStore) AppliedAll(ctx context.Context, w uint64, batches []string) (bool, error) {
	if len(batches) == 0 {
		return true, nil
	}
	m := make([]any, len(batches))
	for i, b := range batches {
		m[i] = b
	}
	in, err := r.c.SMIsMember(ctx, WindowKeyPrefix(w)+"applied", m...).Result()
	if err != nil {
		return false, fmt.Errorf("applied sub-batches: %w", err)
	}
	for _, ok := range in {
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func (r *RedisShardStore) Candidates(ctx context.Context, w uint64) ([]string, error) {
	ys, err := r.c.SMembers(ctx, WindowKeyPrefix(w)+"cand").Result()
	if err != nil {
		return nil, fmt.Errorf("candidates: %w", err)
	}
	return ys, nil
}

func (r *RedisShardStore) Row(ctx context.Context, w uint64, y string) ([]string, [][]byte, error) {
	m, err := r.c.HGetAll(ctx, WindowKeyPrefix(w)+"row:"+y).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("row: %w", err)
	}
	keys := make([]string, 0, len(m))
	ents := make([][]byte, 0, len(m))
	for k, e := range m {
		keys = append(keys, k)
		ents = append(ents, []byte(e))
	}
	return keys, ents, nil
}

func (r *RedisShardStore) Pend(ctx context.Context, w uint64, y, id string, keys []string, req []byte) error {
	p := WindowKeyPrefix(w)
	ks := make([]any, len(keys))
	for i, k := range keys {
		ks[i] = k
	}
	_, err := r.c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, p+"req:"+id, "y", y, "req", req)
		pl.Del(ctx, p+"reqk:"+id)
		pl.RPush(ctx, p+"reqk:"+id, ks...)
		pl.SAdd(ctx, p+"pending", id)
		pl.HSet(ctx, p+"state", y, "P")
		pl.SRem(ctx, p+"cand", y)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pend reveal request: %w", err)
	}
	return nil
}

func (r *RedisShardStore) Pending(ctx context.Context, w uint64) ([][]byte, error) {
	p := WindowKeyPrefix(w)
	ids, err := r.c.SMembers(ctx, p+"pending").Result()
	if err != nil {
		return nil, fmt.Errorf("pending requests: %w", err)
	}
	out := make([][]byte, 0, len(ids))
	for _, id := range ids {
		b, err := r.c.HGet(ctx, p+"req:"+id, "req").Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pending request: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// settleScript prunes the inconsistent entries of a pending row and re-evaluates f
// (spec §3.9.5 step 3); unknown or settled request ids are a no-op (idempotence).
var settleScript = redis.NewScript(`
local y = redis.call('HGET', KEYS[1], 'y')
if not y then return 0 end
local p = ARGV[1]
local rk = p .. 'row:' .. y
for i = 4, #ARGV do
  local k = redis.call('LINDEX', KEYS[2], tonumber(ARGV[i]))
  if k then redis.call('HDEL', rk, k) end
end
local n = redis.call('HLEN', rk)
if ARGV[3] ~= '' and n >= tonumber(ARGV[2]) then
  redis.call('HSET', p .. 'state', y, 'R')
  redis.call('HSET', p .. 'revealed', y, ARGV[3])
else
  redis.call('HSET', p .. 'state', y, 'X')
  redis.call('HDEL', p .. 'revealed', y)
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`)

func (r *RedisShardStore) Settle(ctx context.Context, w uint64, id string, drop []int, key []byte, tau int) (bool, error) {
	p := WindowKeyPrefix(w)
	args := []any{p, tau, key}
	for _, d := range drop {
		args = append(args, d)
	}
	n, err := settleScript.Run(ctx, r.c, []string{p + "req:" + id, p + "reqk:" + id}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("settle reveal: %w", err)
	}
	if n == 1 {
		if err := r.c.SRem(ctx, p+"pending", id).Err(); err != nil {
			return true, fmt.Errorf("settle reveal: %w", err)
		}
	}
	return n == 1, nil
}

func (r *RedisShardStore) Revealed(ctx context.Context, w uint64) (map[string][]byte, error) {
	m, err := r.c.HGetAll(ctx, WindowKeyPrefix(w)+"revealed").Result()
	if err != nil {
		return nil, fmt.Errorf("revealed rows: %w", err)
	}
	out := make(map[string][]byte, len(m))
	for y, k := range m {
		out[y] = []byte(k)
	}
	return out, nil
}

func (r *RedisShardStore) Counts(ctx context.Context, w uint64) ([]int, error) {
	p := WindowKeyPrefix(w)
	ys, err := r.c.SMembers(ctx, p+"rows").Result()
	if err != nil {
		return nil, fmt.Errorf("rows: %w", err)
	}
	cmds, err := r.c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, y := range ys {
			pl.HLen(ctx, p+"row:"+y)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("row counts: %w", err)
	}
	out := make([]int, len(cmds))
	for i, c := range cmds {
		out[i] = int(c.(*redis.IntCmd).Val())
	}
	return out, nil
}

func (r *RedisShardStore) Mark(ctx context.Context, w uint64, flag string) error {
	return r.c.HSet(ctx, WindowKeyPrefix(w)+"meta", flag, "1").Err()
}

func (r *RedisShardStore) Marked(ctx context.Context, w uint64, flag string) (bool, error) {
	n, err := r.c.HExists(ctx, WindowKeyPrefix(w)+"meta", flag).Result()
	if err != nil {
		return false, fmt.Errorf("window flag: %w", err)
	}
	return n, nil
}
