package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// captured is one message a trust domain saw.
type captured struct {
	subject string
	header  nats.Header
	data    []byte
}

// domainCapture records every message published in one NATS account (T-PRIV "domain
// capture"), plus, at assertion time, that domain's Redis contents and the logs.
type domainCapture struct {
	mu   sync.Mutex
	msgs []captured
}

func (c *domainCapture) add(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, captured{subject: m.Subject, header: m.Header, data: bytes.Clone(m.Data)})
}

func (c *domainCapture) snapshot() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]captured(nil), c.msgs...)
}

// blobs returns every byte string of the capture: subjects, header names and values, data.
func (c *domainCapture) blobs() [][]byte {
	var out [][]byte
	for _, m := range c.snapshot() {
		out = append(out, []byte(m.subject), m.data)
		for k, vs := range m.header {
			out = append(out, []byte(k))
			for _, v := range vs {
				out = append(out, []byte(v))
			}
		}
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

type envOpts struct {
	tau    uint32
	mode   pda.CountMode
	values []uint16
	shards []string
	quota  int
	people int
	// window is the job's window length. Zero: 24 h, a window that never ends during a
	// test, which seals by hand (env.sealAndWait); otherwise the mixer seals each window
	// itself once it has ended, and the proxy domain keeps the pool for PoolRetention.
	window time.Duration
}

type env struct {
	t          testing.TB
	tb         testing.TB
	ctx        context.Context
	nats       *testenv.NATS
	local      *Local
	job        *roles.Job
	pki        *roles.PKI
	proxyRedis *testenv.Redis
	shardRedis map[string]*testenv.Redis
	proxyCap   *domainCapture
	dbCap      *domainCapture
	logs       *syncBuffer
	url        string
	mixer      *roles.Mixer
	poll       time.Duration // the mixer's
	ingressCfg roles.IngressConfig
	people     []string
}

func password(u string) string { return u + "-secret" }

func newEnv(t *testing.T, o envOpts) *env { return newEnvTB(t, o) }

func newEnvTB(t testing.TB, o envOpts) *env {
	t.Helper()
	if o.tau == 0 {
		o.tau = 3
	}
	if o.mode == 0 {
		o.mode = pda.CountDistinctParticipants
	}
	if len(o.shards) == 0 {
		o.shards = []string{"a", "b"}
	}
	if o.quota == 0 {
		o.quota = 10000
	}
	if o.people == 0 {
		o.people = 6
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(password)))
	proxyNC := n.Connect(t, nats.UserInfo(contract.ProxyUser, password(contract.ProxyUser)))
	dbNC := n.Connect(t, nats.UserInfo(contract.DBUser, password(contract.DBUser)))
	proxyJS, _ := jetstream.New(proxyNC)
	dbJS, _ := jetstream.New(dbNC)
	e := &env{t: t, tb: t, ctx: ctx, nats: n, proxyCap: &domainCapture{}, dbCap: &domainCapture{}, logs: &syncBuffer{}, shardRedis: map[string]*testenv.Redis{}}
	for _, c := range []struct {
		user string
		cap  *domainCapture
	}{{contract.ProxyUser, e.proxyCap}, {contract.DBUser, e.dbCap}} {
		nc := n.Connect(t, nats.UserInfo(c.user, password(c.user)))
		if _, err := nc.Subscribe(">", c.cap.add); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := pda.NewGroup(pda.Ristretto255)
	var retain time.Duration
	psec, err := roles.GenerateProxySecrets(g)
	if err != nil {
		t.Fatal(err)
	}
	dsec, err := roles.GenerateDBSecrets(g)
	if err != nil {
		t.Fatal(err)
	}
	e.job = &roles.Job{DeploymentID: "it", Group: pda.Ristretto255, Threshold: o.tau, CountMode: o.mode, Chunks: 1, Values: o.values,
		DBKey: dsec.Key.PublicKey(), ProxyKey: psec.Keys.Oracle.PublicKey(), WindowLength: 24 * time.Hour, Grace: 300 * time.Millisecond}
	retain, e.poll = 48*time.Hour, time.Hour
	if o.window > 0 {
		e.job.WindowLength, e.job.Grace = o.window, time.Second
		retain, e.poll = e.job.PoolRetention(), 100*time.Millisecond
	}
	if err := e.job.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := roles.EnsureProxyDomain(ctx, proxyJS, retain); err != nil {
		t.Fatal(err)
	}
	if err := roles.EnsureDBDomain(ctx, dbJS); err != nil {
		t.Fatal(err)
	}
	e.setRing(1, o.shards)
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.local = &Local{Job: e.job, Proxy: psec, DB: dsec, ProxyJS: proxyJS, DBJS: dbJS, Log: log, M: roles.NewMetrics(nil)}
	t.Cleanup(e.local.StopAll)
	e.pki, err = roles.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for i := range o.people {
		p := fmt.Sprintf("participant-%d", i)
		e.people = append(e.people, p)
		allowed[p] = true
	}
	e.proxyRedis = testenv.StartRedis(t)
	e.ingressCfg = roles.IngressConfig{Participants: allowed, Quota: o.quota, Rate: 100000, MaxBatch: 1000, SessionTTL: time.Hour}
	e.startProxy()
	e.local.StartOracle("oracle")
	if err := e.local.StartFrontend(ctx, "frontend", roles.FrontendConfig{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for _, s := range o.shards {
		e.startShard(s)
	}
	return e
}

func (e *env) setRing(version uint64, shards []string) {
	e.t.Helper()
	r, err := ring.New(version, shards)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := e.local0JS().KeyValue(e.ctx, contract.RingBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := roles.PublishRing(e.ctx, kv, r); err != nil {
		e.t.Fatal(err)
	}
}

// local0JS is the DB account's JetStream (usable before Local exists).
func (e *env) local0JS() jetstream.JetStream {
	if e.local != nil {
		return e.local.DBJS
	}
	nc := e.nats.Connect(e.t, nats.UserInfo(contract.DBUser, password(contract.DBUser)))
	js, _ := jetstream.New(nc)
	return js
}

// startProxy starts the proxy's ingress and mixer (the oracle is separate).
func (e *env) startProxy() {
	e.t.Helper()
	tlsCfg, err := e.pki.ServerTLS()
	if err != nil {
		e.t.Fatal(err)
	}
	e.url, err = e.local.StartIngress(e.ctx, "ingress", e.ingressCfg, roles.NewRedisProxyStore(e.proxyRedis.Client()), tlsCfg)
	if err != nil {
		e.t.Fatal(err)
	}
	// With the 24 h window, manual seals only: Poll is long, and the window does not end
	// during a test.
	e.mixer, err = e.local.StartMixer(e.ctx, "mixer", roles.MixerConfig{ChunkItems: 16, Poll: e.poll})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) stopProxy() {
	_ = e.local.Stop("ingress")
	_ = e.local.Stop("mixer")
}

func (e *env) startShard(id string) {
	e.t.Helper()
	r := e.shardRedis[id]
	if r == nil {
		r = testenv.StartRedis(e.t)
		e.shardRedis[id] = r
	}
	if err := e.local.StartShard(e.ctx, id, roles.ShardConfig{EvalRetry: 300 * time.Millisecond}, roles.NewRedisShardStore(r.Client())); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) client(who string) *client.Client {
	e.t.Helper()
	tlsCfg, err := e.pki.ClientTLS(who)
	if err != nil {
		e.t.Fatal(err)
	}
	c := client.NewClient(e.url, tlsCfg)
	c.Batch = 64
	return c
}

// submit sends obs as participant who in one session and requires all to be accepted.
func (e *env) submit(who string, obs ...pda.Observation) {
	e.t.Helper()
	rep, err := e.client(who).Submit(e.ctx, obs, nil)
	if err != nil {
		e.t.Fatalf("submit as %s: %v", who, err)
	}
	if rep.Accepted != len(obs) {
		e.t.Fatalf("submit as %s: accepted %d of %d: %v", who, rep.Accepted, len(obs), rep.Rejected)
	}
}

func (e *env) window() uint64 { return e.job.WindowAt(time.Now()) }

// sealAndWait seals the current window and waits for the merged result.
func (e *env) sealAndWait(w uint64) contract.WindowResult {
	e.t.Helper()
	if err := e.mixer.Seal(e.ctx, w); err != nil {
		e.t.Fatalf("seal: %v", err)
	}
	return e.waitResult(w)
}

func (e *env) waitResult(w uint64) contract.WindowResult {
	e.t.Helper()
	kv, err := e.local.DBJS.KeyValue(e.ctx, contract.ResultsBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	var res contract.WindowResult
	testenv.Eventually(e.t, 60*time.Second, "window result", func() error {
		en, err := kv.Get(e.ctx, strconv.FormatUint(w, 10))
		if err != nil {
			return err
		}
		return json.Unmarshal(en.Value(), &res)
	})
	return res
}

func ip(t testing.TB, s string) pda.Observation {
	k, err := pda.ParseIPKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return pda.Observation{Key: k, Value: 1}
}

func canary(t testing.TB) (pda.Observation, []byte) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		t.Fatal(err)
	}
	k, err := pda.OpaqueKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return pda.Observation{Key: k, Value: 1}, b
}

// redisDump returns every key and value of a Redis, type by type.
func redisDump(t testing.TB, c *redis.Client) [][]byte {
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, k := range keys {
		out = append(out, []byte(k))
		switch c.Type(ctx, k).Val() {
		case "string":
			out = append(out, []byte(c.Get(ctx, k).Val()))
		case "set":
			for _, m := range c.SMembers(ctx, k).Val() {
				out = append(out, []byte(m))
			}
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				out = append(out, []byte(f), []byte(v))
			}
		case "list":
			for _, v := range c.LRange(ctx, k, 0, -1).Val() {
				out = append(out, []byte(v))
			}
		}
	}
	return out
}

func containsAny(hay [][]byte, needle []byte) bool {
	for _, h := range hay {
		if bytes.Contains(h, needle) {
			return true
		}
	}
	return false
}
