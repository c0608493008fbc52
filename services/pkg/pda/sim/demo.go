package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// DemoOptions configure RunDemo: one aggregation in one process.
type DemoOptions struct {
	Participants int // simulated vendors, ≥ 2
	Threshold    int // τ, ≥ 1
	Benign       int // benign IPs per participant (each seen by that participant only), ≥ 0
	Shards       int // DB shards, ≥ 1
	// Registerer, when set, holds every role's metrics (e2e/dashboards scrapes them); nil
	// registers none.
	Registerer prometheus.Registerer
}

// DefaultDemoOptions are the settings of `pda demo` without flags.
func DefaultDemoOptions() DemoOptions {
	return DemoOptions{Participants: 8, Threshold: 3, Benign: 60, Shards: 2}
}

// Validate checks the options.
func (o DemoOptions) Validate() error {
	if o.Participants < 2 || o.Threshold < 1 || o.Shards < 1 || o.Benign < 0 {
		return errors.New("participants ≥ 2, threshold ≥ 1, shards ≥ 1 and benign ≥ 0 are required")
	}
	return nil
}

// DemoKey is a key with the number of distinct participants that reported it.
type DemoKey struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// DemoSummary is what one demo aggregation did. Expected, Withheld and NotRevealed come
// from the simulation's ground truth, which the services never see in clear.
type DemoSummary struct {
	Participants int    `json:"participants"`
	Threshold    int    `json:"threshold"`
	Shards       int    `json:"shards"`
	Window       uint64 `json:"window"`
	// Submissions is the number of items the participants submitted.
	Submissions int `json:"submissions"`
	// Sessions and Accepted are the proxy ingress's counters.
	Sessions int `json:"sessions"`
	Accepted int `json:"accepted"`
	// Revealed is the published result (sorted by key).
	Revealed []contract.RevealedKey `json:"revealed"`
	// Attackers are the simulated attacker IPs with their true counts, in the order printed.
	Attackers []DemoKey `json:"attackers"`
	// Expected are the keys that at least τ participants reported (sorted by key).
	Expected []DemoKey `json:"expected"`
	// Withheld are the attacker IPs below τ (not revealed), with their true counts.
	Withheld []DemoKey `json:"withheld"`
	// NotRevealed counts the keys below τ by their true count (count → keys), benign included.
	NotRevealed map[int]int `json:"not_revealed_by_count"`
	// DBRows and DBHistogram are what the DB holds: blinded rows and their keyless counts.
	DBRows      int         `json:"db_rows"`
	DBHistogram map[int]int `json:"db_histogram"`
	Seconds     float64     `json:"seconds"`
}

// Exact reports whether the revealed keys are exactly the keys at least τ participants
// reported, each with its true count.
func (s *DemoSummary) Exact() bool {
	if len(s.Revealed) != len(s.Expected) {
		return false
	}
	for i, r := range s.Revealed {
		if r.Key != s.Expected[i].Key || r.Count != s.Expected[i].Count {
			return false
		}
	}
	return true
}

// demoAttackers are the attacker IPs; attacker j hits the first demoReporters(j) participants.
var demoAttackers = []string{"203.0.113.7", "203.0.113.23", "198.51.100.66", "192.0.2.200", "203.0.113.99", "198.51.100.1"}

func demoReporters(j, people, tau int) int {
	return max(0, min(people, []int{people, tau + 2, tau, tau - 1, 2, 1}[j]))
}

// RunDemo runs one aggregation in one process and narrates it on out: an embedded NATS
// server (its own, on 127.0.0.1 with random ports) with the two trust-domain accounts,
// every role, in-memory twins of the Redis stores, and simulated participants (vendors
// reporting suspect source IPs; a few attacker IPs hit many of them). It returns when the
// window's result is published.
func RunDemo(ctx context.Context, o DemoOptions, out io.Writer) (*DemoSummary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	people, tau, shards, benign := o.Participants, o.Threshold, o.Shards, o.Benign
	dir, err := os.MkdirTemp("", "pda-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pw := func(u string) string { return u + "-demo" }
	opts := &server.Options{}
	if err := opts.ProcessConfigString(contract.AccountsConfig(pw)); err != nil {
		return nil, err
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs, opts.ServerName = "127.0.0.1", -1, true, filepath.Join(dir, "js"), true, "pda-demo"
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("embedded NATS not ready")
	}
	connect := func(u string) (jetstream.JetStream, *nats.Conn, error) {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(u, pw(u)))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return js, nc, err
	}
	proxyJS, pnc, err := connect(contract.ProxyUser)
	if err != nil {
		return nil, err
	}
	defer pnc.Close()
	dbJS, dnc, err := connect(contract.DBUser)
	if err != nil {
		return nil, err
	}
	defer dnc.Close()
	if err := roles.EnsureProxyDomain(ctx, proxyJS, 48*time.Hour); err != nil {
		return nil, err
	}
	if err := roles.EnsureDBDomain(ctx, dbJS); err != nil {
		return nil, err
	}
	g, _ := pda.NewGroup(pda.Ristretto255)
	psec, err := roles.GenerateProxySecrets(g)
	if err != nil {
		return nil, err
	}
	dsec, err := roles.GenerateDBSecrets(g)
	if err != nil {
		return nil, err
	}
	job := &roles.Job{DeploymentID: "demo", Group: pda.Ristretto255, Threshold: uint32(tau), CountMode: pda.CountDistinctParticipants,
		Chunks: 1, DBKey: dsec.Key.PublicKey(), ProxyKey: psec.Keys.Oracle.PublicKey(), WindowLength: 24 * time.Hour, Grace: 200 * time.Millisecond}
	if err := job.Validate(); err != nil {
		return nil, err
	}
	var ids []string
	for i := range shards {
		ids = append(ids, "shard-"+strconv.Itoa(i))
	}
	rg, err := ring.New(1, ids)
	if err != nil {
		return nil, err
	}
	rkv, err := dbJS.KeyValue(ctx, contract.RingBucket)
	if err != nil {
		return nil, err
	}
	if err := roles.PublishRing(ctx, rkv, rg); err != nil {
		return nil, err
	}
	m := roles.NewMetrics(o.Registerer)
	local := &Local{Job: job, Proxy: psec, DB: dsec, ProxyJS: proxyJS, DBJS: dbJS, Log: telemetry.Discard(), M: m}
	defer local.StopAll()
	pki, err := roles.NewPKI()
	if err != nil {
		return nil, err
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
		return nil, err
	}
	url, err := local.StartIngress(ctx, "ingress", roles.IngressConfig{Participants: allowed, Quota: 100000, Rate: 100000, MaxBatch: 1000, SessionTTL: time.Hour},
		roles.NewMemoryProxyStore(), srvTLS)
	if err != nil {
		return nil, err
	}
	mixer, err := local.StartMixer(ctx, "mixer", roles.MixerConfig{ChunkItems: 500, Poll: time.Hour})
	if err != nil {
		return nil, err
	}
	local.StartOracle("oracle")
	if err := local.StartFrontend(ctx, "frontend", roles.FrontendConfig{Workers: 2}); err != nil {
		return nil, err
	}
	stores := map[string]*roles.MemoryShardStore{}
	for _, id := range ids {
		stores[id] = roles.NewMemoryShardStore()
		if err := local.StartShard(ctx, id, roles.ShardConfig{EvalRetry: 300 * time.Millisecond}, stores[id]); err != nil {
			return nil, err
		}
	}

	// Ground truth: distinct participants per key (canonical text form).
	truth := map[string]map[int]bool{}
	obs := make([][]pda.Observation, people)
	add := func(i int, ip string) error {
		k, err := pda.ParseIPKey(ip)
		if err != nil {
			return err
		}
		obs[i] = append(obs[i], pda.Observation{Key: k, Value: 1})
		if truth[ip] == nil {
			truth[ip] = map[int]bool{}
		}
		truth[ip][i] = true
		return nil
	}
	for j, a := range demoAttackers {
		for i := range demoReporters(j, people, tau) {
			if err := add(i, a); err != nil {
				return nil, err
			}
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range obs {
		for range benign {
			if err := add(i, fmt.Sprintf("10.%d.%d.%d", rnd.IntN(256), rnd.IntN(256), 1+rnd.IntN(254))); err != nil {
				return nil, err
			}
		}
	}
	sum := &DemoSummary{Participants: people, Threshold: tau, Shards: shards, NotRevealed: map[int]int{}, DBHistogram: map[int]int{}}
	for ip, who := range truth {
		if len(who) >= tau {
			sum.Expected = append(sum.Expected, DemoKey{Key: ip, Count: len(who)})
		} else {
			sum.NotRevealed[len(who)]++
		}
	}
	slices.SortFunc(sum.Expected, func(a, b DemoKey) int { return strings.Compare(a.Key, b.Key) })
	fmt.Fprintf(out, "PDA demo: %d participants (vendors), τ = %d, %d DB shards, count mode distinct_participants\n", people, tau, shards)
	fmt.Fprintln(out, "attacker IPs and how many participants saw each (ground truth, never sent in clear):")
	for _, a := range demoAttackers {
		n := len(truth[a])
		sum.Attackers = append(sum.Attackers, DemoKey{Key: a, Count: n})
		if n < tau {
			sum.Withheld = append(sum.Withheld, DemoKey{Key: a, Count: n})
		}
		fmt.Fprintf(out, "  %-15s %d\n", a, n)
	}
	w := job.WindowAt(time.Now())
	sum.Window = w
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, 0
	for i := range obs {
		total += len(obs[i])
	}
	sum.Submissions = total
	bar := demoProgress(out)
	errs := make(chan error, people)
	for i, name := range names {
		wg.Go(func() {
			tc, err := pki.ClientTLS(name)
			if err != nil {
				errs <- err
				return
			}
			c := client.NewClient(url, tc)
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
		return nil, err
	}
	fmt.Fprintf(out, "submitted %d items in %s; sealing window %d (shuffle, forward, evaluate, reveal)…\n", total, time.Since(start).Round(time.Millisecond), w)
	if err := mixer.Seal(ctx, w); err != nil {
		return nil, err
	}
	res, err := waitDemoResult(ctx, dbJS, w)
	if err != nil {
		return nil, err
	}
	sum.Revealed = slices.Clone(res.Revealed)
	contract.SortRevealed(sum.Revealed)
	fmt.Fprintf(out, "\nrevealed (published on %s and in KV %s/%d):\n", contract.ResultsSubject(w), contract.ResultsBucket, w)
	for _, k := range res.Revealed {
		fmt.Fprintf(out, "  %-15s reported by %d participants\n", k.Key, k.Count)
	}
	for _, s := range stores {
		cs, err := s.Counts(ctx, w)
		if err != nil {
			return nil, err
		}
		sum.DBRows += len(cs)
		for _, c := range cs {
			sum.DBHistogram[c]++
		}
	}
	counts := make([]int, 0, len(sum.DBHistogram))
	for c := range sum.DBHistogram {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	sum.Sessions = int(testutil.ToFloat64(m.Sessions))
	sum.Accepted = int(testutil.ToFloat64(m.Items.WithLabelValues("accepted")))
	fmt.Fprintln(out, "\nwhat each party saw:")
	fmt.Fprintf(out, "  proxy ingress: %d authenticated sessions, %d accepted items as ciphertexts + proofs; no plaintext key, no blinded key\n",
		sum.Sessions, sum.Accepted)
	fmt.Fprintf(out, "  proxy mixer:   %.0f re-randomised items, shuffled as one window, forwarded without any participant pseudonym\n", testutil.ToFloat64(m.Mixed))
	fmt.Fprintf(out, "  DB:            %d blinded rows (pseudorandom Y), keyless count histogram:", sum.DBRows)
	for _, c := range counts {
		fmt.Fprintf(out, " %d×%d", sum.DBHistogram[c], c)
	}
	fmt.Fprintf(out, "; no participant identity, session or timestamp\n")
	fmt.Fprintf(out, "  proxy oracle:  %.0f reveal requests (rows with ≥ τ participants only), %.0f consistent entries; never a row below τ\n",
		testutil.ToFloat64(m.Oracle.WithLabelValues("answered")), testutil.ToFloat64(m.Consistent))
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// demoProgress draws a progress bar on w, ending the line when done reaches total.
func demoProgress(w io.Writer) client.Progress {
	return func(done, total int) {
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(w, "\r[%s%s] %3d%%  %d/%d", strings.Repeat("#", n), strings.Repeat(".", width-n), 100*done/max(total, 1), done, total)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}

// waitDemoResult polls the results bucket until window w's merged result is there.
func waitDemoResult(ctx context.Context, js jetstream.JetStream, w uint64) (*contract.WindowResult, error) {
	kv, err := js.KeyValue(ctx, contract.ResultsBucket)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if e, err := kv.Get(ctx, strconv.FormatUint(w, 10)); err == nil {
			var r contract.WindowResult
			return &r, json.Unmarshal(e.Value(), &r)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no result for window %d: %w", w, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
