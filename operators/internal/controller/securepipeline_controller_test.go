package controller

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/operators/api/common"
	ppsv1 "github.com/obscura-iot/obscura/operators/api/pps/v1alpha1"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/operators/internal/specs/pps"
	"github.com/obscura-iot/obscura/operators/internal/specs/specstest"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// fakeBroker serves, on 127.0.0.1, the metrics the PPS broker exposes per pipeline
// (pps/contract status.go), through the Prometheus client the services use.
type fakeBroker struct {
	ln                                            net.Listener
	srv                                           *http.Server
	fn, gates, bytes, last, round, valid, latency *prometheus.GaugeVec
	status                                        *prometheus.GaugeVec
	execs                                         *prometheus.CounterVec
}

func startFakeBroker() (*fakeBroker, error) {
	reg := prometheus.NewRegistry()
	f := &fakeBroker{}
	g := func(name string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, append([]string{contract.LabelPipeline}, labels...))
		reg.MustRegister(v)
		return v
	}
	f.fn = g(contract.MetricFunction, contract.LabelFn, contract.LabelCircuitHash)
	f.gates, f.bytes = g(contract.MetricANDGates), g(contract.MetricCircuitBytes)
	f.last, f.round, f.valid, f.latency = g(contract.MetricLastTime), g(contract.MetricLastRound), g(contract.MetricLastValid), g(contract.MetricLastLatency)
	f.status = g(contract.MetricLastStatus, contract.LabelStatus)
	f.execs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricExecutions, Help: "executions"}, []string{contract.LabelPipeline, contract.LabelStatus})
	reg.MustRegister(f.execs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.ln = ln
	f.srv = &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go f.srv.Serve(ln) //nolint:errcheck // Close ends it
	return f, nil
}

func (f *fakeBroker) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *fakeBroker) Close() { f.srv.Close() }

// compiled reports the pipeline's function as the broker does once it compiled the source.
func (f *fakeBroker) compiled(pipeline, fn string, gates, bytes int) {
	f.fn.WithLabelValues(pipeline, fn, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08").Set(1)
	f.gates.WithLabelValues(pipeline).Set(float64(gates))
	f.bytes.WithLabelValues(pipeline).Set(float64(bytes))
}

// executed reports one finished execution.
func (f *fakeBroker) executed(pipeline string, at time.Time, round, valid int, latency time.Duration, status string) {
	f.execs.WithLabelValues(pipeline, status).Inc()
	f.last.WithLabelValues(pipeline).Set(float64(at.UnixNano()) / 1e9)
	f.round.WithLabelValues(pipeline).Set(float64(round))
	f.valid.WithLabelValues(pipeline).Set(float64(valid))
	f.latency.WithLabelValues(pipeline).Set(latency.Seconds())
	f.status.DeletePartialMatch(prometheus.Labels{contract.LabelPipeline: pipeline})
	f.status.WithLabelValues(pipeline, status).Set(1)
}

// pipelineDomains creates a pipeline namespace and its garbler namespace with everything the
// sample needs: the garbler's keys and both ends' TLS Secrets.
func pipelineDomains(t *testing.T) (ns, garblerNS string) {
	t.Helper()
	ns = namespace(t)
	garblerNS = ns + "-garbler"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: garblerNS}})
	seal := make([]byte, 32)
	if _, err := rand.Read(seal); err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: garblerNS, Name: "pps-garbler-keys"},
		Data: map[string][]byte{"identity.key": []byte("not-a-real-ed25519-key"), "seal.key": seal}})
	tls := map[string][]byte{corev1.TLSCertKey: []byte("cert"), corev1.TLSPrivateKeyKey: []byte("key"), "ca.crt": []byte("ca")}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: garblerNS, Name: "parking-daily-pps-garbler-tls"}, Data: tls})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "parking-daily-pps-broker-tls"}, Data: tls})
	return ns, garblerNS
}

// samplePipeline is config/samples' SecurePipeline in ns, its garbler in garblerNS.
func samplePipeline(t *testing.T, ns, garblerNS string) *ppsv1.SecurePipeline {
	t.Helper()
	p := &ppsv1.SecurePipeline{}
	specstest.ReadSample(t, "pps_v1alpha1_securepipeline.yaml", p)
	p.Namespace, p.Spec.Garbler.Namespace = ns, garblerNS
	return p
}

func deletePipeline(t *testing.T, p *ppsv1.SecurePipeline) {
	t.Helper()
	if err := k8s.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, "pipeline "+p.Name+" deleted", func() error {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &ppsv1.SecurePipeline{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			v = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		m[e.Name] = v
	}
	return m
}

func conditionOf(p *ppsv1.SecurePipeline, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

// TestSecurePipelineRunsBothTrustDomains applies the sample and follows it through its life:
// the workloads in both domains with the flags, environment and mounts the services read (and
// no NATS credentials in the garbler), Ready, scaling the broker, each execution reported from
// the broker's metrics into status and the printer columns, the subscribers' NATS permissions
// once the function is known, and cleanup of both domains on deletion.
func TestSecurePipelineRunsBothTrustDomains(t *testing.T) {
	ctx := context.Background()
	ns, garblerNS := pipelineDomains(t)
	p := samplePipeline(t, ns, garblerNS)
	create(t, p)
	conds := func() []metav1.Condition { return p.Status.Conditions }
	waitRollingOut(t, p, conds)
	if c := conditionOf(p, ConditionConfigValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ConfigValid = %+v, want True", c)
	}
	if !slices.Contains(p.Finalizers, PipelineFinalizer) {
		t.Errorf("finalizers %v", p.Finalizers)
	}

	// The broker, in the pipeline's namespace.
	var broker appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "parking-daily-pps-broker"}, &broker); err != nil {
		t.Fatal(err)
	}
	bc := broker.Spec.Template.Spec.Containers[0]
	be := env(bc)
	for k, want := range map[string]string{
		specs.Env(pps.FlagGarblerAddr):   "parking-daily-pps-garbler." + garblerNS + ".svc:7443",
		specs.Env(pps.FlagWorkers):       "2",
		specs.Env(pps.FlagPipelinesFile): "/etc/obscura/pps/pipelines.json",
		specs.Env(pps.FlagGarblerCA):     "/var/run/secrets/pps/tls/ca.crt",
		specs.Env(pps.FlagTLSCert):       "/var/run/secrets/pps/tls/tls.crt",
		specs.Env(pps.FlagRedisAddr):     "redis:6379",
		specs.EnvNATSURL:                 testRuntime.NATSURL,
		specs.EnvNATSUser:                "secret:parking-daily-pps-nats/user",
		specs.EnvNATSPasswordFile:        "/etc/obscura/nats/password",
	} {
		if be[k] != want {
			t.Errorf("broker %s = %q, want %q", k, be[k], want)
		}
	}
	if bc.Args[0] != "broker" || bc.Image != "obscura/pps:test" || *broker.Spec.Replicas != 1 {
		t.Errorf("broker runs %v of %s ×%d", bc.Args, bc.Image, *broker.Spec.Replicas)
	}

	// The garbler, in its own namespace, without a trace of NATS (spec §10 #10).
	var garbler appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: garblerNS, Name: "parking-daily-pps-garbler"}, &garbler); err != nil {
		t.Fatal(err)
	}
	gc := garbler.Spec.Template.Spec.Containers[0]
	ge := env(gc)
	for k, want := range map[string]string{
		specs.Env(pps.FlagListen):          ":7443",
		specs.Env(pps.FlagClientCA):        "/var/run/secrets/pps/tls/ca.crt",
		specs.Env(pps.FlagSeal):            "file",
		specs.Env(pps.FlagSealKeyFile):     "/var/run/secrets/pps/seal/seal.key",
		specs.Env(pps.FlagIdentity):        "file",
		specs.Env(pps.FlagIdentityKeyFile): "/var/run/secrets/pps/identity/identity.key",
		specs.Env(pps.FlagPipelinesFile):   "/etc/obscura/pps/pipelines.json",
	} {
		if ge[k] != want {
			t.Errorf("garbler %s = %q, want %q", k, ge[k], want)
		}
	}
	for k, v := range ge {
		if strings.Contains(k, "NATS") || strings.Contains(strings.ToLower(v), "nats") {
			t.Errorf("the garbler is given NATS: %s=%q", k, v)
		}
	}
	for _, v := range garbler.Spec.Template.Spec.Volumes {
		if v.Secret != nil && (strings.Contains(v.Secret.SecretName, "nats") || v.Name == "nats") {
			t.Errorf("the garbler mounts Secret %s", v.Secret.SecretName)
		}
	}
	if *garbler.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("a garbler with file keys gets a service account token")
	}
	if sc := garbler.Spec.Template.Spec.SecurityContext; sc == nil || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("garbler pod security %+v", sc)
	}

	// The pipelines file, the same in both domains; the link's Service and NetworkPolicy.
	var bcm, gcm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "parking-daily-pps-pipelines"}, &bcm); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: garblerNS, Name: "parking-daily-pps-pipelines"}, &gcm); err != nil {
		t.Fatal(err)
	}
	var file contract.PipelinesFile
	if err := json.Unmarshal([]byte(gcm.Data[pps.PipelinesKey]), &file); err != nil || bcm.Data[pps.PipelinesKey] != gcm.Data[pps.PipelinesKey] {
		t.Fatalf("pipelines files differ or do not decode (%v)", err)
	}
	if len(file.Pipelines) != 1 || file.Pipelines[0].Name != ns+"/parking-daily" || len(file.Pipelines[0].Publishers) != 9 {
		t.Errorf("pipelines file %+v", file)
	}
	var svc corev1.Service
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: garblerNS, Name: "parking-daily-pps-garbler"}, &svc); err != nil || svc.Spec.Ports[0].Port != 7443 {
		t.Errorf("garbler Service %+v (%v)", svc.Spec.Ports, err)
	}
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: garblerNS, Name: "parking-daily-pps-garbler"}, &np); err != nil {
		t.Fatal(err)
	}
	if in := np.Spec.Ingress; len(in) != 1 || len(in[0].From) != 1 || in[0].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != ns ||
		in[0].From[0].PodSelector.MatchLabels[specs.LabelComponent] != "broker" || in[0].Ports[0].Port.IntValue() != 7443 {
		t.Errorf("garbler NetworkPolicy ingress %+v", np.Spec.Ingress)
	}

	// NATS: the broker's user and one user per device, in the pipeline's own account.
	var natsSecret corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "parking-daily-pps-nats"}, &natsSecret); err != nil {
		t.Fatal(err)
	}
	if natsSecret.Annotations[specs.AnnotationNATSAccount] != "PPS_"+ns+"_parking-daily" || len(natsSecret.Data) != 2+2*10 {
		t.Errorf("NATS Secret account %q with %d entries", natsSecret.Annotations[specs.AnnotationNATSAccount], len(natsSecret.Data))
	}

	markAvailable(t, ns)
	markAvailable(t, garblerNS)
	waitReady(t, p, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if p.Status.Workers != 2 {
		t.Errorf("status.workers = %d, want 1 replica × 2 workers", p.Status.Workers)
	}

	// Scale the broker's evaluator workers.
	p.Spec.Broker.Replicas, p.Spec.Broker.Workers = 3, 4
	update(t, p)
	eventually(t, "broker scaled to 3×4", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&broker), &broker); err != nil {
			return err
		}
		if *broker.Spec.Replicas != 3 || env(broker.Spec.Template.Spec.Containers[0])[specs.Env(pps.FlagWorkers)] != "4" {
			return fmt.Errorf("%d replicas, workers %s", *broker.Spec.Replicas, env(broker.Spec.Template.Spec.Containers[0])[specs.Env(pps.FlagWorkers)])
		}
		return nil
	})
	waitEvent(t, p, "Normal", ReasonScaled)
	markAvailable(t, ns)
	waitReady(t, p, conds, metav1.ConditionTrue, common.ReasonReconciled)
	if p.Status.Workers != 12 {
		t.Errorf("status.workers = %d, want 3 × 4", p.Status.Workers)
	}

	// A running broker pod reports the compiled function and its executions.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "parking-daily-pps-broker-0", Labels: broker.Spec.Template.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "obscura/pps:test"}}}}
	create(t, pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	const fn = "365067f8c601416a57c9db1d7dcd0515"
	name := ns + "/parking-daily"
	brokerMetrics.compiled(name, fn, 1_234_567, 45_000_000)
	// Status times have a resolution of a second; the broker's have more.
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Add(250 * time.Millisecond)
	brokerMetrics.executed(name, at, 1, 9, 76*time.Millisecond, contract.StatusOK)
	brokerMetrics.executed(name, at.Add(time.Second), 2, 8, 81*time.Millisecond, contract.StatusOK)
	eventually(t, "executions in status", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		s := p.Status
		if s.FnID != fn || s.AndGates != 1_234_567 || s.CircuitBytes != 45_000_000 || s.Executions != 2 || s.LastExecution == nil {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	le := p.Status.LastExecution
	if le.Round != 2 || le.ValidInputs != 8 || le.Status != contract.StatusOK || !le.Time.Time.Equal(at.Add(time.Second).Truncate(time.Second)) ||
		p.Status.LastLatency == nil || p.Status.LastLatency.Duration != 81*time.Millisecond || p.Status.CircuitHash == "" {
		t.Errorf("last execution %+v, latency %v, circuit %q", le, p.Status.LastLatency, p.Status.CircuitHash)
	}
	waitEvent(t, p, "Normal", ReasonExecuted)
	waitEvent(t, p, "Normal", ReasonFunctionCompiled)

	// kubectl get's columns, as the API server renders them.
	cols, row := table(t, p)
	if want := []string{"Name", "Mode", "Executions", "Last latency", "AND gates", "Bytes", "Ready", "Reason", "FnID", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	for i, want := range []any{"parking-daily", "faithful", float64(2), "81ms", float64(1234567), float64(45000000), "True"} {
		if row[i] != want {
			t.Errorf("column %s = %v (%T), want %v", cols[i], row[i], row[i], want)
		}
	}

	// The subscriber may now read the function's output, and only it.
	eventually(t, "subscriber permission rendered", func() error {
		var s corev1.Secret
		if err := k8s.Get(ctx, testAccountsSecret, &s); err != nil {
			return err
		}
		conf := string(s.Data[specs.NATSAccountsKey])
		if !strings.Contains(conf, `"PPS_`+ns+`_parking-daily": {`) {
			return fmt.Errorf("no account for the pipeline")
		}
		out := contract.OutSubject(fn)
		if n := strings.Count(conf, `"`+out+`"`); n != 1 {
			return fmt.Errorf("%s granted %d times, want once (the subscriber)", out, n)
		}
		sub := p.Spec.Subscribers[0]
		for _, line := range strings.Split(conf, "\n") {
			if strings.Contains(line, out) && !strings.Contains(line, pps.DeviceUser(p, sub)) {
				return fmt.Errorf("output granted to another user: %s", line)
			}
		}
		return nil
	})

	// Deleting the pipeline deletes its objects in both domains.
	deletePipeline(t, p)
	for _, n := range []string{ns, garblerNS} {
		for _, l := range ppsKinds() {
			if err := k8s.List(ctx, l, client.InNamespace(n), client.MatchingLabels(pps.Selector(p))); err != nil {
				t.Fatal(err)
			}
			if items, _ := metaItems(l); len(items) > 0 {
				t.Errorf("%d %T left in %s after deletion", len(items), l, n)
			}
		}
	}
}

// table reads p as kubectl get does (the API server's Table rendering of the printer columns)
// and returns the column names and p's row.
func table(t *testing.T, p *ppsv1.SecurePipeline) ([]string, []any) {
	t.Helper()
	hc, err := rest.HTTPClientFor(apiConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(apiConfig.Host, "/") + "/apis/pps.obscura.dev/v1alpha1/namespaces/" + p.Namespace + "/securepipelines/" + p.Name
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var tab metav1.Table
	if err := json.Unmarshal(body, &tab); err != nil || len(tab.Rows) != 1 {
		t.Fatalf("table %s (%v)", body, err)
	}
	var cols []string
	for _, c := range tab.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	return cols, tab.Rows[0].Cells
}

// TestSecurePipelineConfigChecks: every way a pipeline cannot run as written is refused with
// ConfigValid False and a reason, and nothing runs until it is fixed.
func TestSecurePipelineConfigChecks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	garblerNS := ns + "-garbler"
	p := samplePipeline(t, ns, garblerNS)
	p.Name = "checks"
	create(t, p)
	t.Cleanup(func() { deletePipeline(t, p) })
	conds := func() []metav1.Condition { return p.Status.Conditions }
	refused := func(reason, inMessage string) {
		t.Helper()
		waitReady(t, p, conds, metav1.ConditionFalse, reason)
		eventually(t, "ConfigValid False/"+reason+" about "+inMessage, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			c := conditionOf(p, ConditionConfigValid)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason || !strings.Contains(c.Message, inMessage) {
				return fmt.Errorf("ConfigValid = %+v", c)
			}
			return nil
		})
		var ds appsv1.DeploymentList
		if err := k8s.List(ctx, &ds, client.MatchingLabels(pps.Selector(p))); err != nil || len(ds.Items) > 0 {
			t.Errorf("%d Deployments run for a refused pipeline (%v)", len(ds.Items), err)
		}
	}

	refused(ReasonNamespaceNotFound, garblerNS)
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: garblerNS}})
	refused(common.ReasonKeySecretNotFound, "pps-garbler-keys")
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: garblerNS, Name: "pps-garbler-keys"},
		Data: map[string][]byte{"identity.key": []byte("id"), "seal.key": []byte("too short")}}
	create(t, keys)
	refused(common.ReasonInvalidKey, "sealing key")
	keys.Data["seal.key"] = make([]byte, 32)
	update(t, keys)
	refused(ReasonTLSSecretNotFound, "checks-pps-garbler-tls")
	tls := map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k"), "ca.crt": []byte("ca")}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: garblerNS, Name: "checks-pps-garbler-tls"}, Data: tls})
	refused(ReasonTLSSecretNotFound, "checks-pps-broker-tls")
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "checks-pps-broker-tls"}, Data: tls})
	waitRollingOut(t, p, conds)

	// A garbler in the broker's namespace would put both parties in one trust domain.
	p.Spec.Garbler.Namespace = ns
	update(t, p)
	waitReady(t, p, conds, metav1.ConditionFalse, ReasonSharedTrustDomain)
	// Hardened mode (H1, D21) is run as written: it reaches both domains' pipelines file.
	p.Spec.Garbler.Namespace = garblerNS
	p.Spec.Mode = ppsv1.ModeHardened
	update(t, p)
	waitRollingOut(t, p, conds)
	eventually(t, "hardened pipelines file", func() error {
		for _, key := range []client.ObjectKey{{Namespace: ns, Name: pps.PipelinesConfigMapName(p)}, {Namespace: garblerNS, Name: pps.PipelinesConfigMapName(p)}} {
			var cm corev1.ConfigMap
			if err := k8s.Get(ctx, key, &cm); err != nil {
				return err
			}
			var file contract.PipelinesFile
			if err := json.Unmarshal([]byte(cm.Data[pps.PipelinesKey]), &file); err != nil {
				return err
			}
			if len(file.Pipelines) != 1 || file.Pipelines[0].Mode != contract.ModeHardened {
				return fmt.Errorf("%s: pipelines %+v", key, file.Pipelines)
			}
		}
		return nil
	})
	// A Redis password Secret that does not exist.
	p.Spec.Mode = ppsv1.ModeFaithful
	p.Spec.Garbler.Redis.PasswordSecret = &common.SecretFileReference{Name: "garbler-redis"}
	update(t, p)
	waitReady(t, p, conds, metav1.ConditionFalse, ReasonSecretNotFound)
	// Vault keys without any Vault address (the suite's operator has none).
	p.Spec.Garbler.Redis.PasswordSecret = nil
	p.Spec.Garbler.Keys = ppsv1.GarblerKeys{Vault: &ppsv1.TransitKeys{Role: "pps-garbler", IdentityKey: "id", SealKey: "seal"}}
	update(t, p)
	waitReady(t, p, conds, metav1.ConditionFalse, common.ReasonVaultNotConfigured)
	p.Spec.Garbler.Keys.Vault.Address = "https://vault.example:8200"
	update(t, p)
	waitRollingOut(t, p, conds)
	var garbler appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: garblerNS, Name: "checks-pps-garbler"}, &garbler); err != nil {
		t.Fatal(err)
	}
	ge := env(garbler.Spec.Template.Spec.Containers[0])
	if ge[specs.Env(pps.FlagSeal)] != "vault" || ge[specs.Env(pps.FlagVaultSealKey)] != "seal" || ge[specs.Env(pps.FlagVaultAddr)] != "https://vault.example:8200" ||
		!*garbler.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Errorf("garbler with Vault keys: %v", ge)
	}
}
