package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

// env is one run against the local cluster.
type env struct {
	t          *testing.T
	root       string
	kubeconfig string
	ns         string
	dir        string
	k          client.Client
	images     map[string]string // component → image reference
	report     *Report
	// createdSecrets are the Secrets the test made (keys, tokens, devices), deleted at the end.
	createdSecrets []string
	// secrets are values no pod log may contain (keys, tokens, device ids, passwords).
	secrets map[string]string
	// The host-side client: the mohito CLI, the provisioned files, the edge's CA and server
	// name, the devices' MQTT logins, the devices file the drives use (the series' vendors').
	mohito, prov, ca, edgeServerName, creds, devices string
	// vaultToken is the root token of the dev Vault the run installs.
	vaultToken string
	// logs keeps a copy of every pod log of the run's namespaces (logarchive_test.go).
	logs *logArchive
}

// Report is what the run measured; written as JSON next to the test's log (OBSCURA_E2E_REPORT).
type Report struct {
	Phases []Phase `json:"phases"`
	// Scaling and ScaleSamples are the load phases of issue 14 item 4 (scaling_test.go).
	Scaling      []ScalePhase  `json:"scaling,omitempty"`
	ScaleSamples []ScaleSample `json:"scale_samples,omitempty"`
	Notes        []string      `json:"notes,omitempty"`
}

// Phase is one step and how long it took.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

func newEnv(t *testing.T) *env {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		kc = filepath.Join(root, "hack/cluster/state/kubeconfig/admin.conf")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v (is the local cluster up? make cluster-up)", kc, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, kubeconfig: kc, ns: "obscura", dir: t.TempDir(), k: k, report: &Report{}}
	e.images = readImages(t, root)
	// The archive stays next to the report (e2e/cluster/out/pod-logs by default) for the reader
	// of a failed run; each run starts it afresh.
	logDir := filepath.Join(e.outDir(), "pod-logs")
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	e.logs = startLogArchive(filepath.Join(root, "hack/cluster/state/pod-logs"), logDir, func(pod string) bool {
		return strings.HasPrefix(pod, e.ns+"_") || strings.HasPrefix(pod, garblerNS+"_")
	}, 2*time.Second)
	t.Cleanup(e.logs.stop)
	return e
}

// phase runs f and records its duration.
func (e *env) phase(name string, f func()) {
	e.t.Helper()
	start := time.Now()
	e.t.Logf("=== %s", name)
	f()
	d := time.Since(start)
	e.report.Phases = append(e.report.Phases, Phase{Name: name, Seconds: d.Seconds()})
	e.t.Logf("=== %s done in %.1fs", name, d.Seconds())
}

// run executes a repo tool (bin/<name>) against the cluster and returns its stdout.
func (e *env) run(name string, args ...string) string {
	e.t.Helper()
	out, err := e.try(name, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func (e *env) try(name string, args ...string) (string, error) {
	return e.tryEnv(nil, name, args...)
}

// tryEnv is try with extra environment variables (never on the logged command line).
func (e *env) tryEnv(extraEnv []string, name string, args ...string) (string, error) {
	bin := filepath.Join(e.root, "bin", name)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Env = append(cmd.Env, "KUBECONFIG="+e.kubeconfig, "HELM_CACHE_HOME="+filepath.Join(e.dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(e.dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(e.dir, "helm-data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	e.t.Logf("$ %s %s (%.1fs)", name, strings.Join(redactArgs(args), " "), time.Since(start).Seconds())
	if err != nil {
		return stdout.String(), fmt.Errorf("%w\nstdout:\n%s\nstderr:\n%s", err, tail(stdout.String(), 4000), tail(stderr.String(), 4000))
	}
	return stdout.String(), nil
}

// redactArgs keeps --set values out of the log when they could hold secrets (none do today;
// the rule keeps it that way).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(strings.ToLower(a), "password") || strings.Contains(strings.ToLower(a), "token=") {
			a = "<redacted>"
		}
		out[i] = a
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// readImages maps each component to the reference `make images` built (hack/images/out/images.json).
func readImages(t *testing.T, root string) map[string]string {
	b, err := os.ReadFile(filepath.Join(root, "hack/images/out/images.json"))
	if err != nil {
		t.Fatalf("%v: run make images images-import first (make e2e-cluster does)", err)
	}
	var idx struct {
		Components map[string]struct {
			Image string `json:"image"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, c := range idx.Components {
		out[name] = c.Image
	}
	return out
}

// secret creates or replaces a Secret in the test namespace.
func (e *env) secret(name string, data map[string][]byte) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Data: data}
	ctx := context.Background()
	e.createdSecrets = append(e.createdSecrets, name)
	if err := upsertSecret(ctx, e.k, s); err != nil {
		e.t.Fatalf("secret %s: %v", name, err)
	}
}

// upsertSecret creates s or, if it exists, replaces its data and type. An Update needs the live
// object's resourceVersion: updating the new object as built fails ("must be specified for an
// update"), and that error used to be dropped, leaving the old Secret in place.
func upsertSecret(ctx context.Context, k client.Client, s *corev1.Secret) error {
	err := k.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	live := &corev1.Secret{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(s), live); err != nil {
		return err
	}
	live.Data, live.StringData = s.Data, s.StringData
	return k.Update(ctx, live)
}

// secretData reads one key of a Secret.
func (e *env) secretData(ns, name, key string) []byte {
	e.t.Helper()
	s := &corev1.Secret{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		e.t.Fatalf("secret %s/%s: %v", ns, name, err)
	}
	v, ok := s.Data[key]
	if !ok {
		e.t.Fatalf("secret %s/%s has no key %q", ns, name, key)
	}
	return v
}

// resource reads a mohito.obscura.dev custom resource of the test namespace.
func (e *env) resource(kind, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(mohitoAPI)
	u.SetKind(kind)
	return u, e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, u)
}

// decryptWorkers returns the Round's decryption workers: wanted and ready replicas.
func (e *env) decryptWorkers() (want, ready int32, err error) {
	d := &appsv1.Deployment{}
	if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: roundName + "-decrypt-worker"}, d); err != nil {
		return 0, 0, err
	}
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return want, d.Status.ReadyReplicas, nil
}
