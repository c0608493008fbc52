package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/client"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/pkg/pps/roles"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// DemoOptions configure RunDemo: one parking pipeline in one process.
type DemoOptions struct {
	// Rounds is how many rounds each lot publishes per simulated day: its occupied count at
	// evenly spaced times (288 is the paper's every 5 minutes). It must divide 288. The
	// program reads each lot's day as a window of Rounds values.
	Rounds int
	// Days is the number of simulated days, one execution each (≥ 1).
	Days int
	// Seed seeds the dataset: day d is Parking(Seed+d).
	Seed uint64
	// Registerer, when set, holds the broker's and the garbler's metrics (e2e/dashboards
	// scrapes them); nil registers none.
	Registerer prometheus.Registerer
}

// DefaultDemoOptions are the settings of the demo without flags: two simulated days of
// two-hourly counts. The consistency check (OPRF-PSI, one ristretto255 OPRF per input bit
// and two per label pair) dominates an execution: 9 × 12 × 32 = 3,456 input bits take about
// a CPU-second; 288 rounds, the paper's scale, cost 24× more.
func DefaultDemoOptions() DemoOptions { return DemoOptions{Rounds: 12, Days: 2, Seed: 1} }

// Validate checks the options.
func (o DemoOptions) Validate() error {
	if o.Rounds < 1 || o.Rounds > ParkingSamples || ParkingSamples%o.Rounds != 0 || o.Days < 1 {
		return fmt.Errorf("rounds must divide %d (1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, 36, 48, 72, 96, 144 or 288) and days must be ≥ 1; got %d rounds, %d days",
			ParkingSamples, o.Rounds, o.Days)
	}
	return nil
}

// DemoProgram is the demo's function over rounds values per lot: the mean, maximum and
// minimum of the combined occupied count c_t = Σ_lots occ_{lot,t} over the day (spec §4.4),
// in that order.
func DemoProgram(rounds int) string {
	var b strings.Builder
	b.WriteString("(begin\n")
	for l := range ParkingLots {
		fmt.Fprintf(&b, "  (define lot%d (window %q %d))\n", l+1, ParkingTopic(l), rounds)
	}
	b.WriteString("  (define lots (list")
	for l := range ParkingLots {
		fmt.Fprintf(&b, " lot%d", l+1)
	}
	b.WriteString(`))
  (define add-lists
    (lambda (a b)
      (if (null? a) () (cons (+ (car a) (car b)) (add-lists (cdr a) (cdr b))))))
  (define combined (fold add-lists lots))
  (start-building)
  (list (mean combined) (max combined) (min combined)))
`)
	return b.String()
}

// DemoDay is day d of the demo's dataset: Parking(seed+d), each lot's 288 counts sampled
// every 288/rounds slots.
func DemoDay(seed uint64, day, rounds int) *Dataset {
	full := Parking(seed + uint64(day))
	step := ParkingSamples / rounds
	ds := &Dataset{Name: full.Name}
	for _, s := range full.Series {
		v := make([]pps.Fixed, rounds)
		for t := range v {
			v[t] = s.Values[t*step]
		}
		ds.Series = append(ds.Series, Series{Topic: s.Topic, Values: v})
	}
	return ds
}

// DemoPlaintext is the day's mean, maximum and minimum of the combined count, computed in
// float64 directly from the counts (not with the circuit's Q24.8 model).
func DemoPlaintext(ds *Dataset) []float64 {
	combined := make([]float64, len(ds.Series[0].Values))
	for _, s := range ds.Series {
		for t, v := range s.Values {
			combined[t] += v.Float64()
		}
	}
	sum, mx, mn := 0.0, math.Inf(-1), math.Inf(1)
	for _, c := range combined {
		sum, mx, mn = sum+c, math.Max(mx, c), math.Min(mn, c)
	}
	return []float64{sum / float64(len(combined)), mx, mn}
}

// DemoExecution is one execution as the demo saw it.
type DemoExecution struct {
	Day   int    `json:"day"`
	Exec  string `json:"exec"`
	Valid int    `json:"valid"`
	// ANDGates and Bytes are the circuit's AND gates and the garbled stream's size.
	ANDGates uint64 `json:"and_gates"`
	Bytes    uint64 `json:"bytes"`
	// Check, Garble and Evaluate are the broker's phases (roles.Execution): the consistency
	// check, request to stream header, and header to result while the stream arrives.
	Check    time.Duration `json:"check_ns"`
	Garble   time.Duration `json:"garble_ns"`
	Evaluate time.Duration `json:"evaluate_ns"`
	// Latency runs from the tick (the day's end) to the subscriber's decoded output.
	Latency time.Duration `json:"latency_ns"`
	// Got is what the subscriber decoded; Want the plaintext model's Q24.8 result over the
	// day's data (dsl.Function.Model); Plain the float64 statistics (DemoPlaintext).
	Got   []pps.Fixed `json:"got"`
	Want  []pps.Fixed `json:"want"`
	Plain []float64   `json:"plain"`
}

// Match reports whether the subscriber decoded exactly the plaintext model's result.
func (e *DemoExecution) Match() bool { return len(e.Want) > 0 && slices.Equal(e.Got, e.Want) }

// DemoSummary is what one demo run did.
type DemoSummary struct {
	Lots   int    `json:"lots"`
	Rounds int    `json:"rounds"`
	Days   int    `json:"days"`
	Fn     string `json:"fn"`
	// Published is the number of publish messages the broker stored.
	Published  int             `json:"published"`
	Executions []DemoExecution `json:"executions"`
	Seconds    float64         `json:"seconds"`
}

// Exact reports whether every day ran and each output equals the plaintext model exactly.
func (s *DemoSummary) Exact() bool {
	if len(s.Executions) != s.Days || s.Days == 0 {
		return false
	}
	for i := range s.Executions {
		if !s.Executions[i].Match() {
			return false
		}
	}
	return true
}

// demoStatistics names the outputs of DemoProgram.
var demoStatistics = []string{"mean", "max", "min"}

// RunDemo runs one parking pipeline in one process and narrates it on out: an embedded NATS
// server (JetStream and the MQTT listener on 127.0.0.1, random ports; one account with the
// broker's user and one user per device holding contract.DevicePermissions), the garbler
// and the broker each with its own in-process Redis (miniredis), linked by gRPC over mutual
// TLS with certificates made for the run, 9 parking lots publishing over MQTT and one
// subscriber. The broker's schedule runs on a simulated clock: a day's rounds are
// published, then the clock moves to midnight and the day's execution runs. Each output the
// subscriber decodes is shown next to the plaintext computed from the generated data.
func RunDemo(ctx context.Context, o DemoOptions, out io.Writer) (*DemoSummary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	start := time.Now()
	_, subKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	sub := &client.Device{Key: subKey}
	p, err := NewPipeline(DemoDay(o.Seed, 0, o.Rounds), DemoProgram(o.Rounds), PipelineOptions{Name: "parking-daily",
		Window: 24 * time.Hour, Schedule: 24 * time.Hour, Subscribers: []string{sub.ID()}})
	if err != nil {
		return nil, err
	}
	w, err := startWorld(ctx, worldOptions{pipelines: []*Pipeline{p}, subscribers: []*client.Device{sub}, workers: 1,
		garblerReg: o.Registerer, brokerReg: o.Registerer})
	if err != nil {
		return nil, err
	}
	defer w.close()
	fmt.Fprintf(out, "setup: embedded NATS (JetStream, MQTT on %s), garbler and broker over mutual TLS, a Redis for each (miniredis); function %s: %d AND gates, %d input slots (%d lots × %d rounds), outputs mean/max/min\n",
		w.mqttAddr, p.Function.ID[:12], w.fns[0].plan.ANDCount(), len(p.Function.Layout.Slots), ParkingLots, o.Rounds)
	feeds, err := w.subscribe(ctx, sub, p.Function)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "setup done: %d publishers and 1 subscriber through the garbler's handshake (relayed by the broker), in %.1fs\n",
		len(w.publishers), time.Since(start).Seconds())
	s := &DemoSummary{Lots: ParkingLots, Rounds: o.Rounds, Days: o.Days, Fn: p.Function.ID}
	for day := range o.Days {
		ds := DemoDay(o.Seed, day, o.Rounds)
		t0 := time.Now()
		if err := w.publishDay(ctx, ds); err != nil {
			return s, fmt.Errorf("day %d: %w", day+1, err)
		}
		s.Published = w.published()
		fmt.Fprintf(out, "day %d: %d lots published %d rounds each over MQTT (%d messages stored by the broker) in %.2fs\n",
			day+1, ParkingLots, o.Rounds, ParkingLots*o.Rounds, time.Since(t0).Seconds())
		want, err := ds.Evaluate(p.Function)
		if err != nil {
			return s, err
		}
		e := DemoExecution{Day: day + 1, Want: want, Plain: DemoPlaintext(ds)}
		outs, recs, latency, err := w.tick(ctx, feeds)
		if err != nil {
			return s, fmt.Errorf("day %d: %w", day+1, err)
		}
		got, rec := outs[0], recs[0]
		e.Exec, e.Valid, e.Got, e.Latency = got.Exec, got.Valid, got.Values, latency
		e.ANDGates, e.Bytes, e.Check, e.Garble, e.Evaluate = rec.ANDGates, rec.Bytes, rec.Check, rec.Garble, rec.Evaluate
		s.Executions = append(s.Executions, e)
		fmt.Fprintf(out, "  execution %s: %d AND gates, %.2f MB garbled, %d/%d inputs valid; consistency check %s, garble (to stream header) %s, evaluate (while streaming) %s; day end → subscriber %s\n",
			e.Exec[:12], e.ANDGates, float64(e.Bytes)/1e6, e.Valid, len(p.Function.Layout.Slots),
			ms(e.Check), ms(e.Garble), ms(e.Evaluate), ms(e.Latency))
		for i, name := range demoStatistics {
			mark := "✓"
			if e.Got[i] != e.Want[i] {
				mark = "✗"
			}
			fmt.Fprintf(out, "  %-4s subscriber %10.4f   plaintext %10.4f (Q24.8 model %10.4f) %s\n",
				name, e.Got[i].Float64(), e.Plain[i], e.Want[i].Float64(), mark)
		}
	}
	s.Seconds = time.Since(start).Seconds()
	return s, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// --- The world: every party of a pipeline in one process. ---

// worldOptions say what startWorld runs.
type worldOptions struct {
	pipelines   []*Pipeline // their publishers are set up with a policy naming every function they feed
	subscribers []*client.Device
	workers     int // the broker's concurrent executions (1 serialises them, as the paper did)
	garblerReg  prometheus.Registerer
	brokerReg   prometheus.Registerer
	check       string // the broker's consistency check (empty: its default, KKRT)
	// noWindowCheck runs every consistency check at the tick (the broker's --window-check=false).
	noWindowCheck bool
	// noPregarble garbles each execution in full at its tick (the broker's
	// --pregarble=false); by default its gates are garbled ahead, during the window.
	noPregarble bool
	// redisAddrs, when set, are the garbler's and the broker's Redis servers (redis-server,
	// as deployed); otherwise each trust domain gets an embedded miniredis.
	redisAddrs []string
}

// world is one process holding every trust domain of a PPS deployment, each with its own
// state: NATS (with MQTT) and a Redis for the broker, a Redis and an identity for the
// garbler, the mutual-TLS link between them, and the devices' MQTT clients.
type world struct {
	dir        string
	ns         *server.Server
	mqttAddr   string
	nc         *nats.Conn
	redis      []*miniredis.Miniredis
	rdbs       []*redis.Client
	gsrv       *grpc.Server
	cc         *grpc.ClientConn
	garbler    *roles.Garbler
	broker     *roles.Broker
	clk        *clock.Manual // the broker's schedule: still while a day is published, set to midnight to end it
	fns        []worldFn
	publishers []*worldPublisher
	subs       []*client.Subscriber
	pwFiles    map[string]string
	stop       []func()
	day        time.Time // the current day's midnight on the simulated clock
}

type worldFn struct {
	p    *Pipeline
	plan *gc.Plan
}

// worldPublisher is one publisher device: the topics it feeds, in the order of its
// messages' values (the broker's sorted order of its topics).
type worldPublisher struct {
	pub    *client.Publisher
	topics []string
}

func (w *world) close() {
	for i := len(w.stop) - 1; i >= 0; i-- {
		w.stop[i]()
	}
	os.RemoveAll(w.dir)
}

// demoBrokerPermissions are the broker's NATS permissions: the JetStream API and acks, the
// devices' down subjects and the function outputs. It cannot publish as a device.
var demoBrokerPermissions = natsx.Permissions{
	PublishAllow:   []string{"$JS.API.>", "$JS.ACK.>", contract.DownSubjects, contract.OutSubjects},
	SubscribeAllow: []string{"_INBOX.>"},
}

func startWorld(ctx context.Context, o worldOptions) (w *world, err error) {
	w = &world{pwFiles: map[string]string{}}
	if w.dir, err = os.MkdirTemp("", "pps-demo-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
			w = nil
		}
	}()
	for _, p := range o.pipelines {
		plan, err := gc.Compile(p.Function.Circuit)
		if err != nil {
			return nil, err
		}
		w.fns = append(w.fns, worldFn{p: p, plan: plan})
	}

	// NATS: one account, the broker's user and one user per device (publishers and
	// subscribers) with exactly contract.DevicePermissions.
	brokerPW, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	perms := demoBrokerPermissions
	users := []natsx.User{{Name: contract.BrokerUser, Password: brokerPW, Permissions: &perms}}
	subFns := map[string][]string{}
	pubDevices := map[string]*Publisher{}
	pubTopics := map[string][]string{}
	var pubOrder []string
	for _, f := range w.fns {
		for _, s := range f.p.Contract.Subscribers {
			subFns[s] = append(subFns[s], f.p.Function.ID)
		}
		for i := range f.p.Publishers {
			pp := &f.p.Publishers[i]
			if _, ok := pubDevices[pp.ID()]; !ok {
				pubOrder = append(pubOrder, pp.ID())
			}
			pubDevices[pp.ID()] = pp
			if !slices.Contains(pubTopics[pp.ID()], pp.Topic) {
				pubTopics[pp.ID()] = append(pubTopics[pp.ID()], pp.Topic)
			}
		}
	}
	devUser := func(id string, fns []string) error {
		pw, err := randomHex(16)
		if err != nil {
			return err
		}
		path := filepath.Join(w.dir, id[:16]+".password")
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			return err
		}
		w.pwFiles[id] = path
		pub, sub := contract.DevicePermissions(id, fns)
		users = append(users, natsx.User{Name: id, Password: pw, Permissions: &natsx.Permissions{PublishAllow: pub, SubscribeAllow: sub}})
		return nil
	}
	for _, id := range pubOrder {
		if err := devUser(id, nil); err != nil {
			return nil, err
		}
	}
	for _, d := range o.subscribers {
		if err := devUser(d.ID(), subFns[d.ID()]); err != nil {
			return nil, err
		}
	}
	layout := natsx.Layout{Accounts: []natsx.Account{{Name: "PPS", JetStream: true, Users: users}}}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(layout.Render()); err != nil {
		return nil, fmt.Errorf("nats config: %w", err)
	}
	opts.ServerName, opts.Host, opts.Port, opts.NoSigs = "pps-demo", "127.0.0.1", server.RANDOM_PORT, true
	opts.JetStream, opts.StoreDir = true, filepath.Join(w.dir, "js")
	opts.MQTT.Host, opts.MQTT.Port = "127.0.0.1", server.RANDOM_PORT
	if w.ns, err = server.NewServer(opts); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	w.ns.Start()
	w.stop = append(w.stop, func() { w.ns.Shutdown(); w.ns.WaitForShutdown() })
	if !w.ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("embedded NATS not ready")
	}
	vz, err := w.ns.Varz(nil)
	if err != nil {
		return nil, err
	}
	w.mqttAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(vz.MQTT.Port))
	if w.nc, err = nats.Connect(w.ns.ClientURL(), nats.UserInfo(contract.BrokerUser, brokerPW)); err != nil {
		return nil, err
	}
	w.stop = append(w.stop, w.nc.Close)
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, err
	}

	// One Redis per trust domain. miniredis's TTLs advance only when told; a ticker moves
	// them with the wall clock, so retained seeds and labels expire as with redis-server.
	newRedis := func() (*redis.Client, error) {
		if len(o.redisAddrs) > 0 {
			rdb := redis.NewClient(&redis.Options{Addr: o.redisAddrs[len(w.rdbs)]})
			w.rdbs = append(w.rdbs, rdb)
			w.stop = append(w.stop, func() { rdb.Close() })
			return rdb, nil
		}
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("miniredis: %w", err)
		}
		w.redis = append(w.redis, m)
		w.stop = append(w.stop, m.Close)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		w.rdbs = append(w.rdbs, rdb)
		w.stop = append(w.stop, func() { rdb.Close() })
		return rdb, nil
	}
	grdb, err := newRedis()
	if err != nil {
		return nil, err
	}
	brdb, err := newRedis()
	if err != nil {
		return nil, err
	}
	ttlCtx, ttlStop := context.WithCancel(context.Background())
	var ttlDone sync.WaitGroup
	ttlDone.Go(func() {
		last := time.Now()
		// Every second: FastForward walks and sorts every key, which at a day of labels and
		// seeds costs milliseconds of CPU that would otherwise land inside the measured tick.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ttlCtx.Done():
				return
			case now := <-t.C:
				for _, m := range w.redis {
					m.FastForward(now.Sub(last))
				}
				last = now
			}
		}
	})
	w.stop = append(w.stop, func() { ttlStop(); ttlDone.Wait() })

	// The garbler: its file sealer and identity made for the run, served over mutual TLS.
	sealKey, idSeed := make([]byte, 32), make([]byte, 32)
	if _, err := rand.Read(sealKey); err != nil {
		return nil, err
	}
	if _, err := rand.Read(idSeed); err != nil {
		return nil, err
	}
	sealer, err := roles.NewFileSealer(sealKey, nil)
	if err != nil {
		return nil, err
	}
	signer, err := roles.NewFileSigner(idSeed)
	if err != nil {
		return nil, err
	}
	clear(sealKey)
	clear(idSeed)
	if w.garbler, err = roles.NewGarbler(roles.GarblerOptions{Redis: grdb, Sealer: sealer, Signer: signer, Registerer: o.garblerReg}); err != nil {
		return nil, err
	}
	gCA, err := newDemoCA("pps-demo garbler domain")
	if err != nil {
		return nil, err
	}
	bCA, err := newDemoCA("pps-demo broker domain")
	if err != nil {
		return nil, err
	}
	stls, ctls, err := linkTLS(w.dir, gCA, bCA)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w.gsrv = grpc.NewServer(grpc.Creds(credentials.NewTLS(stls)), grpc.MaxRecvMsgSize(256<<20), grpc.MaxSendMsgSize(1<<30))
	w.garbler.Register(w.gsrv)
	go w.gsrv.Serve(lis)
	w.stop = append(w.stop, w.gsrv.Stop)
	if w.cc, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ctls)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20))); err != nil {
		return nil, err
	}
	w.stop = append(w.stop, func() { w.cc.Close() })

	// The broker, on the simulated clock.
	w.day = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	w.clk = clock.NewManual(w.day.Add(time.Minute))
	var ps []contract.Pipeline
	for _, f := range w.fns {
		ps = append(ps, f.p.Contract)
	}
	if w.broker, err = roles.NewBroker(roles.BrokerOptions{NC: w.nc, JS: js, Redis: brdb, Garbler: ppsv1.NewGarblerClient(w.cc),
		Pipelines: ps, Workers: o.workers, Clock: w.clk, Check: o.check, WindowCheck: !o.noWindowCheck, Pregarble: !o.noPregarble, Registerer: o.brokerReg}); err != nil {
		return nil, err
	}
	bctx, bstop := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- w.broker.Run(bctx) }()
	w.stop = append(w.stop, func() { bstop(); <-bdone })
	if err := waitFor(ctx, "the broker ready (streams, consumers, functions registered with the garbler)", func() error {
		for _, c := range w.broker.Checks() {
			if err := c(ctx); err != nil {
				return err
			}
		}
		for _, f := range w.fns {
			if _, st, reason, _ := w.broker.FunctionStatus(f.p.Contract.Name); st != roles.FunctionRegistered {
				return fmt.Errorf("function %s %s", st, reason)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// Publishers set up through the garbler's handshake, relayed by the broker.
	identity := ed25519.PublicKey(w.garbler.Identity())
	for _, id := range pubOrder {
		pp := pubDevices[id]
		var fns, modes []string
		for _, f := range w.fns {
			if slices.ContainsFunc(f.p.Publishers, func(x Publisher) bool { return x.ID() == id }) {
				fns = append(fns, f.p.Function.ID)
				if !slices.Contains(modes, f.p.Contract.Mode) {
					modes = append(modes, f.p.Contract.Mode)
				}
			}
		}
		d := client.Device{Key: pp.Key, Garbler: identity}
		pub, err := client.DialPublisher(ctx, d, client.PublisherOptions{Options: w.clientOptions(id), Modes: modes})
		if err != nil {
			return nil, fmt.Errorf("publisher %s: %w", pp.Topic, err)
		}
		w.stop = append(w.stop, pub.Close)
		if err := pub.Setup(ctx, contract.Policy{Fns: fns}); err != nil {
			return nil, fmt.Errorf("publisher %s setup: %w", pp.Topic, err)
		}
		topics := slices.Clone(pubTopics[id])
		slices.Sort(topics)
		w.publishers = append(w.publishers, &worldPublisher{pub: pub, topics: topics})
	}
	for _, d := range o.subscribers {
		d.Garbler = identity
		s, err := client.DialSubscriber(ctx, *d, client.SubscriberOptions{Options: w.clientOptions(d.ID())})
		if err != nil {
			return nil, fmt.Errorf("subscriber: %w", err)
		}
		w.stop = append(w.stop, s.Close)
		w.subs = append(w.subs, s)
	}
	return w, nil
}

func (w *world) clientOptions(id string) client.Options {
	return client.Options{Addr: w.mqttAddr, PasswordFile: w.pwFiles[id], ConnectTimeout: 30 * time.Second}
}

// subscribe subscribes device d (one of the world's subscribers) to fns, in order.
func (w *world) subscribe(ctx context.Context, d *client.Device, fns ...*dsl.Function) ([]*client.Feed, error) {
	i := slices.IndexFunc(w.subs, func(s *client.Subscriber) bool { return s.ID() == d.ID() })
	if i < 0 {
		return nil, errors.New("not a subscriber of the world")
	}
	var feeds []*client.Feed
	for _, f := range fns {
		feed, err := w.subs[i].Subscribe(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("subscribe to %s: %w", f.ID[:12], err)
		}
		feeds = append(feeds, feed)
	}
	return feeds, nil
}

// published is the number of publish messages the broker stored.
func (w *world) published() int {
	return int(testutil.ToFloat64(w.broker.Metrics().Published))
}

// publishDay publishes ds's series, one round per value, every publisher concurrently, and
// waits until the broker has stored every message.
func (w *world) publishDay(ctx context.Context, ds *Dataset) error {
	before := w.published()
	total := 0
	errs := make([]error, len(w.publishers))
	var wg sync.WaitGroup
	for i, p := range w.publishers {
		var series [][]pps.Fixed
		for _, topic := range p.topics {
			s := ds.Topic(topic)
			if s == nil {
				return fmt.Errorf("dataset %s has no topic %s", ds.Name, topic)
			}
			series = append(series, s.Values)
		}
		total += len(series[0])
		wg.Go(func() {
			values := make([]pps.Fixed, len(series))
			for t := range series[0] {
				for v := range series {
					values[v] = series[v][t]
				}
				if _, err := p.pub.Publish(ctx, values); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return waitFor(ctx, "the broker to store the day's publishes", func() error {
		if got := w.published() - before; got < total {
			return fmt.Errorf("%d of %d stored", got, total)
		}
		return nil
	})
}

// tick ends the simulated day: once the broker's scheduler waits for midnight, the clock
// moves there and every pipeline executes. It returns, per feed, the subscriber's next
// output and the broker's record of that execution, and the wall time from the tick to the
// last output decoded.
func (w *world) tick(ctx context.Context, feeds []*client.Feed) ([]*client.Output, []roles.Execution, time.Duration, error) {
	midnight := w.day.Add(24 * time.Hour)
	if err := waitFor(ctx, "the scheduler to wait for the day's end", func() error {
		if w.clk.Waiting(midnight) < len(w.fns) {
			return errors.New("not waiting yet")
		}
		return nil
	}); err != nil {
		return nil, nil, 0, err
	}
	t0 := time.Now()
	w.clk.Set(midnight)
	outs := make([]*client.Output, len(feeds))
	for i, f := range feeds {
		o, err := f.Next(ctx)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("subscriber: %w", err)
		}
		outs[i] = o
	}
	latency := time.Since(t0)
	// The next day's values arrive during the next day.
	w.day = midnight
	w.clk.Set(midnight.Add(time.Minute))
	recs := make([]roles.Execution, len(feeds))
	for i, o := range outs {
		if o.Insufficient {
			return outs, nil, latency, fmt.Errorf("execution %s: insufficient inputs (%d valid)", o.Exec, o.Valid)
		}
		if err := waitFor(ctx, "the broker's record of the execution", func() error {
			es, err := w.broker.Store().Executions(ctx, o.Fn)
			if err != nil {
				return err
			}
			for _, e := range es {
				if e.Exec == o.Exec {
					recs[i] = e
					return nil
				}
			}
			return errors.New("not recorded yet")
		}); err != nil {
			return outs, nil, latency, err
		}
	}
	return outs, recs, latency, nil
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// --- The simulated clock of the broker's schedule. ---

// --- The link's PKI: one CA per trust domain, made for the run. ---

type demoCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newDemoCA(name string) (*demoCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &demoCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// issue returns a leaf certificate and its key, PEM: a server certificate for 127.0.0.1 or
// a client certificate.
func (ca *demoCA) issue(cn string, server bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// linkTLS issues the garbler's server and the broker's client certificates and builds both
// ends' configurations with roles.ServerTLS and roles.ClientTLS (the link's one TLS policy:
// TLS 1.3, each domain trusting only the other's CA). Those read files, as from mounted
// Secrets, so the PEMs are written to dir (0600) for them.
func linkTLS(dir string, gCA, bCA *demoCA) (server, brokerTLS *tls.Config, err error) {
	write := func(name string, b []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, b, 0o600)
	}
	files := map[string]string{}
	for name, b := range map[string][]byte{"garbler-ca.crt": gCA.pem, "broker-ca.crt": bCA.pem} {
		if files[name], err = write(name, b); err != nil {
			return nil, nil, err
		}
	}
	for _, leaf := range []struct {
		name   string
		ca     *demoCA
		server bool
	}{{"garbler", gCA, true}, {"broker", bCA, false}} {
		c, k, err := leaf.ca.issue("pps-"+leaf.name, leaf.server)
		if err != nil {
			return nil, nil, err
		}
		if files[leaf.name+".crt"], err = write(leaf.name+".crt", c); err != nil {
			return nil, nil, err
		}
		if files[leaf.name+".key"], err = write(leaf.name+".key", k); err != nil {
			return nil, nil, err
		}
	}
	if server, err = roles.ServerTLS(files["garbler.crt"], files["garbler.key"], files["broker-ca.crt"]); err != nil {
		return nil, nil, err
	}
	if brokerTLS, err = roles.ClientTLS(files["broker.crt"], files["broker.key"], files["garbler-ca.crt"], ""); err != nil {
		return nil, nil, err
	}
	return server, brokerTLS, nil
}
