package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

const gtSumFn = `(begin (define a (val "a")) (define b (val "b")) (start-building) (sum (list a b)))`

// TestGarblerRestartContinuesRatchetsAndNeverReusesRounds runs two executions, restarts
// the garbler (a new process state on the same Redis: nothing in memory, the function not
// registered again), and checks that the publisher ratchets continue where they were (the
// consistency check passes on later rounds), that the function round keeps growing, and —
// with two garbler replicas garbling concurrently on that Redis — that no function round is
// ever handed out twice (spec §10 #7).
func TestGarblerRestartContinuesRatchetsAndNeverReusesRounds(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, gtSumFn)
	sub := e.subscribe(t, f.ID)
	pubs := map[string]*gtPublisher{"a": e.setupPublisher(t, f.ID), "b": e.setupPublisher(t, f.ID)}
	run := func(c ppsv1.GarblerClient, round uint64) *gtExecution {
		t.Helper()
		feeds := map[int]*gtFeed{}
		values := make([]pps.Fixed, len(f.Layout.Slots))
		for i, s := range f.Layout.Slots {
			values[i] = pps.Fixed(int32(i+1) << 8 * int32(round+1))
			p := pubs[s.Topic]
			feeds[i] = &gtFeed{pub: p, round: round, labels: p.publish(t, round, values[i])}
		}
		ex := gtExecute(t, c, f, feeds, 0, nil)
		if len(ex.bad) != 0 || len(ex.erased) != 0 {
			t.Fatalf("round %d: bad %v erased %v", round, ex.bad, ex.erased)
		}
		got, err := sub.sub.Unmask(ex.header.Epoch, ex.header.Round, ex.masked, f.OutputBits())
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.Model(ex.assign.ModelInputs(values))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: unmasked %x, model %x", round, got, want)
		}
		return ex
	}
	if ex := run(e.client, 1); ex.header.Round != 0 {
		t.Fatalf("first execution at function round %d", ex.header.Round)
	}
	if ex := run(e.client, 2); ex.header.Round != 1 {
		t.Fatalf("second execution at function round %d", ex.header.Round)
	}

	e.stop()
	e.start(t)
	if ex := run(e.client, 4); ex.header.Round != 2 {
		t.Fatalf("after the restart: function round %d, want 2 (rounds 0 and 1 are used)", ex.header.Round)
	}

	// A second replica on the same Redis; both garble concurrently.
	other := newGarblerReplica(t, e)
	const each = 6
	var (
		mu     sync.Mutex
		rounds []uint64
		wg     sync.WaitGroup
	)
	for _, c := range []ppsv1.GarblerClient{e.client, other} {
		for range each {
			wg.Go(func() {
				r, err := gtGarbleRound(c, f, pubs, 4)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				rounds = append(rounds, r)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(rounds)
	for i, r := range rounds {
		if r != uint64(3+i) {
			t.Fatalf("concurrent executions got function rounds %v: want each of 3..%d once", rounds, 2+2*each)
		}
	}
}

// newGarblerReplica starts a second Garbler on e's Redis, sealer and identity, served on
// its own listener, and returns a broker client of it.
func newGarblerReplica(t *testing.T, e *garblerEnv) ppsv1.GarblerClient {
	t.Helper()
	g, err := NewGarbler(GarblerOptions{Redis: e.redis.Client(), Sealer: e.sealer, Signer: e.signer})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveGarbler(t, g, e.gCA, e.brokerCA)
	r := &garblerEnv{addr: addr}
	return r.dial(t, e.brokerCA, e.gCA)
}

// gtGarbleRound garbles one execution of f with every slot at the publishers' round,
// without a consistency check, drains the stream and returns its function round. It runs
// on other goroutines, so it returns errors instead of failing t.
func gtGarbleRound(c ppsv1.GarblerClient, f *dsl.Function, pubs map[string]*gtPublisher, round uint64) (uint64, error) {
	h := f.Circuit.Hash()
	req := &ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:]}
	for i, s := range f.Layout.Slots {
		req.Slots = append(req.Slots, &ppsv1.SlotInput{Slot: uint32(i), PubId: pubs[s.Topic].dev.id, Round: round})
	}
	stream, err := c.Garble(context.Background(), req)
	if err != nil {
		return 0, err
	}
	first, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	hdr := first.GetHeader()
	if hdr == nil {
		return 0, errors.New("no header first")
	}
	var n uint64
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		n += uint64(len(m.GetData()))
	}
	if n != hdr.StreamBytes {
		return 0, fmt.Errorf("stream of %d bytes, header says %d", n, hdr.StreamBytes)
	}
	return hdr.Round, nil
}

// gtRedisDump is everything in the garbler's Redis: the raw bytes of every key and value,
// and every string value opened with the garbler's sealer.
type gtRedisDump struct {
	raw    []byte
	opened map[string][]byte
}

func gtScanRedis(t *testing.T, e *garblerEnv) *gtRedisDump {
	t.Helper()
	ctx := context.Background()
	rdb := e.redis.Client()
	d := &gtRedisDump{opened: map[string][]byte{}}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		d.raw = append(d.raw, k...)
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case "string":
			v, err := rdb.Get(ctx, k).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			d.raw = append(d.raw, v...)
			pt, err := e.sealer.Open(ctx, v, []byte(k))
			if err != nil {
				t.Fatalf("%s does not open as a sealed record: %v", k, err)
			}
			d.opened[k] = pt
		case "zset":
			ms, err := rdb.ZRange(ctx, k, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				d.raw = append(d.raw, m...)
			}
		case "set":
			ms, err := rdb.SMembers(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				d.raw = append(d.raw, m...)
			}
		default:
			t.Fatalf("unexpected %s key %s", typ, k)
		}
	}
	return d
}

// holds reports which records hold secret s once opened.
func (d *gtRedisDump) holds(s []byte) []string {
	var at []string
	for k, pt := range d.opened {
		if bytes.Contains(pt, s) {
			at = append(at, k)
		}
	}
	slices.Sort(at)
	return at
}

// TestGarblerRedisScanForwardSecrecy scans the garbler's whole Redis keyspace (spec §10 #9):
// no ratchet key or seed is ever stored raw; once opened with the sealing key, only the
// current ratchet key and the retained seeds are there — the previous K of an advanced
// ratchet is gone; after Release the sealed records of the released rounds are deleted and
// the ratchet has moved past them, so nothing in Redis derives them any more; and a round
// asked for after its release comes back erased, which the broker turns into nullification
// (§10 #8).
func TestGarblerRedisScanForwardSecrecy(t *testing.T) {
	ctx := context.Background()
	e := newGarblerEnv(t)
	f := e.register(t, gtWindowFn)
	sc := gtPublishAll(t, e, f, map[string]uint64{"a": 0, "b": 0, "c": 0, "d": 5}, nil)
	if ex := gtExecute(t, e.client, f, sc.feeds, 0, nil); len(ex.bad)+len(ex.erased) != 0 {
		t.Fatalf("bad %v erased %v", ex.bad, ex.erased)
	}
	d := sc.pubs["d"]
	var K, S [8]pps.Seed
	for r := range K {
		K[r], S[r] = d.ratchetAt(t, uint64(r))
	}
	pub := pubKey(d.dev.id)
	check := func(stage string, keyAt uint64, retained []uint64) {
		t.Helper()
		dump := gtScanRedis(t, e)
		for _, p := range sc.pubs {
			for r := range uint64(8) {
				k, s := p.ratchetAt(t, r)
				if bytes.Contains(dump.raw, k[:]) || bytes.Contains(dump.raw, s[:]) {
					t.Fatalf("%s: a raw ratchet key or seed of round %d in Redis", stage, r)
				}
			}
		}
		for r := range uint64(8) {
			wantK := []string(nil)
			if r == keyAt {
				wantK = []string{pub}
			}
			if got := dump.holds(K[r][:]); !slices.Equal(got, wantK) {
				t.Fatalf("%s: K_%d is in %v, want %v", stage, r, got, wantK)
			}
			wantS := []string(nil)
			if slices.Contains(retained, r) {
				wantS = []string{seedKey(d.dev.id, r)}
			}
			if got := dump.holds(S[r][:]); !slices.Equal(got, wantS) {
				t.Fatalf("%s: s_%d is in %v, want %v", stage, r, got, wantS)
			}
			n, err := e.redis.Client().Exists(ctx, seedKey(d.dev.id, r)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) != slices.Contains(retained, r) {
				t.Fatalf("%s: the sealed record of round %d exists=%d, retained=%v", stage, r, n, retained)
			}
			if n == 1 {
				// D8: a retained seed lives at most the seed TTL, even if never released.
				ttl, err := e.redis.Client().TTL(ctx, seedKey(d.dev.id, r)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= 0 || ttl > DefaultSeedTTL {
					t.Fatalf("%s: retained seed of round %d has TTL %v, want at most %v", stage, r, ttl, DefaultSeedTTL)
				}
			}
		}
		got, err := e.garbler.retainedRounds(ctx, d.dev.id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, retained) {
			t.Fatalf("%s: retained rounds %v, want %v", stage, got, retained)
		}
	}
	// The window read rounds 5, 4, 3: the ratchet moved from K_0 to K_5 and retained s_0..s_4.
	check("after the advance", 5, []uint64{0, 1, 2, 3, 4})
	release := func(before uint64) {
		t.Helper()
		if _, err := e.client.Release(ctx, &ppsv1.ReleaseRequest{Releases: []*ppsv1.ReleaseRequest_Release{
			{PubId: d.dev.id, BeforeRound: before}}}); err != nil {
			t.Fatal(err)
		}
	}
	release(3)
	check("after releasing rounds ≤ 3", 5, []uint64{4})
	release(5)
	check("after releasing rounds ≤ 5", 6, nil)

	// The broker asks for the window again: every slot of "d" is erased, and the execution
	// goes on without them.
	ex := gtExecute(t, e.client, f, sc.feeds, 0, nil)
	var dSlots []uint32
	for i, s := range f.Layout.Slots {
		if s.Topic == "d" {
			dSlots = append(dSlots, uint32(i))
		}
	}
	slices.Sort(ex.erased)
	if !slices.Equal(slices.Compact(ex.erased), dSlots) {
		t.Fatalf("erased slots %v, want d's %v", ex.erased, dSlots)
	}
	if ex.header.Valid != uint32(len(f.Layout.Slots)-len(dSlots)) {
		t.Fatalf("%d valid slots", ex.header.Valid)
	}
}

// gtCmdCounter counts the Redis commands a client sends, by name, pipelines included.
type gtCmdCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *gtCmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *gtCmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}
func (c *gtCmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *gtCmdCounter) add(cmd redis.Cmder) {
	c.mu.Lock()
	c.n[cmd.Name()]++
	c.mu.Unlock()
}
func (c *gtCmdCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// The retained seeds of rounds behind a publisher's ratchet are read with one MGET per
// publisher (not one GET per round), beside the ratchet's GET in one MULTI/EXEC without a
// WATCH when no round moves the ratchet, and opened under their own keys: the seeds equal the
// publisher's own ratchet, a round whose record is gone (released, expired) and a round
// beyond MaxSkip are still left out (erased), and a record copied under another round's key
// still does not open.
func TestGarblerRetainedSeedsReadInOneMGET(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, gtSumFn)
	p := e.setupPublisher(t, f.ID)
	cnt := &gtCmdCounter{n: map[string]int{}}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(cnt)
	g, err := NewGarbler(GarblerOptions{Redis: rdb, Sealer: e.sealer, Signer: e.signer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func(*contract.Policy) bool { return true }
	const n = 50
	var rounds []uint64
	for r := range uint64(n) {
		rounds = append(rounds, r)
	}
	// The first request advances the ratchet to round n-1 and retains rounds 0..n-2.
	rs, err := g.publisherSeeds(ctx, p.dev.id, rounds, time.Hour, allow)
	if err != nil {
		t.Fatal(err)
	}
	rs.zero()
	cnt.take()

	// Round 7's record is erased, round 9's replaced by round 8's (it must not open); the
	// second request reads rounds 0..n-1 and one far beyond the ratchet.
	if err := e.redis.Client().Del(ctx, seedKey(p.dev.id, 7)).Err(); err != nil {
		t.Fatal(err)
	}
	ask := append(slices.Clone(rounds), n+pps.DefaultMaxSkip+1)
	rs, err = g.publisherSeeds(ctx, p.dev.id, ask, time.Hour, allow)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.zero()
	// No round moves the ratchet, so no WATCH transaction either: the GET and the MGET go in
	// one MULTI/EXEC round trip (retainedSeeds).
	if c := cnt.take(); c["mget"] != 1 || c["get"] != 1 || c["watch"] != 0 || c["multi"] != 1 { // the one GET is the publisher's record
		t.Errorf("redis commands %v: want one MGET of the retained seeds and one GET of the ratchet in one MULTI, no WATCH", c)
	}
	for _, r := range ask {
		seed, ok := rs.seeds[r]
		switch {
		case r == 7 || r > n:
			if ok {
				t.Errorf("round %d: a seed, want erased", r)
			}
		case !ok:
			t.Errorf("round %d: no seed", r)
		default:
			if _, want := p.ratchetAt(t, r); seed != want {
				t.Errorf("round %d: seed differs from the publisher's ratchet", r)
			}
		}
	}

	moved, err := e.redis.Client().Get(ctx, seedKey(p.dev.id, 8)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.redis.Client().Set(ctx, seedKey(p.dev.id, 9), moved, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.publisherSeeds(ctx, p.dev.id, []uint64{9}, time.Hour, allow); !errors.Is(err, ErrSealed) {
		t.Errorf("a record copied under another round's key: %v, want ErrSealed", err)
	}
}
