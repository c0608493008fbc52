package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
	"github.com/obscura-iot/obscura/services/pkg/pdasvc"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// runDemo runs one aggregation in one process: an embedded NATS with the two trust-domain
// accounts, every role, in-memory twins of the Redis stores, and simulated participants
// (vendors reporting suspect source IPs; a few attacker IPs hit many of them).
func runDemo(args []string) error {
	f := newFlags("demo")
	var (
		people int
		tau    int
		benign int
		shards int
	)
	f.Int(&people, "participants", 8, "participants")
	f.Int(&tau, "threshold", 3, "τ")
	f.Int(&benign, "benign", 60, "benign IPs per participant")
	f.Int(&shards, "shards", 2, "DB shards")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	if people < 2 || tau < 1 || shards < 1 || benign < 0 {
		return configErr(errors.New("-participants ≥ 2, -threshold ≥ 1, -shards ≥ 1 and -benign ≥ 0 are required"))
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "pda-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pw := func(u string) string { return u + "-demo" }
	opts := &server.Options{}
	if err := opts.ProcessConfigString(pdasvc.AccountsConfig(pw)); err != nil {
		return err
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs, opts.ServerName = "127.0.0.1", -1, true, filepath.Join(dir, "js"), true, "pda-demo"
	ns, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("embedded NATS not ready")
	}
	connect := func(u string) (jetstream.JetStream, *nats.Conn, error) {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(u, pw(u)))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return js, nc, err
	}
	proxyJS, pnc, err := connect(pdasvc.ProxyUser)
	if err != nil {
		return err
	}
	defer pnc.Close()
	dbJS, dnc, err := connect(pdasvc.DBUser)
	if err != nil {
		return err
	}
	defer dnc.Close()
	if err := pdasvc.EnsureProxyDomain(ctx, proxyJS, 48*time.Hour); err != nil {
		return err
	}
	if err := pdasvc.EnsureDBDomain(ctx, dbJS); err != nil {
		return err
	}
	g, _ := pda.NewGroup(pda.Ristretto255)
	psec, err := pdasvc.GenerateProxySecrets(g)
	if err != nil {
		return err
	}
	dsec, err := pdasvc.GenerateDBSecrets(g)
	if err != nil {
		return err
	}
	job := &pdasvc.Job{DeploymentID: "demo", Group: pda.Ristretto255, Threshold: uint32(tau), CountMode: pda.CountDistinctParticipants,
		Chunks: 1, DBKey: dsec.Key.PublicKey(), ProxyKey: psec.Keys.Oracle.PublicKey(), WindowLength: 24 * time.Hour, Grace: 200 * time.Millisecond}
	if err := job.Validate(); err != nil {
		return err
	}
	var ids []string
	for i := range shards {
		ids = append(ids, "shard-"+strconv.Itoa(i))
	}
	rg, _ := ring.New(1, ids)
	rkv, _ := dbJS.KeyValue(ctx, pdasvc.RingBucket)
	if err := pdasvc.PublishRing(ctx, rkv, rg); err != nil {
		return err
	}
	m := pdasvc.NewMetrics(nil)
	local := &pdasvc.Local{Job: job, Proxy: psec, DB: dsec, ProxyJS: proxyJS, DBJS: dbJS, Log: telemetry.Discard(), M: m}
	defer local.StopAll()
	pki, err := pdasvc.NewPKI()
	if err != nil {
		return err
	}
	allowed := map[string]bool{}
	var names []string
	for i := range people {
		n := fmt.Sprintf("vendor-%d", i)
		names = append(names, n)
		allowed[n] = true
	}
	srvTLS, err := pki.ServerTLS()
	if err != nil {
		return err
	}
	url, err := local.StartIngress(ctx, "ingress", pdasvc.IngressConfig{Participants: allowed, Quota: 100000, Rate: 100000, MaxBatch: 1000, SessionTTL: time.Hour},
		pdasvc.NewMemoryProxyStore(), srvTLS)
	if err != nil {
		return err
	}
	mixer, err := local.StartMixer(ctx, "mixer", pdasvc.MixerConfig{ChunkItems: 500, Poll: time.Hour})
	if err != nil {
		return err
	}
	local.StartOracle("oracle")
	if err := local.StartFrontend(ctx, "frontend", pdasvc.FrontendConfig{Workers: 2}); err != nil {
		return err
	}
	stores := map[string]*pdasvc.MemoryShardStore{}
	for _, id := range ids {
		stores[id] = pdasvc.NewMemoryShardStore()
		if err := local.StartShard(ctx, id, pdasvc.ShardConfig{EvalRetry: 300 * time.Millisecond}, stores[id]); err != nil {
			return err
		}
	}

	// Attacker IP j hits the first reporters(j) participants.
	attackers := []string{"203.0.113.7", "203.0.113.23", "198.51.100.66", "192.0.2.200", "203.0.113.99", "198.51.100.1"}
	reporters := func(j int) int { return min(people, []int{people, tau + 2, tau, tau - 1, 2, 1}[j]) }
	truth := map[string]int{}
	obs := make([][]pda.Observation, people)
	rnd := rand.New(rand.NewPCG(1, 2))
	for j, a := range attackers {
		for i := range reporters(j) {
			k, _ := pda.ParseIPKey(a)
			obs[i] = append(obs[i], pda.Observation{Key: k, Value: 1})
			truth[a]++
		}
	}
	for i := range obs {
		for range benign {
			k, _ := pda.ParseIPKey(fmt.Sprintf("10.%d.%d.%d", rnd.IntN(256), rnd.IntN(256), 1+rnd.IntN(254)))
			obs[i] = append(obs[i], pda.Observation{Key: k, Value: 1})
		}
	}
	fmt.Printf("PDA demo: %d participants (vendors), τ = %d, %d DB shards, count mode distinct_participants\n", people, tau, shards)
	fmt.Println("attacker IPs and how many participants saw each (ground truth, never sent in clear):")
	for _, a := range attackers {
		fmt.Printf("  %-15s %d\n", a, truth[a])
	}
	w := job.WindowAt(time.Now())
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, 0
	for i := range obs {
		total += len(obs[i])
	}
	bar := progressBar(os.Stdout)
	errs := make(chan error, people)
	for i, name := range names {
		wg.Go(func() {
			tc, err := pki.ClientTLS(name)
			if err != nil {
				errs <- err
				return
			}
			c := pdasvc.NewClient(url, tc)
			c.Batch = 25
			last := 0
			_, err = c.Submit(ctx, obs[i], func(d, _ int) {
				mu.Lock()
				done += d - last
				last = d
				bar(done, total)
				mu.Unlock()
			})
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("submitted %d items in %s; sealing window %d (shuffle, forward, evaluate, reveal)…\n", total, time.Since(start).Round(time.Millisecond), w)
	if err := mixer.Seal(ctx, w); err != nil {
		return err
	}
	res, err := waitResult(ctx, dbJS, w)
	if err != nil {
		return err
	}
	fmt.Printf("\nrevealed (published on %s and in KV %s/%d):\n", pdasvc.ResultsSubject(w), pdasvc.ResultsBucket, w)
	for _, k := range res.Revealed {
		fmt.Printf("  %-15s reported by %d participants\n", k.Key, k.Count)
	}
	rows, hist := 0, map[int]int{}
	for _, s := range stores {
		cs, _ := s.Counts(ctx, w)
		rows += len(cs)
		for _, c := range cs {
			hist[c]++
		}
	}
	counts := make([]int, 0, len(hist))
	for c := range hist {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	fmt.Println("\nwhat each party saw:")
	fmt.Printf("  proxy ingress: %.0f authenticated sessions, %.0f accepted items as ciphertexts + proofs; no plaintext key, no blinded key\n",
		testutil.ToFloat64(m.Sessions), testutil.ToFloat64(m.Items.WithLabelValues("accepted")))
	fmt.Printf("  proxy mixer:   %.0f re-randomised items, shuffled as one window, forwarded without any participant pseudonym\n", testutil.ToFloat64(m.Mixed))
	fmt.Printf("  DB:            %d blinded rows (pseudorandom Y), keyless count histogram:", rows)
	for _, c := range counts {
		fmt.Printf(" %d×%d", hist[c], c)
	}
	fmt.Printf("; no participant identity, session or timestamp\n")
	fmt.Printf("  proxy oracle:  %.0f reveal requests (rows with ≥ τ participants only), %.0f consistent entries; never a row below τ\n",
		testutil.ToFloat64(m.Oracle.WithLabelValues("answered")), testutil.ToFloat64(m.Consistent))
	return nil
}

func waitResult(ctx context.Context, js jetstream.JetStream, w uint64) (*pdasvc.WindowResult, error) {
	kv, err := js.KeyValue(ctx, pdasvc.ResultsBucket)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if e, err := kv.Get(ctx, strconv.FormatUint(w, 10)); err == nil {
			var r pdasvc.WindowResult
			return &r, json.Unmarshal(e.Value(), &r)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no result for window %d: %w", w, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
