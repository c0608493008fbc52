package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	pdaclient "github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The AggregationJob of this run (issue 14 item 4, PDA half): its proxy and database trust
// domains in namespaces of their own; the proxy's Redis is the chart's pda-proxy instance
// (values-local.yaml), each database shard has its own Redis at 127.0.0.1<ordinal>:6393
// (127.0.0.10–12: the node's loopback is a /8); participants reach the proxy ingress through
// the edge's TLS-passthrough listener (edge.pdaProxy, helmArgs) with client certificates
// cert-manager issues from a CA of the proxy domain.
const (
	pdaAPI       = "pda.obscura.dev/v1alpha1"
	pdaJobName   = "scaling"
	pdaProxyNS   = "obscura-e2e-pda-proxy"
	pdaDBNS      = "obscura-e2e-pda-db"
	pdaEdgeAddr  = "127.0.0.1:8445" // edge.pdaProxy.port
	pdaProxyRds  = "127.0.0.1:6380" // the chart's pda-proxy Redis (values-local.yaml)
	pdaShardRds  = "127.0.0.1{ordinal}:6393"
	pdaMaxShards = 3
	pdaWindow    = 90 * time.Second
	// Each participant sends requests of pdaBatch items: 1 a second for pdaPhase (×1), then 4
	// a second for pdaPhase (×4); targetLag sits above what ×1 pools, so only ×4 scales out.
	pdaBatch     = 10
	pdaPhase     = 25 * time.Second
	pdaTargetLag = 120
)

var pdaParticipants = []string{"p0", "p1", "p2", "p3"}

func pdaIdentity(p string) string { return p + ".participants.e2e.obscura.dev" }

// pdaCertificates is cert-manager's PKI of the proxy domain: a self-signed root, a CA Issuer,
// the ingress's serving certificate (its Secret's ca.crt is the CA the ingress verifies
// client certificates against) and one client certificate per participant.
const pdaCertificates = `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: pda-selfsigned, namespace: %[1]s}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: pda-participants-ca, namespace: %[1]s}
spec:
  isCA: true
  commonName: PDA participants CA (e2e)
  secretName: pda-participants-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: pda-selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: pda-participants, namespace: %[1]s}
spec: {ca: {secretName: pda-participants-ca}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: %[2]s-proxy-tls, namespace: %[1]s}
spec:
  secretName: %[2]s-proxy-tls
  commonName: localhost
  dnsNames: [localhost]
  usages: [server auth, digital signature]
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: pda-participants, kind: Issuer, group: cert-manager.io}
`

const pdaParticipantCertificate = `---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: pda-participant-%[2]s, namespace: %[1]s}
spec:
  secretName: pda-participant-%[2]s
  commonName: %[3]s
  usages: [client auth, digital signature]
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: pda-participants, kind: Issuer, group: cert-manager.io}
`

// pdaScaling is the phase: keys, PKI, Redis, the job with shardAutoscale (min 1, max 3), a
// window aligned to the services' windows; four participants submit through the edge at ×1
// then ×4; the shards scale out during ×4 (ScaleUp Event, spec.shards grown, before the
// seal, so the window is routed with the grown ring), and the sink holds exactly the
// aggregate of what was submitted.
func (e *env) pdaScaling() {
	ctx := context.Background()
	e.deletePDA() // what an interrupted run left
	defer e.deletePDA()
	for _, ns := range []string{pdaProxyNS, pdaDBNS} {
		e.run("kubectl", "create", "namespace", ns)
	}

	// Keys as `pda keygen` writes them, in each domain's own namespace.
	g, err := pda.NewGroup(pda.Ristretto255)
	if err != nil {
		e.t.Fatal(err)
	}
	ps, err := pdaroles.GenerateProxySecrets(g)
	if err != nil {
		e.t.Fatal(err)
	}
	pb, err := pdaroles.MarshalProxySecrets(g, ps)
	if err != nil {
		e.t.Fatal(err)
	}
	ds, err := pdaroles.GenerateDBSecrets(g)
	if err != nil {
		e.t.Fatal(err)
	}
	db, err := pdaroles.MarshalDBSecrets(g, ds)
	if err != nil {
		e.t.Fatal(err)
	}
	for what, b := range map[string][]byte{"PDA proxy key": pb, "PDA DB key": db} {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			e.t.Fatal(err)
		}
		for k, v := range m {
			if s, ok := v.(string); ok && len(s) >= 16 {
				e.secrets[what+" "+k] = s
			}
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "pda-proxy-keys", Namespace: pdaProxyNS}, Data: map[string][]byte{"private.key": pb}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pda-db-keys", Namespace: pdaDBNS}, Data: map[string][]byte{"private.key": db}},
	} {
		if err := e.k.Create(ctx, s); err != nil {
			e.t.Fatalf("secret %s/%s: %v", s.Namespace, s.Name, err)
		}
	}

	// The participants' and the ingress's certificates from cert-manager.
	manifest := fmt.Sprintf(pdaCertificates, pdaProxyNS, pdaJobName)
	for _, p := range pdaParticipants {
		manifest += fmt.Sprintf(pdaParticipantCertificate, pdaProxyNS, p, pdaIdentity(p))
	}
	e.run("kubectl", "apply", "-f", e.writeFile("pda-certificates.yaml", []byte(manifest)))

	// One Redis per shard the autoscaler may run.
	for i := range pdaMaxShards {
		e.redis(pdaDBNS, fmt.Sprintf("redis-shard-%d", i), strings.ReplaceAll(pdaShardRds, "{ordinal}", fmt.Sprint(i)))
	}

	// The window starts on a multiple of its length (then the job's window is exactly one
	// services window), far enough ahead for the workloads to start.
	l := int64(pdaWindow / time.Second)
	start := time.Unix((time.Now().Add(75*time.Second).Unix()+l-1)/l*l, 0).UTC()
	var parts []string
	for _, p := range pdaParticipants {
		parts = append(parts, fmt.Sprintf("{name: %s, identity: \"CN=%s\"}", p, pdaIdentity(p)))
	}
	job := fmt.Sprintf(`apiVersion: %s
kind: AggregationJob
metadata: {name: %s, namespace: %s}
spec:
  key: {type: IP}
  threshold: 3
  window: {start: %q, duration: %s, grace: 10s}
  participants: [%s]
  shards: 1
  shardAutoscale: {min: 1, max: %d, targetLag: %d}
  proxy:
    namespace: %s
    keys: {secretRef: {name: pda-proxy-keys}}
    publicKey: %s
    redis: %q
  database:
    namespace: %s
    keys: {secretRef: {name: pda-db-keys}}
    publicKey: %s
    redis: %q
  resultSink:
    configMap: {name: %s-result}
`, pdaAPI, pdaJobName, e.ns, start.Format(time.RFC3339), pdaWindow, strings.Join(parts, ", "), pdaMaxShards, pdaTargetLag,
		pdaProxyNS, hex.EncodeToString(ps.Keys.Oracle.PublicKey()), pdaProxyRds,
		pdaDBNS, hex.EncodeToString(ds.Key.PublicKey()), pdaShardRds, pdaJobName)
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(job), &u.Object); err != nil {
		e.t.Fatalf("job manifest: %v\n%s", err, job)
	}
	if err := e.k.Create(ctx, u); err != nil {
		e.t.Fatalf("create the AggregationJob: %v", err)
	}
	// Five of them start at once (two trust domains' namespaces, their certificates and Redis);
	// on the shared 2-core node with other work running they took just over 3 minutes (the
	// smoke of 00:41 with OBSCURA_E2E_CLUSTER_PDA=1 beside make test).
	testenv.Eventually(e.t, 5*time.Minute, "AggregationJob "+pdaJobName+" workloads ready", func() error {
		u, err := e.pdaJob()
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				if m["status"] == "True" {
					return nil
				}
				return fmt.Errorf("Ready %v: %v: %v", m["status"], m["reason"], m["message"])
			}
		}
		return fmt.Errorf("no Ready condition yet")
	})
	// A Prometheus on the node scrapes both domains' pods while the participants submit and
	// the window seals and reveals; the PDA dashboard is checked once the result is at the sink.
	mon := e.startMonitor(e.ns, pdaProxyNS, pdaDBNS)
	defer mon.stop()
	clients := map[string]*pdaclient.Client{}
	for _, p := range pdaParticipants {
		clients[p] = e.pdaClient(p)
	}

	// Wait for the window to open, then open one session per participant and build its items
	// (shuffled: the revealed keys spread over both rates).
	if d := time.Until(start); d > 0 {
		e.t.Logf("the window opens at %s (in %s)", start.Format(time.RFC3339), d.Round(time.Second))
		time.Sleep(d + time.Second)
	}
	obs, want := pdaObservations()
	type session struct {
		sid   pda.SessionID
		w     uint64
		items [][]byte
	}
	sessions := map[string]*session{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(pdaParticipants))
	for _, p := range pdaParticipants {
		wg.Go(func() {
			var s session
			var suite *pda.Suite
			err := func() error {
				var err error
				for attempt := 0; ; attempt++ {
					if s.sid, suite, s.w, err = clients[p].Session(ctx); err == nil || attempt == 10 {
						break
					}
					time.Sleep(time.Second)
				}
				if err != nil {
					return fmt.Errorf("%s: session through the edge: %w", p, err)
				}
				s.items, err = pda.NewParticipant(suite, nil).Submit(s.sid, 0, obs[p])
				return err
			}()
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			sessions[p] = &s
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}

	// ×1 then ×4: each participant sends pdaBatch items per request, rate requests a second.
	accepted := map[string]int{}
	rejected := map[string]int{}
	sent := map[string]int{}
	allSent := func() bool {
		for _, p := range pdaParticipants {
			if sent[p] < len(sessions[p].items) {
				return false
			}
		}
		return true
	}
	send := func(rate int, d time.Duration) (requests int) {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		until := time.Now().Add(d)
		for time.Now().Before(until) && !allSent() {
			<-tick.C
			var wg sync.WaitGroup
			for _, p := range pdaParticipants {
				s := sessions[p]
				lo := sent[p]
				hi := min(lo+pdaBatch, len(s.items))
				if lo >= hi {
					continue
				}
				sent[p] = hi
				requests++
				wg.Go(func() {
					rep, err := clients[p].SendItems(ctx, s.sid, s.w, s.items[lo:hi], nil)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						rejected["error: "+err.Error()]++
						return
					}
					accepted[p] += rep.Accepted
					for r, n := range rep.Rejected {
						rejected[r] += n
					}
				})
			}
			wg.Wait()
		}
		return requests
	}
	t0 := time.Now()
	r1 := send(1, pdaPhase)
	shards1 := e.pdaShards()
	t1 := time.Now()
	r4 := send(4, pdaPhase)
	t2 := time.Now()
	// What is left (none when the machine kept up) goes at ×4 too.
	r4 += send(4, 10*time.Second)
	total := 0
	for _, p := range pdaParticipants {
		total += len(sessions[p].items)
		if sent[p] != len(sessions[p].items) {
			e.t.Errorf("%s sent %d of %d items before the window's end", p, sent[p], len(sessions[p].items))
		}
	}
	acc := 0
	for _, n := range accepted {
		acc += n
	}
	if len(rejected) > 0 || acc != total {
		e.t.Fatalf("through the edge: %d of %d items accepted; rejected %v", acc, total, rejected)
	}
	e.t.Logf("%d items accepted through the edge: ×1 %d requests in %s, ×4 %d requests in %s; shards %d after ×1",
		acc, r1, t1.Sub(t0).Round(time.Millisecond), r4, time.Since(t1).Round(time.Millisecond), shards1)
	if time.Now().After(start.Add(pdaWindow)) {
		e.t.Fatalf("the submissions ran past the window's end (%s)", start.Add(pdaWindow).Format(time.RFC3339))
	}
	if shards1 != 1 {
		e.t.Errorf("the shards scaled out during ×1 already (%d): targetLag %d is meant to hold 1 shard there", shards1, pdaTargetLag)
	}

	// The scale-out during ×4, before the window's end.
	var scaleUp *eventsv1.Event
	testenv.Eventually(e.t, time.Minute, "a ScaleUp Event of the database shards", func() error {
		var list eventsv1.EventList
		if err := e.k.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
			return err
		}
		for i, ev := range list.Items {
			if ev.Regarding.Kind == "AggregationJob" && ev.Regarding.Name == pdaJobName && ev.Reason == "ScaleUp" && strings.Contains(ev.Note, "database shards") {
				if scaleUp == nil || ev.EventTime.Before(&scaleUp.EventTime) {
					scaleUp = &list.Items[i]
				}
			}
		}
		if scaleUp == nil {
			return fmt.Errorf("none among %d events", len(list.Items))
		}
		return nil
	})
	at := scaleUp.EventTime.Time
	if at.IsZero() {
		at = scaleUp.CreationTimestamp.Time
	}
	if at.Before(t1.Add(-time.Second)) || at.After(start.Add(pdaWindow)) {
		e.t.Errorf("the first ScaleUp (%s: %s) is not within ×4 (%s) and the window's end (%s)",
			at.Format(time.RFC3339), scaleUp.Note, t1.Format(time.RFC3339), start.Add(pdaWindow).Format(time.RFC3339))
	}
	shards2 := e.pdaShards()
	if shards2 <= shards1 {
		e.t.Errorf("spec.shards %d after ×4, %d after ×1", shards2, shards1)
	}

	// The result at the sink.
	var res contract.WindowResult
	testenv.Eventually(e.t, 5*time.Minute, "AggregationJob Complete and its result in the sink ConfigMap", func() error {
		u, err := e.pdaJob()
		if err != nil {
			return err
		}
		if ph, _, _ := unstructured.NestedString(u.Object, "status", "phase"); ph != "Complete" {
			return fmt.Errorf("phase %q", ph)
		}
		cm := &corev1.ConfigMap{}
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: pdaJobName + "-result"}, cm); err != nil {
			return err
		}
		return json.Unmarshal([]byte(cm.Data["result.json"]), &res)
	})
	done := time.Now()
	got := map[string]int{}
	for _, k := range res.Revealed {
		if _, dup := got[k.Key]; dup {
			e.t.Errorf("key %s revealed twice", k.Key)
		}
		got[k.Key] = k.Count
	}
	for k, n := range want {
		if got[k] != n {
			e.t.Errorf("key %s: count %d at the sink, want %d", k, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			e.t.Errorf("key %s (count %d) at the sink was reported by fewer than τ participants", k, n)
		}
	}
	if len(res.Shards) < 2 {
		e.t.Errorf("the window was routed with %d shard(s) (ring version %d): the scale-out came after the seal", len(res.Shards), res.RingVersion)
	}
	slices.Sort(res.Shards)
	e.report.Notes = append(e.report.Notes, fmt.Sprintf(
		"PDA AggregationJob through the edge (mTLS passthrough): %d participants, %d items accepted (%d requests of %d at ×1 in %s, %d at ×4 in %s), 0 rejected; "+
			"shards %d after ×1, first ScaleUp %s after ×4 began (%q), spec.shards %d; the window routed with ring version %d over %d shards; "+
			"%d keys revealed = the submitted aggregate (τ = 3), at the sink %s after the window's end",
		len(pdaParticipants), acc, r1, pdaBatch, t1.Sub(t0).Round(time.Second), r4, t2.Sub(t1).Round(time.Second),
		shards1, at.Sub(t1).Round(time.Second), scaleUp.Note, shards2, res.RingVersion, len(res.Shards),
		len(res.Revealed), done.Sub(start.Add(pdaWindow)).Round(time.Second)))
	mon.checkDashboard("pda")
}

// pdaObservations are the participants' keys: 150 IPs every participant reports (revealed,
// count 4), 40 that three report (revealed, count 3), 100 that two report and 1,020 each
// reports alone (not revealed); each participant's list shuffled.
func pdaObservations() (map[string][]pda.Observation, map[string]int) {
	keys := map[string][]string{}
	want := map[string]int{}
	n := len(pdaParticipants)
	for i := range 150 {
		k := fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
		want[k] = n
		for _, p := range pdaParticipants {
			keys[p] = append(keys[p], k)
		}
	}
	for i := range 40 {
		k := fmt.Sprintf("10.3.%d.%d", i/250, i%250+1)
		want[k] = n - 1
		for j, p := range pdaParticipants {
			if j != i%n {
				keys[p] = append(keys[p], k)
			}
		}
	}
	for i := range 100 {
		k := fmt.Sprintf("10.2.%d.%d", i/250, i%250+1)
		keys[pdaParticipants[i%n]] = append(keys[pdaParticipants[i%n]], k)
		keys[pdaParticipants[(i+1)%n]] = append(keys[pdaParticipants[(i+1)%n]], k)
	}
	obs := map[string][]pda.Observation{}
	for j, p := range pdaParticipants {
		for i := range 1020 {
			keys[p] = append(keys[p], fmt.Sprintf("10.%d.%d.%d", 4+j, i/250, i%250+1))
		}
		rand.Shuffle(len(keys[p]), func(a, b int) { keys[p][a], keys[p][b] = keys[p][b], keys[p][a] })
		for _, k := range keys[p] {
			key, err := pdaclient.ParseKey("ip", k)
			if err != nil {
				panic(err)
			}
			obs[p] = append(obs[p], pda.Observation{Key: key, Value: 1})
		}
	}
	return obs, want
}

// pdaClient is participant p's client: its cert-manager certificate, the ingress's CA, the
// edge's PDA listener (TLS passes through it to the ingress).
func (e *env) pdaClient(p string) *pdaclient.Client {
	var cert tls.Certificate
	roots := x509.NewCertPool()
	testenv.Eventually(e.t, 2*time.Minute, "participant "+p+"'s certificate issued", func() error {
		s := &corev1.Secret{}
		if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: pdaProxyNS, Name: "pda-participant-" + p}, s); err != nil {
			return err
		}
		c, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			return err
		}
		if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
			return fmt.Errorf("no ca.crt")
		}
		cert = c
		return nil
	})
	return pdaclient.NewClient("https://"+pdaEdgeAddr, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots,
		ServerName: "localhost", MinVersion: tls.VersionTLS12})
}

func (e *env) pdaJob() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(pdaAPI)
	u.SetKind("AggregationJob")
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: pdaJobName}, u)
}

// pdaShards is the job's spec.shards.
func (e *env) pdaShards() int64 {
	u, err := e.pdaJob()
	if err != nil {
		e.t.Fatalf("AggregationJob %s: %v", pdaJobName, err)
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "shards")
	return n
}

// deletePDA deletes the job (its finalizer removes the workloads in both domains) and the
// domains' namespaces (keys, certificates, Redis).
func (e *env) deletePDA() {
	_, _ = e.try("kubectl", "delete", "-n", e.ns, "--wait", "--timeout", "2m", "--ignore-not-found", "aggregationjobs.pda.obscura.dev/"+pdaJobName)
	_, _ = e.try("kubectl", "delete", "namespace", pdaProxyNS, pdaDBNS, "--ignore-not-found", "--wait", "--timeout", "3m")
}
