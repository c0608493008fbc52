package roles

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// --- A manual clock: the test decides when a tick comes. ---

// --- The broker's view recorder (§10 #5): every message from the garbler, every Redis
// command and reply of the broker, every NATS message under pps.> ---

type btView struct {
	mu    sync.Mutex
	blobs [][]byte
}

func (v *btView) add(b []byte) {
	if len(b) == 0 {
		return
	}
	v.mu.Lock()
	v.blobs = append(v.blobs, append([]byte(nil), b...))
	v.mu.Unlock()
}

func (v *btView) addProto(m any) {
	if pm, ok := m.(proto.Message); ok {
		b, err := proto.Marshal(pm)
		if err == nil {
			v.add(b)
		}
	}
}

func (v *btView) addAny(x any) {
	switch x := x.(type) {
	case string:
		v.add([]byte(x))
	case []byte:
		v.add(x)
	case []any:
		for _, y := range x {
			v.addAny(y)
		}
	case []string:
		for _, y := range x {
			v.add([]byte(y))
		}
	case map[string]string:
		for k, y := range x {
			v.add([]byte(k))
			v.add([]byte(y))
		}
	}
}

// redisHook records every command the broker sends to its Redis and every reply.
type btRedisHook struct{ v *btView }

func (h btRedisHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h btRedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}
func (h btRedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.record(c)
		}
		return err
	}
}

func (h btRedisHook) record(cmd redis.Cmder) {
	h.v.addAny(cmd.Args())
	switch c := cmd.(type) {
	case *redis.StringCmd:
		h.v.addAny(c.Val())
	case *redis.StringSliceCmd:
		h.v.addAny(c.Val())
	case *redis.SliceCmd:
		h.v.addAny(c.Val())
	case *redis.Cmd:
		h.v.addAny(c.Val())
	case *redis.MapStringStringCmd:
		h.v.addAny(c.Val())
	}
}

var btBase64 = regexp.MustCompile(`"([A-Za-z0-9+/]{16,}={0,2})"`)

// expand returns every captured blob and the base64 strings of JSON bodies decoded.
func (v *btView) expand() [][]byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.blobs)
	for _, b := range v.blobs {
		for _, m := range btBase64.FindAllSubmatch(b, -1) {
			if d, err := base64.StdEncoding.DecodeString(string(m[1])); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// --- Devices speaking the protocol over MQTT (minimal test code on pps and contract). ---

type btPub struct {
	d  *btDevice
	c  mqtt.Client
	k0 pps.Seed
}

// setupPublisher runs a publisher's setup through the broker to the garbler: hello, the
// garbler's ack verified under its pinned key, K_0 from crypto_kx, then "registered".
func (e *brokerEnv) setupPublisher(d *btDevice, fns []string, garbler ed25519.PublicKey) *btPub {
	t := e.t
	t.Helper()
	c := e.mqttClient(d)
	downs := e.downs(c, d)
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &contract.Hello{V: contract.Version, Type: contract.TypeHello, Role: contract.RolePublisher,
		EdPK: d.key.Public().(ed25519.PublicKey), XEphPK: x.PublicKey().Bytes(), Nonce: make([]byte, 32),
		Policy: &contract.Policy{Fns: fns}}
	rand.Read(h.Nonce)
	h.Sign(d.key)
	b, _ := json.Marshal(h)
	mqttPublish(t, c, contract.Topic(contract.DevUpSubject(d.id)), b)
	ack := nextDown(t, downs).Ack
	if ack == nil {
		t.Fatal("publisher setup: no ack")
	}
	if err := ack.Validate(h, garbler); err != nil {
		t.Fatalf("publisher setup: %v", err)
	}
	keys, err := pps.ClientSessionKeys(x, ack.XEphPK)
	if err != nil {
		t.Fatal(err)
	}
	p := &btPub{d: d, c: c, k0: pps.PublisherRatchetKey(&keys)}
	keys.Zero()
	if n := nextDown(t, downs).Notice; n == nil || n.Type != contract.TypeRegistered || n.PubID != d.id {
		t.Fatalf("publisher setup: %+v, want registered", n)
	}
	return p
}

// seed is s_round of the publisher's ratchet, with the ratchet key K_round.
func (p *btPub) seed(t testing.TB, round uint64) (seed, key pps.Seed) {
	k := p.k0
	r := pps.NewRatchet(&k, 0, pps.RatchetOptions{})
	s, err := r.AdvanceTo(round)
	if err != nil {
		t.Fatal(err)
	}
	key, _ = r.Export()
	return s, key
}

func (p *btPub) publish(t testing.TB, round uint64, labels []byte) {
	mqttPublish(t, p.c, contract.Topic(contract.PubSubject(p.d.id)), btPublish(round, labels))
}

type btSub struct {
	d       *btDevice
	sub     *pps.Subscription
	grant   pps.Grant // a copy, for the view check
	outputs chan *contract.Output
	downs   <-chan []byte
	hello   *contract.Hello
	keys    pps.SessionKeys
}

// setupSubscriber subscribes d to fn through the broker: sub, the garbler's sealed grant,
// and the function's output topic.
func (e *brokerEnv) setupSubscriber(d *btDevice, fn string, garbler ed25519.PublicKey) *btSub {
	t := e.t
	t.Helper()
	c := e.mqttClient(d)
	downs := e.downs(c, d)
	s := &btSub{d: d, sub: pps.NewSubscription(16), outputs: make(chan *contract.Output, 16), downs: downs}
	tok := c.Subscribe(contract.Topic(contract.OutSubject(fn)), 1, func(_ mqtt.Client, m mqtt.Message) {
		o, err := contract.DecodeOutput(m.Payload())
		if err != nil {
			t.Errorf("output: %v", err)
			return
		}
		s.outputs <- o
	})
	if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		t.Fatalf("subscribe to outputs: %v", tok.Error())
	}
	x, _ := ecdh.X25519().GenerateKey(rand.Reader)
	h := &contract.Hello{V: contract.Version, Type: contract.TypeSub, Fn: fn, EdPK: d.key.Public().(ed25519.PublicKey),
		XEphPK: x.PublicKey().Bytes(), Nonce: make([]byte, 32)}
	rand.Read(h.Nonce)
	h.Sign(d.key)
	b, _ := json.Marshal(h)
	mqttPublish(t, c, contract.Topic(contract.DevUpSubject(d.id)), b)
	ack := nextDown(t, downs).Ack
	if ack == nil || ack.Validate(h, garbler) != nil {
		t.Fatalf("subscriber setup: %+v", ack)
	}
	keys, err := pps.ClientSessionKeys(x, ack.XEphPK)
	if err != nil {
		t.Fatal(err)
	}
	g, err := pps.OpenGrant(&keys, ack.Grant, contract.GrantAD(fn, h.EdPK, h.Transcript()))
	if err != nil {
		t.Fatal(err)
	}
	s.grant, s.hello, s.keys = g, h, keys
	if err := s.sub.Accept(&g); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *btSub) next(t testing.TB) *contract.Output {
	t.Helper()
	select {
	case o := <-s.outputs:
		return o
	case <-time.After(3 * time.Minute):
		t.Fatal("no output")
	}
	return nil
}

// maskOf is r of function round ρ, from the subscriber's grant.
func (s *btSub) maskOf(t testing.TB, round uint64, bits int) (pps.Seed, []byte) {
	k := s.grant.Key
	r := pps.NewRatchet(&k, s.grant.Round, pps.RatchetOptions{})
	seed, err := r.AdvanceTo(round)
	if err != nil {
		t.Fatal(err)
	}
	return seed, pps.OutputMask(&seed, bits)
}

// --- The end-to-end world: NATS+MQTT, the broker's Redis, the real garbler over mTLS. ---

type btWorld struct {
	*brokerEnv
	g      *garblerEnv
	b      *runningBroker
	clk    *clock.Manual
	view   *btView
	p      contract.Pipeline
	f      *dsl.Function
	p2     contract.Pipeline // the second pipeline of a mixed world
	f2     *dsl.Function
	sub2   *btSub
	pubs   []*btPub
	sub    *btSub
	subs   []*btSub
	period time.Duration
	tick   time.Time

	mu    sync.Mutex
	calls map[string][]any // requests the broker sent the garbler, by method
}

func (w *btWorld) requests(method string) []any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls[method])
}

// btWorldOpts shape a world: n publishers and subs subscribers (default 1) of the pipeline
// computing body; tamper, if set, may rewrite what the garbler answers (in transit).
type btWorldOpts struct {
	n, subs, minInputs int
	body               string
	tamper             func(method string, reply any)
	// before, if set, runs before each unary call to the garbler (it may block).
	before       func(ctx context.Context, method string)
	unregistered bool // do not wait for the function to register, nor set devices up
	// mode is the pipeline's mode (default faithful); mixed, if set, is the body of a second
	// pipeline of the other mode over the same publishers, with one subscriber of its own.
	mode, mixed string
	// check is the broker's default consistency check, pipelineCheck the pipeline's own
	// (both empty: the defaults); garbler are options of the garbler.
	check, pipelineCheck string
	garbler              []garblerEnvOption
	// windowCheck turns on the broker's window checks (BrokerOptions.WindowCheck).
	windowCheck bool
	// pregarble turns on garbling ahead (BrokerOptions.Pregarble).
	pregarble bool
}

// startWorld runs n publishers and one subscriber of the pipeline computing body over their
// latest values, through MQTT, the broker and the real garbler.
func startWorld(t *testing.T, n, minInputs int, body string) *btWorld {
	return startWorldWith(t, btWorldOpts{n: n, minInputs: minInputs, body: body})
}

func startWorldWith(t *testing.T, o btWorldOpts) *btWorld {
	n, minInputs, body := o.n, o.minInputs, o.body
	if o.subs == 0 {
		o.subs = 1
	}
	extra := 0
	if o.mixed != "" {
		extra = 1
	}
	devs := newBTDevices(t, n+o.subs+extra)
	period := time.Hour
	p := btPipeline("ns/stats", body, devs[:n], devs[n:n+o.subs], minInputs, period, period)
	if o.mode != "" {
		p.Mode = o.mode
	}
	p.Check = o.pipelineCheck
	f, err := dsl.Compile(p.Source)
	if err != nil {
		t.Fatal(err)
	}
	pipelines, fns := []contract.Pipeline{p}, []string{f.ID}
	var p2 contract.Pipeline
	var f2 *dsl.Function
	if o.mixed != "" {
		p2 = btPipeline("ns/other", o.mixed, devs[:n], devs[n+o.subs:], minInputs, period, period)
		// The same topics, so each publisher's single value feeds both pipelines.
		p2.Source = strings.ReplaceAll(p2.Source, "ns/other/t/", "ns/stats/t/")
		for i := range p2.Publishers {
			p2.Publishers[i].Topic = p.Publishers[i].Topic
		}
		if p.Mode == contract.ModeHardened {
			p2.Mode = contract.ModeFaithful
		} else {
			p2.Mode = contract.ModeHardened
		}
		if f2, err = dsl.Compile(p2.Source); err != nil {
			t.Fatal(err)
		}
		pipelines, fns = append(pipelines, p2), append(fns, f2.ID)
	}
	w := &btWorld{brokerEnv: startBrokerEnvFor(t, devs, fns), g: newGarblerEnv(t, o.garbler...), view: &btView{}, p: p, f: f, p2: p2, f2: f2, period: period,
		calls: map[string][]any{}}
	start := time.Now().Truncate(period).Add(period / 6)
	w.clk = clock.NewManual(start)
	w.tick = start.Truncate(period).Add(period)

	// The broker's garbler client records every message from the garbler.
	cert, key := w.g.brokerCA.issue(t, "pps-broker-e2e", false)
	tc, err := ClientTLS(cert, key, w.g.gCA.file, "")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(w.g.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			w.mu.Lock()
			w.calls[method] = append(w.calls[method], req)
			w.mu.Unlock()
			if o.before != nil {
				o.before(ctx, method)
			}
			err := inv(ctx, method, req, reply, cc, opts...)
			if o.tamper != nil && err == nil {
				o.tamper(method, reply)
			}
			w.view.addProto(reply)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := s(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &btRecStream{ClientStream: cs, v: w.view}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: w.redis.Addr()})
	rdb.AddHook(btRedisHook{w.view})
	t.Cleanup(func() { rdb.Close() })
	// Everything under pps.> that crosses the NATS server.
	obs := w.nats.Connect(t, nats.UserInfo("observer", "observer-pw"))
	if _, err := obs.Subscribe("pps.>", func(m *nats.Msg) { w.view.add(m.Data) }); err != nil {
		t.Fatal(err)
	}
	_ = obs.Flush()

	w.b = w.startBroker(BrokerOptions{Garbler: ppsv1.NewGarblerClient(cc), Redis: rdb, Pipelines: pipelines,
		Clock: w.clk, ChunkBytes: 4096, Check: o.check, WindowCheck: o.windowCheck, Pregarble: o.pregarble}, nil)
	if o.unregistered {
		return w
	}
	testenv.Eventually(t, 2*time.Minute, "function registered", func() error {
		for _, p := range pipelines {
			if _, st, reason, _ := w.b.FunctionStatus(p.Name); st != FunctionRegistered {
				return fmt.Errorf("%s: status %s %s", p.Name, st, reason)
			}
		}
		return nil
	})
	pk := w.g.signer.Public()
	for _, d := range devs[:n] {
		w.pubs = append(w.pubs, w.setupPublisher(d, fns, pk))
	}
	for _, d := range devs[n : n+o.subs] {
		w.subs = append(w.subs, w.setupSubscriber(d, f.ID, pk))
	}
	w.sub = w.subs[0]
	if f2 != nil {
		w.sub2 = w.setupSubscriber(devs[n+o.subs], f2.ID, pk)
	}
	return w
}

type btRecStream struct {
	grpc.ClientStream
	v *btView
}

func (s *btRecStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.v.addProto(m)
	}
	return err
}

// runTick waits until the broker has stored want publishes, then moves the clock to the
// next tick and returns the subscriber's output.
func (w *btWorld) runTick(t *testing.T, want float64) *contract.Output {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "publishes stored", func() error {
		if got := testutil.ToFloat64(w.b.m.Published); got != want {
			return fmt.Errorf("%v stored, want %v", got, want)
		}
		return nil
	})
	testenv.Eventually(t, 2*time.Minute, "scheduler waiting for the tick", func() error {
		if w.clk.Waiting(w.tick) == 0 {
			return fmt.Errorf("no wait until %v", w.tick)
		}
		return nil
	})
	w.clk.Set(w.tick)
	o := w.sub.next(t)
	// The next round's values arrive during the next period.
	w.clk.Set(w.tick.Add(w.period / 6))
	w.tick = w.tick.Add(w.period)
	return o
}

// unmask opens an output as the subscriber and returns it with the model's answer over
// values with the nullified slots replaced (pps.Assignment.ModelInputs).
func (w *btWorld) check(t *testing.T, o *contract.Output, values []pps.Fixed, nulls map[int]pps.NullReason) {
	t.Helper()
	checkOutput(t, w.sub, w.f, o, values, nulls)
}

// checkOutput is check for the subscriber sub of the function f.
func checkOutput(t *testing.T, sub *btSub, f *dsl.Function, o *contract.Output, values []pps.Fixed, nulls map[int]pps.NullReason) {
	t.Helper()
	if o.Status != contract.StatusOK {
		t.Fatalf("output status %s (valid %d)", o.Status, o.Valid)
	}
	got, err := sub.sub.Unmask(o.Epoch, o.Round, o.Masked, o.Bits)
	if err != nil {
		t.Fatal(err)
	}
	a, err := pps.Nullify(&f.Layout, nulls)
	if err != nil {
		t.Fatal(err)
	}
	xs, valid := a.ModelInputs(values)
	want, err := f.Model(xs, valid)
	if err != nil {
		t.Fatal(err)
	}
	gv, _ := f.Decode(got)
	wv, _ := f.Decode(want)
	if string(got) != string(want) {
		t.Fatalf("subscriber's output %v, model %v", gv, wv)
	}
	if o.Valid != a.ValidCount() {
		t.Errorf("output counts %d valid inputs, want %d", o.Valid, a.ValidCount())
	}
	t.Logf("output %v = model over %d valid inputs", gv, o.Valid)
}

// lastExecution is the broker's record of the latest execution.
func (w *btWorld) lastExecution(t *testing.T, n int) Execution {
	t.Helper()
	var last Execution
	testenv.Eventually(t, time.Minute, "execution recorded", func() error {
		recs, err := w.b.Store().Executions(context.Background(), w.f.ID)
		if err != nil || len(recs) != n {
			return fmt.Errorf("%d records, want %d: %v", len(recs), n, err)
		}
		last = recs[0]
		return nil
	})
	return last
}

func btValues(n int) []pps.Fixed {
	xs := make([]pps.Fixed, n)
	for i := range xs {
		xs[i] = pps.FixedFromFloat(float64(i*17%23) - 6.25)
	}
	return xs
}

const btStats = "list (mean xs) (sum xs) (max xs)"

// Nine publishers publish over MQTT, the broker relays their setup to the real garbler,
// evaluates the garbled circuit while it streams in, and the subscriber's unmasked output
// equals the plaintext model (§10 #2): mean, sum and max, twice in a row (fresh rounds).
func TestBrokerEndToEndStatisticsOverMQTT(t *testing.T) {
	w := startWorld(t, 9, 0, btStats)
	for round := uint64(0); round < 2; round++ {
		xs := btValues(9)
		for i := range xs {
			xs[i] = xs[i].Add(pps.FixedFromInt(int(round)))
		}
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
		o := w.runTick(t, float64(9*(round+1)))
		w.check(t, o, xs, nil)
		e := w.lastExecution(t, int(round)+1)
		if e.Status != contract.StatusOK || e.ANDGates == 0 || e.Bytes == 0 || e.Round != o.Round {
			t.Errorf("execution record %+v", e)
		}
	}
	// After the second execution the broker released round 0 of every publisher (D8): no
	// later execution reads it.
	testenv.Eventually(t, time.Minute, "round 0 released", func() error {
		released := map[string]uint64{}
		for _, r := range w.requests(ppsv1.Garbler_Release_FullMethodName) {
			for _, rel := range r.(*ppsv1.ReleaseRequest).Releases {
				released[rel.PubId] = max(released[rel.PubId], rel.BeforeRound)
			}
		}
		for _, p := range w.pubs {
			if r, ok := released[p.d.id]; !ok || r != 0 {
				return fmt.Errorf("publisher %s released up to %d (%v), want 0", p.d.id[:8], r, ok)
			}
		}
		return nil
	})
	reg := w.b.reg
	if n := testutil.CollectAndCount(reg, contract.MetricExecutions); n == 0 {
		t.Error("no executions metric")
	}
	if v := testutil.ToFloat64(w.b.m.Executions.WithLabelValues("ns/stats", contract.StatusOK)); v != 2 {
		t.Errorf("%v ok executions counted, want 2", v)
	}
}

// Nullification (§10 #3): one publisher sends nothing, and four send inconsistent labels —
// a random label, a valid label of another bit position, a label of another round, a label
// of another publisher. Exactly those five slots are nullified (the first missing, the
// others inconsistent) and the output equals the model over the rest with the declared
// identities and validity bits. Then with only two publishers left of min-inputs 3 the
// output is "insufficient" and nothing is garbled. A replayed round is rejected throughout.
func TestBrokerNullificationAndInsufficient(t *testing.T) {
	w := startWorld(t, 9, 3, btStats)
	xs := btValues(9)
	labels := make([][]byte, 9)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		labels[i] = pps.PublishLabels(&seed, xs[i:i+1])
	}
	rand.Read(labels[1][5*16 : 6*16])                 // a random label for bit 5
	copy(labels[2][3*16:4*16], labels[2][9*16:10*16]) // bit 9's valid label in bit 3's place
	other, _ := w.pubs[3].seed(t, 1)
	labels[3] = pps.PublishLabels(&other, xs[3:4]) // round 1's labels, published as round 0
	fifth, _ := w.pubs[5].seed(t, 0)
	labels[4] = pps.PublishLabels(&fifth, xs[4:5]) // publisher 5's labels
	for i, p := range w.pubs {
		if i != 0 {
			p.publish(t, 0, labels[i])
		}
	}
	o := w.runTick(t, 8)
	w.check(t, o, xs, map[int]pps.NullReason{0: pps.Missing, 1: pps.Inconsistent, 2: pps.Inconsistent,
		3: pps.Inconsistent, 4: pps.Inconsistent})
	e := w.lastExecution(t, 1)
	if !slices.Equal(e.Nullified["missing"], []uint32{0}) || !slices.Equal(e.Nullified["inconsistent"], []uint32{1, 2, 3, 4}) || len(e.Nullified) != 2 {
		t.Errorf("nullified %v, want missing [0] and inconsistent [1 2 3 4]", e.Nullified)
	}

	// Replay of round 0 is rejected; round 1 from only two publishers is below min-inputs.
	w.pubs[6].publish(t, 0, labels[6])
	waitRejected(t, w.b, stagePublish, reasonReplay, 1)
	for _, i := range []int{7, 8} {
		seed, _ := w.pubs[i].seed(t, 1)
		w.pubs[i].publish(t, 1, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	o = w.runTick(t, 10)
	if o.Status != contract.StatusInsufficient || o.Valid != 2 || len(o.Masked) != 0 {
		t.Errorf("output %+v, want insufficient with 2 valid", o)
	}
	if e := w.lastExecution(t, 2); e.Status != contract.StatusInsufficient || e.Bytes != 0 {
		t.Errorf("execution %+v, want insufficient and nothing garbled", e)
	}
}

// The broker's view (§10 #5): over two executions, everything the broker received from the
// garbler (every gRPC message), every Redis command and reply of the broker, and every NATS
// message under pps.> never holds both labels of any input wire, nor a publisher's round
// seed or ratchet key, nor the function key, its round seed or the output mask r; and its
// log holds no label.
func TestBrokerViewNeverHoldsBothLabelsSeedsOrMask(t *testing.T) {
	w := startWorld(t, 9, 0, btStats)
	type wire struct {
		pub, bit int
		round    uint64
	}
	seen := map[[16]byte]struct {
		w wire
		b int
	}{}
	secrets := map[[32]byte]string{}
	for round := uint64(0); round < 2; round++ {
		xs := btValues(9)
		for i, p := range w.pubs {
			seed, key := p.seed(t, round)
			secrets[seed], secrets[key] = fmt.Sprintf("seed of publisher %d round %d", i, round), fmt.Sprintf("key of publisher %d round %d", i, round)
			pairs := pps.ValueLabels(&seed, 0)
			for j, pair := range pairs {
				for b := range 2 {
					seen[pair[b]] = struct {
						w wire
						b int
					}{wire{i, j, round}, b}
				}
			}
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
		o := w.runTick(t, float64(9*(round+1)))
		w.check(t, o, xs, nil)
		seed, r := w.sub.maskOf(t, o.Round, o.Bits)
		secrets[seed] = fmt.Sprintf("function round seed %d", o.Round)
		if len(r) < 8 {
			t.Fatalf("mask of %d bytes: too short to search for", len(r))
		}
		for _, blob := range w.view.expand() {
			if i := indexOf(blob, r); i >= 0 {
				t.Errorf("the broker's view holds r of round %d", o.Round)
			}
		}
	}
	secrets[w.sub.grant.Key] = "function key"
	held := map[wire]map[int]bool{}
	blobs := w.view.expand()
	blobs = append(blobs, []byte(w.b.log.String()))
	total := 0
	for _, blob := range blobs {
		total += len(blob)
		for i := 0; i+16 <= len(blob); i++ {
			if l, ok := seen[[16]byte(blob[i:i+16])]; ok {
				if held[l.w] == nil {
					held[l.w] = map[int]bool{}
				}
				held[l.w][l.b] = true
			}
			if i+32 <= len(blob) {
				if what, ok := secrets[[32]byte(blob[i:i+32])]; ok {
					t.Errorf("the broker's view holds the %s", what)
				}
			}
		}
	}
	if len(held) != 9*32*2 {
		t.Errorf("the view holds labels of %d wires, want all %d (the recorder missed the publishes)", len(held), 9*32*2)
	}
	for w, bs := range held {
		if len(bs) == 2 {
			t.Errorf("the broker's view holds both labels of bit %d of publisher %d round %d", w.bit, w.pub, w.round)
		}
	}
	for l := range seen {
		if indexOf([]byte(w.b.log.String()), []byte(base64.StdEncoding.EncodeToString(l[:]))) >= 0 {
			t.Error("the broker's log holds a label")
		}
	}
	t.Logf("searched %d blobs, %d bytes", len(blobs), total)
}

func indexOf(b, sub []byte) int { return bytes.Index(b, sub) }
