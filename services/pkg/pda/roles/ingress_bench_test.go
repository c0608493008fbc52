package roles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// proxyBenchEnv is the proxy domain alone (its NATS account, JetStream domain and Redis),
// enough for the ingress path BenchmarkServiceProxy measures.
type proxyBenchEnv struct {
	ctx        context.Context
	js         jetstream.JetStream
	job        *Job
	sec        *ProxySecrets
	proxyRedis *testenv.Redis
	ingressCfg IngressConfig
}

func newProxyBenchEnv(b testing.TB) *proxyBenchEnv {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	pw := func(u string) string { return u + "-secret" }
	n := testenv.StartNATS(b, testenv.WithNATSConfig(contract.AccountsConfig(pw)))
	js, err := jetstream.New(n.Connect(b, nats.UserInfo(contract.ProxyUser, pw(contract.ProxyUser))))
	if err != nil {
		b.Fatal(err)
	}
	if err := EnsureProxyDomain(ctx, js, 48*time.Hour); err != nil {
		b.Fatal(err)
	}
	g, _ := pda.NewGroup(pda.Ristretto255)
	psec, err := GenerateProxySecrets(g)
	if err != nil {
		b.Fatal(err)
	}
	dsec, err := GenerateDBSecrets(g)
	if err != nil {
		b.Fatal(err)
	}
	job := &Job{DeploymentID: "it", Group: pda.Ristretto255, Threshold: 2, CountMode: pda.CountDistinctParticipants, Chunks: 1,
		DBKey: dsec.Key.PublicKey(), ProxyKey: psec.Keys.Oracle.PublicKey(), WindowLength: 24 * time.Hour, Grace: 300 * time.Millisecond}
	if err := job.Validate(); err != nil {
		b.Fatal(err)
	}
	return &proxyBenchEnv{ctx: ctx, js: js, job: job, sec: psec, proxyRedis: testenv.StartRedis(b),
		ingressCfg: IngressConfig{Participants: map[string]bool{"participant-0": true}, Quota: 10000, Rate: 100000, MaxBatch: 1000, SessionTTL: time.Hour}}
}

func (e *proxyBenchEnv) window() uint64 { return e.job.WindowAt(time.Now()) }

// BenchmarkServiceProxy measures the proxy ingress path per key, without HTTP/TLS: replay
// check and quota/rate admission in Redis, parse, proof verification, EOPRF, both
// re-randomisations, dedup tag, and the durable pool publish. Batches of 500 items.
func BenchmarkServiceProxy(b *testing.B) {
	e := newProxyBenchEnv(b)
	g, err := NewIngress(e.ctx, e.ingressCfg, e.job, e.sec, e.js, NewRedisProxyStore(e.proxyRedis.Client()), slog.New(slog.DiscardHandler), NewMetrics(nil))
	if err != nil {
		b.Fatal(err)
	}
	w := e.window()
	suite, _ := e.job.Suite(w)
	p, _ := g.proxy(w)
	const batch = 500
	type req struct {
		sid   pda.SessionID
		items [][]byte // the request body, cut into submissions
	}
	mk := func(i int) req {
		var r req
		_, _ = rand.Read(r.sid[:])
		part := pda.NewParticipant(suite, nil)
		var items [][]byte
		for j := range batch {
			k, _ := pda.ParseIPKey(fmt.Sprintf("10.%d.%d.%d", i%256, j/256, j%256))
			it, err := part.Item(r.sid, uint32(j), pda.Observation{Key: k, Value: 1})
			if err != nil {
				b.Fatal(err)
			}
			items = append(items, it)
		}
		r.items = items
		_, _ = e.proxyRedis.Client().Set(e.ctx, sessionKey(hex.EncodeToString(r.sid[:])), "x|"+strconv.FormatUint(w, 10), time.Hour).Result()
		return r
	}
	// Scalar multiplications per key at the proxy (one 500-item request, whose proofs are
	// batch-verified, counted on this goroutine).
	one := mk(9999)
	counts := pda.CountMultiplications(func() {
		g.ingest(e.ctx, p, suite, "participant-0", "pid", hex.EncodeToString(one.sid[:]), one.sid[:], w, one.items)
	})
	reqs := make([]req, 0, b.N)
	for i := range b.N {
		reqs = append(reqs, mk(i))
	}
	b.ResetTimer()
	cpu0 := testenv.ProcessCPU()
	start := time.Now()
	for i := range b.N {
		r := reqs[i]
		resp, code := g.ingest(e.ctx, p, suite, "participant-0", "pid", hex.EncodeToString(r.sid[:]), r.sid[:], w, r.items)
		if code != 200 || resp.Accepted != batch {
			b.Fatalf("ingest: HTTP %d, accepted %d, reasons %v", code, resp.Accepted, resp.Reasons)
		}
	}
	el, cpu := time.Since(start), testenv.ProcessCPU()-cpu0
	b.StopTimer()
	keys := float64(b.N * batch)
	b.ReportMetric(keys/el.Seconds(), "keys/s")
	b.ReportMetric(keys/cpu.Seconds(), "keys/s/core")
	b.ReportMetric(float64(counts.Variable)/batch, "var/key")
	b.ReportMetric(float64(counts.Fixed)/batch, "gen/key")
	b.ReportMetric(float64(counts.Table)/batch, "tab/key")
	b.ReportMetric(float64(counts.MSM)/batch, "msm/key")
}
