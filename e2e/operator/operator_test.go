// Package operator runs the operator's manager binary, as shipped, against a real API server:
// every sample in config/samples applies and becomes Ready, the health, readiness and metrics
// endpoints answer, and SIGTERM stops it cleanly.
package operator

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

func TestSamplesBecomeReadyUnderTheManagerBinary(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	k8s := api.ClientT(t)
	ctx := context.Background()

	mgr := startManager(t, root, api.KubeConfig)

	// What a user creates before applying the samples: the namespaces and key Secrets the
	// samples reference (keys are 32 random bytes, as `head -c 32 /dev/urandom` would give).
	const ns = "home"
	for _, n := range []string{ns, "pda-proxy", "pda-db", "pps-garbler"} {
		mustCreate(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	// The vendor's Secret is a key ring (keys.secretRef.epochs): its entries are epoch-<n>.key.
	for _, s := range []struct{ ns, name, entry string }{
		{ns, "acme-vendor-key", "epoch-0.key"}, {ns, "integrator-key", "private.key"},
		{"pda-proxy", "pda-proxy-keys", "private.key"}, {"pda-db", "pda-db-keys", "private.key"},
	} {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name},
			Data: map[string][]byte{s.entry: key}})
	}

	// The PPS garbler's identity and sealing keys, and the broker↔garbler link's TLS Secrets
	// (cert-manager's layout; the manager here only validates, so the content is not parsed).
	seal := make([]byte, 32)
	if _, err := rand.Read(seal); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "pps-garbler", Name: "pps-garbler-keys"},
		Data: map[string][]byte{"identity.key": seal[:16], "seal.key": seal}})
	tls := map[string][]byte{corev1.TLSCertKey: []byte("cert"), corev1.TLSPrivateKeyKey: []byte("key"), "ca.crt": []byte("ca")}
	mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "pps-garbler", Name: "parking-daily-pps-garbler-tls"}, Data: tls})
	mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "parking-daily-pps-broker-tls"}, Data: tls})

	// The gateway's user tokens and the vendor agent's device registry, as files in Secrets.
	mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home-user-tokens"},
		Data: map[string][]byte{"tokens.json": []byte(`{"token-of-alice": "alice"}`)}})
	mustCreate(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-devices"},
		Data: map[string][]byte{"devices.json": []byte(`[]`)}})
	samples := readSamples(t, filepath.Join(root, "config", "samples"))
	kinds := map[string]bool{}
	for _, u := range samples {
		u.SetNamespace(ns)
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatalf("apply sample %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		kinds[u.GetKind()] = true
	}
	for _, k := range []string{"Vendor", "Shuffler", "Round", "AggregationJob", "SecurePipeline"} {
		if !kinds[k] {
			t.Errorf("config/samples has no %s", k)
		}
	}
	for _, u := range samples {
		ready.Wait(t, k8s, u, nil)
	}

	body := mgr.Get(t, 30*time.Second, mgr.metrics, "/metrics")
	for _, want := range []string{`controller_runtime_reconcile_total{controller="round"`, `controller_runtime_reconcile_total{controller="aggregationjob"`,
		`controller_runtime_reconcile_total{controller="securepipeline"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	mgr.Stop(t)
}

// readSamples decodes every YAML document in dir (kustomization.yaml aside).
func readSamples(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("decode %s: %v", f, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// manager is the running operator binary and its addresses.
type manager struct {
	*testenv.Daemon
	metrics, probe string
}

// startManager builds operators/cmd and runs it with a kubeconfig for the test API server.
func startManager(t *testing.T, root string, kubeconfig []byte) *manager {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./operators/cmd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build manager: %v\n%s", err, out)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	m := &manager{metrics: fmt.Sprintf("127.0.0.1:%d", ports[0]), probe: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cmd := exec.Command(bin, "--metrics-bind-address="+m.metrics, "--health-probe-bind-address="+m.probe)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
	m.Daemon = testenv.StartDaemon(t, "manager", cmd)
	for _, path := range []string{"/healthz", "/readyz"} {
		m.Get(t, 30*time.Second, m.probe, path)
	}
	return m
}
