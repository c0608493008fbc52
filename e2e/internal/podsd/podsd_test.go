package podsd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestTargetsFromAddressFilesAndAnnotations: on a real API server, the running pods of the
// namespace become file_sd groups: an operator-run pod at the metrics address its address file
// publishes (written by telemetry.AddrFile, as the roles do) with the PodMonitor's labels, an
// annotated chart pod at its prometheus.io port and path; a pod whose file is not written yet,
// a pending pod, an unannotated pod and another namespace's pod are left out. Write produces
// the JSON Prometheus reads.
func TestTargetsFromAddressFilesAndAnnotations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	k := api.ClientT(t)
	ctx := t.Context()
	for _, ns := range []string{"obscura", "other"} {
		if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	role := map[string]string{
		"app.kubernetes.io/managed-by": "obscura-operator", "app.kubernetes.io/name": "mohito",
		"app.kubernetes.io/component": "gateway", "app.kubernetes.io/instance": "home",
	}
	edge := map[string]string{"app.kubernetes.io/component": "edge", "app.kubernetes.io/instance": "obscura"}
	scrape := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8444", "prometheus.io/path": "/stats/prometheus"}
	pods := []struct {
		ns, name string
		labels   map[string]string
		annot    map[string]string
		phase    corev1.PodPhase
		addr     string // the metrics address in its address file; "" writes none
	}{
		{"obscura", "gw-a", role, nil, corev1.PodRunning, "127.0.0.1:40001"},
		{"obscura", "gw-b", role, nil, corev1.PodRunning, ""},
		{"obscura", "gw-c", role, nil, corev1.PodPending, "127.0.0.1:40003"},
		{"obscura", "edge", edge, scrape, corev1.PodRunning, ""},
		{"obscura", "redis", map[string]string{"app.kubernetes.io/component": "redis"}, nil, corev1.PodRunning, ""},
		{"other", "gw-d", role, nil, corev1.PodRunning, "127.0.0.1:40004"},
	}
	root := t.TempDir()
	for _, p := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: p.labels, Annotations: p.annot},
			Spec:       corev1.PodSpec{NodeName: "vm", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		if err := k.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = p.phase
		if err := k.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "pods", string(pod.UID), "volumes/kubernetes.io~empty-dir/run")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if p.addr != "" {
			f, err := telemetry.NewAddrFile(filepath.Join(dir, "addr"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Record("127.0.0.1:40999", telemetry.AddrHealth); err != nil {
				t.Fatal(err)
			}
			if err := f.Record(p.addr, telemetry.AddrMetrics); err != nil {
				t.Fatal(err)
			}
		}
	}

	got, err := Targets(ctx, k, root, "vm", "obscura")
	if err != nil {
		t.Fatal(err)
	}
	want := []Group{
		{Targets: []string{"127.0.0.1:8444"}, Labels: map[string]string{
			"namespace": "obscura", "pod": "edge", LabelSystem: "edge", LabelRole: "edge", LabelInstance: "obscura", "__metrics_path__": "/stats/prometheus"}},
		{Targets: []string{"127.0.0.1:40001"}, Labels: map[string]string{
			"namespace": "obscura", "pod": "gw-a", LabelSystem: "mohito", LabelRole: "gateway", LabelInstance: "home", "__metrics_path__": "/metrics"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("targets:\n got %+v\nwant %+v", got, want)
	}
	if other, err := Targets(ctx, k, root, "another-node"); err != nil || len(other) != 0 {
		t.Errorf("targets on another node: %+v, %v; want none", other, err)
	}

	path := filepath.Join(t.TempDir(), "targets.json")
	if err := Write(path, got); err != nil {
		t.Fatal(err)
	}
	var back []Group
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &back)
	}
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("targets file %s: %v\n%s", path, err, b)
	}
	if err := Write(path, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "[]\n" {
		t.Errorf("no targets: file %q; want []", b)
	}
}
