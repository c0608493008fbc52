package roles

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// Ratchet writes are single-writer (spec §5.3): every change of a publisher's or a
// function's record is a compare-and-set — WATCH the record key, read and open it, compute,
// then MULTI/EXEC the sealed new record (and the seed records that go with it). If another
// replica wrote the key in between, EXEC fails and the whole step is redone from the record
// it wrote, so two garbler replicas never fork a ratchet and never hand out the same
// function round.

// errNotFound: the record does not exist.
var errNotFound = errors.New("pps garbler: no such record")

// maxConflicts bounds the retries of one compare-and-set.
const maxConflicts = 64

// update runs one compare-and-set on the watched keys.
func (g *Garbler) update(ctx context.Context, f func(tx *redis.Tx) error, keys ...string) error {
	for attempt := 0; ; attempt++ {
		err := g.rdb.Watch(ctx, f, keys...)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
		g.m.conflicts.Inc()
		if attempt == maxConflicts {
			return fmt.Errorf("state of %v: %d concurrent writes in a row: %w", keys, maxConflicts, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(1+attempt) * time.Millisecond):
		}
	}
}

// open reads and opens the record at key.
func (g *Garbler) open(ctx context.Context, c redis.Cmdable, key string) ([]byte, error) {
	b, err := c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redis get: %w", err)
	}
	pt, err := g.sealer.Open(ctx, b, []byte(key))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", key, err)
	}
	return pt, nil
}

// seal seals plaintext for key and erases the plaintext.
func (g *Garbler) seal(ctx context.Context, key string, plaintext []byte) ([]byte, error) {
	defer clear(plaintext)
	return g.sealer.Seal(ctx, plaintext, []byte(key))
}

func (g *Garbler) loadPub(ctx context.Context, c redis.Cmdable, pub string) (*pubRecord, error) {
	pt, err := g.open(ctx, c, pubKey(pub))
	if err != nil {
		return nil, err
	}
	defer clear(pt)
	return decodePubRecord(pt)
}

func (g *Garbler) loadFn(ctx context.Context, c redis.Cmdable, fn string) (*fnRecord, error) {
	pt, err := g.open(ctx, c, fnKey(fn))
	if err != nil {
		return nil, err
	}
	defer clear(pt)
	return decodeFnRecord(pt)
}

// roundSeeds is what publisherSeeds found: the seed of every requested round it could
// derive or still holds, and the publisher's policy. The caller zeroes it.
type roundSeeds struct {
	seeds map[uint64]pps.Seed
	// refused: the publisher's signed policy does not allow the function (D13); no seed
	// was derived and the ratchet did not move.
	refused bool
}

func (r *roundSeeds) zero() {
	zeroSeeds(r.seeds)
}

// publisherSeeds returns the seeds of rounds of publisher pub (spec §8.1 AdvanceTo). A
// round ahead of the ratchet advances it to the highest such round; the seeds of the rounds
// it skips are retained — sealed, under their own key, with a TTL (D8) — because the broker
// may still ask for them (windows, static values, out-of-order requests), at most
// MaxRetained of them. A round behind the ratchet is served from its retained seed, or is
// missing from the result: erased (ErrRoundErased, spec §10 #8), and the caller nullifies its
// slot. An unknown publisher yields no seeds; one whose policy allow refuses yields none
// and is marked refused.
func (g *Garbler) publisherSeeds(ctx context.Context, pub string, rounds []uint64, ttl time.Duration, allow func(*contract.Policy) bool) (*roundSeeds, error) {
	if out, ok, err := g.retainedSeeds(ctx, pub, rounds, allow); err != nil || ok {
		return out, err
	}
	out := &roundSeeds{seeds: map[uint64]pps.Seed{}}
	err := g.update(ctx, func(tx *redis.Tx) error {
		out.zero()
		out.refused = false
		rec, err := g.loadPub(ctx, tx, pub)
		if errors.Is(err, errNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer rec.Key.Zero()
		if !allow(&rec.Policy) {
			out.refused = true
			return nil
		}
		old := rec.Round
		// The highest round the ratchet may move to: bounded by MaxSkip, since a round
		// number is the broker's word (pps.ErrRoundTooFar); rounds beyond it are erased.
		target := old
		for _, r := range rounds {
			if r > target && r-old <= pps.DefaultMaxSkip {
				target = r
			}
		}
		var fresh map[uint64]pps.Seed
		var writes []func(p redis.Pipeliner)
		if target > old {
			retain := int(min(target-old, uint64(g.opts.MaxRetained)))
			k := rec.Key
			rt := pps.NewRatchet(&k, old, pps.RatchetOptions{Retain: retain})
			defer rt.Zero()
			cur, err := rt.AdvanceTo(target)
			if err != nil {
				return err
			}
			fresh = map[uint64]pps.Seed{target: cur}
			var zs []redis.Z
			for r := target - uint64(retain); r < target; r++ {
				s, err := rt.AdvanceTo(r)
				if err != nil {
					return err
				}
				fresh[r] = s
				sr := seedRecord{Round: r, Seed: s}
				key := seedKey(pub, r)
				sealed, err := g.seal(ctx, key, sr.marshal())
				sr.Seed.Zero()
				if err != nil {
					return err
				}
				writes = append(writes, func(p redis.Pipeliner) { p.Set(ctx, key, sealed, ttl) })
				zs = append(zs, redis.Z{Score: float64(r), Member: r})
			}
			rec.Key, rec.Round = rt.Export()
			sealed, err := g.seal(ctx, pubKey(pub), rec.marshal())
			if err != nil {
				return err
			}
			writes = append(writes, func(p redis.Pipeliner) {
				p.Set(ctx, pubKey(pub), sealed, 0)
				if len(zs) > 0 {
					p.ZAdd(ctx, seedsKey(pub), zs...)
					p.Expire(ctx, seedsKey(pub), ttl)
				}
			})
		} else {
			// The ratchet's own round: its seed is derived from K_old.
			k := rec.Key
			rt := pps.NewRatchet(&k, old, pps.RatchetOptions{})
			fresh = map[uint64]pps.Seed{old: rt.Seed()}
			rt.Zero()
		}
		// Rounds behind the ratchet come from their retained records, read in one MGET (the
		// records stay sealed in Redis; each is opened under its own key as before).
		var behind []uint64
		for _, r := range rounds {
			if s, ok := fresh[r]; ok {
				out.seeds[r] = s
				continue
			}
			if r < old {
				behind = append(behind, r)
			} // r ≥ old and not fresh: beyond MaxSkip, erased
		}
		if err := g.openRetained(ctx, tx, pub, behind, out.seeds); err != nil {
			return err
		}
		zeroSeeds(fresh)
		if len(writes) == 0 {
			return nil
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, w := range writes {
				w(p)
			}
			return nil
		})
		if err == nil {
			g.m.retained.Add(float64(len(writes) - 1))
		}
		return err
	}, pubKey(pub))
	if err != nil {
		out.zero()
		return nil, fmt.Errorf("ratchet of publisher %s: %w", pub, err)
	}
	return out, nil
}

// retainedSeeds is publisherSeeds when no requested round moves the publisher's ratchet
// (each is behind it — the window checks advanced it as the rounds arrived —, its own round,
// or beyond MaxSkip, erased): no ratchet step and no write,
// so the publisher's record and the retained records are read in one MULTI/EXEC round trip (a
// consistent snapshot, as the records of rounds behind the ratchet are written in the same
// transaction as the ratchet that passed them) instead of WATCH, GET, MGET and UNWATCH. ok is
// false, with nothing read into the result, when a round would move the ratchet or the
// publisher is unknown; publisherSeeds then runs its transaction.
func (g *Garbler) retainedSeeds(ctx context.Context, pub string, rounds []uint64, allow func(*contract.Policy) bool) (out *roundSeeds, ok bool, err error) {
	if len(rounds) == 0 {
		return nil, false, nil
	}
	keys := make([]string, len(rounds))
	for i, r := range rounds {
		keys[i] = seedKey(pub, r)
	}
	var get *redis.StringCmd
	var mget *redis.SliceCmd
	if _, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, pubKey(pub))
		mget = p.MGet(ctx, keys...)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("ratchet of publisher %s: redis: %w", pub, err)
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("ratchet of publisher %s: redis get: %w", pub, err)
	}
	pt, err := g.sealer.Open(ctx, b, []byte(pubKey(pub)))
	if err != nil {
		return nil, false, fmt.Errorf("ratchet of publisher %s: open %s: %w", pub, pubKey(pub), err)
	}
	rec, err := decodePubRecord(pt)
	clear(pt)
	if err != nil {
		return nil, false, fmt.Errorf("ratchet of publisher %s: %w", pub, err)
	}
	defer rec.Key.Zero()
	old := rec.Round
	for _, r := range rounds {
		if r > old && r-old <= pps.DefaultMaxSkip {
			return nil, false, nil // the ratchet moves: publisherSeeds's transaction
		}
	}
	out = &roundSeeds{seeds: map[uint64]pps.Seed{}}
	if !allow(&rec.Policy) {
		out.refused = true
		return out, true, nil
	}
	vals, err := mget.Result()
	if err == nil && len(vals) != len(keys) {
		err = fmt.Errorf("redis mget: %d values for %d keys", len(vals), len(keys))
	}
	var bRounds []uint64
	var bKeys []string
	var bVals []any
	for i, r := range rounds {
		if err == nil && r < old {
			bRounds, bKeys, bVals = append(bRounds, r), append(bKeys, keys[i]), append(bVals, vals[i])
		}
	}
	if err == nil {
		err = g.openValues(ctx, bRounds, bKeys, bVals, out.seeds)
	}
	if err != nil {
		out.zero()
		return nil, false, fmt.Errorf("ratchet of publisher %s: %w", pub, err)
	}
	if slices.Contains(rounds, old) { // the ratchet's own round: its seed is derived from K_old
		k := rec.Key
		rt := pps.NewRatchet(&k, old, pps.RatchetOptions{})
		out.seeds[old] = rt.Seed()
		rt.Zero()
	}
	return out, true, nil // a round beyond MaxSkip is left out: erased
}

// openRetained reads the retained seed records of pub's rounds with one MGET and opens
// each under its own key into seeds; a round without a record (erased, expired) is left
// out.
func (g *Garbler) openRetained(ctx context.Context, c redis.Cmdable, pub string, rounds []uint64, seeds map[uint64]pps.Seed) error {
	if len(rounds) == 0 {
		return nil
	}
	keys := make([]string, len(rounds))
	for i, r := range rounds {
		keys[i] = seedKey(pub, r)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("redis mget: %w", err)
	}
	return g.openValues(ctx, rounds, keys, vals, seeds)
}

// openValues opens the MGET answer vals of the seed records keys of rounds into seeds; a
// round without a record is left out.
func (g *Garbler) openValues(ctx context.Context, rounds []uint64, keys []string, vals []any, seeds map[uint64]pps.Seed) error {
	if len(vals) != len(keys) {
		return fmt.Errorf("redis mget: %d values for %d keys", len(vals), len(keys))
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		sealed, ok := v.(string)
		if !ok {
			return fmt.Errorf("redis mget %s: a %T", keys[i], v)
		}
		pt, err := g.sealer.Open(ctx, []byte(sealed), []byte(keys[i]))
		if err != nil {
			return fmt.Errorf("open %s: %w", keys[i], err)
		}
		sr, err := decodeSeedRecord(pt)
		clear(pt)
		if err != nil {
			return err
		}
		if sr.Round != rounds[i] {
			sr.Seed.Zero()
			return fmt.Errorf("seed record of round %d holds round %d: %w", rounds[i], sr.Round, ErrSealed)
		}
		seeds[rounds[i]] = sr.Seed
		sr.Seed.Zero()
	}
	return nil
}

// releasePublisher erases the retained seeds of pub's rounds ≤ before, and moves the
// ratchet past before if it has not got there, so that no record in Redis (and no key in
// memory) can derive a released round any more (D8: forward secrecy starts at erasure).
// It returns how many retained seeds it erased.
func (g *Garbler) releasePublisher(ctx context.Context, pub string, before uint64) (int, error) {
	erased := 0
	err := g.update(ctx, func(tx *redis.Tx) error {
		rec, err := g.loadPub(ctx, tx, pub)
		if errors.Is(err, errNotFound) {
			erased = 0
			return nil
		}
		if err != nil {
			return err
		}
		defer rec.Key.Zero()
		upto := "+inf"
		if before < math.MaxInt64 {
			upto = fmt.Sprint(before)
		}
		members, err := tx.ZRangeArgs(ctx, redis.ZRangeArgs{Key: seedsKey(pub), Start: "-inf", Stop: upto, ByScore: true}).Result()
		if err != nil {
			return fmt.Errorf("retained rounds: %w", err)
		}
		var sealed []byte
		if rec.Round <= before {
			if before == math.MaxUint64 || before+1-rec.Round > pps.DefaultMaxSkip {
				return fmt.Errorf("release before round %d: ratchet at %d, at most %d steps: %w", before, rec.Round, pps.DefaultMaxSkip, pps.ErrRoundTooFar)
			}
			k := rec.Key
			rt := pps.NewRatchet(&k, rec.Round, pps.RatchetOptions{})
			if _, err := rt.AdvanceTo(before + 1); err != nil {
				rt.Zero()
				return err
			}
			rec.Key, rec.Round = rt.Export()
			rt.Zero()
			if sealed, err = g.seal(ctx, pubKey(pub), rec.marshal()); err != nil {
				return err
			}
		}
		if len(members) == 0 && sealed == nil {
			erased = 0
			return nil
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range members {
				var r uint64
				if _, err := fmt.Sscan(m, &r); err == nil {
					p.Del(ctx, seedKey(pub, r))
				}
			}
			p.ZRemRangeByScore(ctx, seedsKey(pub), "-inf", upto)
			if sealed != nil {
				p.Set(ctx, pubKey(pub), sealed, 0)
			}
			return nil
		})
		erased = len(members)
		return err
	}, pubKey(pub))
	if err != nil {
		return 0, fmt.Errorf("release publisher %s: %w", pub, err)
	}
	return erased, nil
}

// allocateRound allocates the next function round ρ of fn (spec §8.5
// AllocateNextRound): it persists K'_{ρ+1} and ρ+1 before returning s'_ρ, so a round is
// never used twice, across replicas and restarts (§10 #7).
func (g *Garbler) allocateRound(ctx context.Context, fn string) (epoch, round uint64, seed pps.Seed, err error) {
	err = g.update(ctx, func(tx *redis.Tx) error {
		rec, err := g.loadFn(ctx, tx, fn)
		if err != nil {
			return err
		}
		defer rec.Key.Zero()
		fk := pps.RestoreFunctionKeys(g.rand, rec.Epoch, rec.Round, &rec.Key)
		defer fk.Zero()
		e, r, s := fk.AllocateRound()
		rec.Epoch, rec.Round, rec.Key = fk.Export()
		sealed, err := g.seal(ctx, fnKey(fn), rec.marshal())
		if err != nil {
			s.Zero()
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, fnKey(fn), sealed, 0)
			return nil
		}); err != nil {
			s.Zero()
			return err
		}
		epoch, round, seed = e, r, s
		return nil
	}, fnKey(fn))
	if err != nil {
		return 0, 0, pps.Seed{}, fmt.Errorf("allocate a round of function %s: %w", fn, err)
	}
	return epoch, round, seed, nil
}

// retainedRounds lists pub's retained rounds (tests and Release).
func (g *Garbler) retainedRounds(ctx context.Context, pub string) ([]uint64, error) {
	ms, err := g.rdb.ZRange(ctx, seedsKey(pub), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, len(ms))
	for _, m := range ms {
		var r uint64
		if _, err := fmt.Sscan(m, &r); err == nil {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out, nil
}

// zeroSeeds overwrites every seed of m and empties it.
func zeroSeeds(m map[uint64]pps.Seed) {
	for k := range m {
		m[k] = pps.Seed{}
		delete(m, k)
	}
}
