package monitoring

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/obscura-iot/obscura/services/testenv"
)

const monitoringAPI = "monitoring.coreos.com/v1"

// render runs helm template and decodes every object.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	args = append([]string{"template", "obscura", "charts/obscura", "--namespace", "obscura-system"}, args...)
	out, err := testenv.Helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode rendered chart: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func ofAPI(objs []*unstructured.Unstructured, apiVersion string) []string {
	var out []string
	for _, o := range objs {
		if o.GetAPIVersion() == apiVersion {
			out = append(out, o.GetKind()+"/"+o.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// podAnnotations are the pod template annotations of a workload.
func podAnnotations(t *testing.T, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	a, _, err := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
	if err != nil {
		t.Fatalf("%s/%s annotations: %v", o.GetKind(), o.GetName(), err)
	}
	return a
}

// ruleFiles are charts/obscura/rules/*.yaml by system name.
func ruleFiles(t *testing.T) map[string]map[string]any {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(root, "charts/obscura/rules/*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	out := map[string]map[string]any{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".yaml")] = m
	}
	return out
}

var scrapeTargets = map[string]string{
	// workload (Kind/name) -> the port its prometheus.io/port annotation must name
	"Deployment/obscura-operator": "8080",
	"StatefulSet/obscura-nats":    "9090",
	"Deployment/obscura-edge":     "8444",
}

// scrapePaths are the metrics paths of scrapeTargets other than /metrics: the edge's Envoy
// stats, routed from its health listener (finding E-1).
var scrapePaths = map[string]string{"Deployment/obscura-edge": "/stats/prometheus"}

// With the Prometheus operator's API served: PodMonitors for the operator, NATS and the
// operator-run workloads, one PrometheusRule per rule file whose spec is that file, and no
// prometheus.io annotations (the PodMonitors cover those pods; both would scrape twice).
func TestChartRendersMonitorsWhenAPIServed(t *testing.T) {
	objs := render(t, "--api-versions", monitoringAPI, "--set-json", `monitoring.labels={"release":"kube-prometheus-stack"}`)
	rules := ruleFiles(t)
	want := []string{"PodMonitor/obscura-edge", "PodMonitor/obscura-nats", "PodMonitor/obscura-operator", "PodMonitor/obscura-workloads"}
	for sys := range rules {
		want = append(want, "PrometheusRule/obscura-"+sys)
	}
	slices.Sort(want)
	if got := ofAPI(objs, monitoringAPI); !reflect.DeepEqual(got, want) {
		t.Fatalf("monitoring.coreos.com/v1 objects: got %v, want %v", got, want)
	}
	for _, name := range want {
		kind, n, _ := strings.Cut(name, "/")
		if l := find(objs, kind, n).GetLabels()["release"]; l != "kube-prometheus-stack" {
			t.Errorf("%s: label release=%q, want monitoring.labels applied", name, l)
		}
	}
	for sys, file := range rules {
		pr := find(objs, "PrometheusRule", "obscura-"+sys)
		if !reflect.DeepEqual(pr.Object["spec"], file) {
			t.Errorf("PrometheusRule/obscura-%s: spec differs from charts/obscura/rules/%s.yaml", sys, sys)
		}
	}
	// The operator's, the NATS reloader's and the edge's PodMonitors scrape a port their pods declare.
	for mon, workload := range map[string]string{"obscura-operator": "Deployment/obscura-operator", "obscura-nats": "StatefulSet/obscura-nats", "obscura-edge": "Deployment/obscura-edge"} {
		eps, _, _ := unstructured.NestedSlice(find(objs, "PodMonitor", mon).Object, "spec", "podMetricsEndpoints")
		if len(eps) != 1 {
			t.Fatalf("PodMonitor/%s: %d endpoints", mon, len(eps))
		}
		port := eps[0].(map[string]any)["port"].(string)
		kind, n, _ := strings.Cut(workload, "/")
		if !slices.Contains(containerPortNames(t, find(objs, kind, n)), port) {
			t.Errorf("PodMonitor/%s scrapes port %q, which %s does not declare", mon, port, workload)
		}
	}
	// Workloads: every pod the operator runs, in every namespace, on its "metrics" port.
	wl := find(objs, "PodMonitor", "obscura-workloads")
	sel, _, _ := unstructured.NestedStringMap(wl.Object, "spec", "selector", "matchLabels")
	if sel["app.kubernetes.io/managed-by"] != "obscura-operator" {
		t.Errorf("workloads PodMonitor selector %v does not select the operator's pods", sel)
	}
	if any, _, _ := unstructured.NestedBool(wl.Object, "spec", "namespaceSelector", "any"); !any {
		t.Errorf("workloads PodMonitor: namespaceSelector.any not set by default")
	}
	for w := range scrapeTargets {
		kind, n, _ := strings.Cut(w, "/")
		for k := range podAnnotations(t, find(objs, kind, n)) {
			if strings.HasPrefix(k, "prometheus.io/") {
				t.Errorf("%s has %s although a PodMonitor covers it", w, k)
			}
		}
	}
	// Nor on the pods the operator runs (the workloads PodMonitor covers them).
	if args := operatorArgs(t, objs); !slices.Contains(args, "--scrape-annotations=false") {
		t.Errorf("operator args %v: want --scrape-annotations=false with the PodMonitors", args)
	}
}

// operatorArgs are the operator container's arguments.
func operatorArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	c := containers(t, find(objs, "Deployment", "obscura-operator"))[0].(map[string]any)
	args, _, err := unstructured.NestedStringSlice(c, "args")
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// Without the API: no monitoring.coreos.com object (it would fail to install), the standard
// prometheus.io/scrape|port|path annotations on the chart's pods, and the operator told to add
// them to the pods it creates.
func TestChartAnnotatesPodsWithoutAPI(t *testing.T) {
	for name, args := range map[string][]string{
		"not served": nil,
		"disabled":   {"--api-versions", monitoringAPI, "--set", "monitoring.prometheusOperator=disabled"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, args...)
			if got := ofAPI(objs, monitoringAPI); len(got) != 0 {
				t.Errorf("rendered %v without the Prometheus operator", got)
			}
			for w, port := range scrapeTargets {
				kind, n, _ := strings.Cut(w, "/")
				o := find(objs, kind, n)
				if o == nil {
					t.Fatalf("%s not rendered", w)
				}
				a := podAnnotations(t, o)
				path := scrapePaths[w]
				if path == "" {
					path = "/metrics"
				}
				want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": path}
				for k, v := range want {
					if a[k] != v {
						t.Errorf("%s: annotation %s=%q, want %q", w, k, a[k], v)
					}
				}
				if !slices.Contains(containerPorts(t, o), port) {
					t.Errorf("%s: prometheus.io/port %s is not a container port", w, port)
				}
			}
			// The operator annotates the pods it creates too (finding O-1).
			if args := operatorArgs(t, objs); !slices.Contains(args, "--scrape-annotations=true") {
				t.Errorf("operator args %v: want --scrape-annotations=true without PodMonitors", args)
			}
		})
	}
}

// monitoring.prometheusOperator=enabled renders the objects even when helm cannot see the API
// (helm template, or a CRD installed in the same step); workloads.namespaces narrows the
// PodMonitor; rules.enabled=false leaves the PrometheusRules out.
func TestChartMonitoringValues(t *testing.T) {
	objs := render(t, "--set", "monitoring.prometheusOperator=enabled", "--set", "monitoring.rules.enabled=false",
		"--set-json", `monitoring.workloads.namespaces=["integrator","vendor-a"]`)
	want := []string{"PodMonitor/obscura-edge", "PodMonitor/obscura-nats", "PodMonitor/obscura-operator", "PodMonitor/obscura-workloads"}
	if got := ofAPI(objs, monitoringAPI); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	names, _, _ := unstructured.NestedStringSlice(find(objs, "PodMonitor", "obscura-workloads").Object, "spec", "namespaceSelector", "matchNames")
	if !reflect.DeepEqual(names, []string{"integrator", "vendor-a"}) {
		t.Errorf("namespaceSelector.matchNames = %v", names)
	}
	// hostNetwork: the reloader's metrics listener is off, so no NATS PodMonitor.
	objs = render(t, "-f", "charts/obscura/values-local.yaml", "--set", "monitoring.prometheusOperator=enabled")
	if find(objs, "PodMonitor", "obscura-nats") != nil {
		t.Errorf("hostNetwork: PodMonitor/obscura-nats rendered for a reloader without a metrics listener")
	}
}

func containers(t *testing.T, o *unstructured.Unstructured) []any {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func containerPortNames(t *testing.T, o *unstructured.Unstructured) []string {
	var out []string
	for _, c := range containers(t, o) {
		ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ports {
			if n, ok := p.(map[string]any)["name"].(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

func containerPorts(t *testing.T, o *unstructured.Unstructured) []string {
	var out []string
	for _, c := range containers(t, o) {
		ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ports {
			n, _, _ := unstructured.NestedFieldNoCopy(p.(map[string]any), "containerPort")
			switch v := n.(type) {
			case int64:
				out = append(out, strconv.FormatInt(v, 10))
			case float64:
				out = append(out, strconv.FormatInt(int64(v), 10))
			}
		}
	}
	return out
}

// The NATS NetworkPolicy admits the reloader's metrics port (from the release namespace, like
// the monitor port), or neither a PodMonitor nor the annotations could reach it.
func TestNATSNetworkPolicyAdmitsReloaderMetrics(t *testing.T) {
	np := find(render(t), "NetworkPolicy", "obscura-nats")
	if np == nil {
		t.Fatal("NetworkPolicy/obscura-nats not rendered")
	}
	ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	for _, r := range ingress {
		ports, _, _ := unstructured.NestedSlice(r.(map[string]any), "ports")
		for _, p := range ports {
			if fmt.Sprint(p.(map[string]any)["port"]) == "9090" {
				return
			}
		}
	}
	t.Errorf("NetworkPolicy/obscura-nats admits no traffic to port 9090: %v", ingress)
}

// The schema rejects monitoring values the templates do not understand.
func TestChartSchemaRejectsBadMonitoringValues(t *testing.T) {
	for _, args := range [][]string{
		{"--set", "monitoring.prometheusOperator=yes"},
		{"--set", "monitoring.interval=30"},
		{"--set", "monitoring.rules.extra=true"},
	} {
		all := append([]string{"template", "obscura", "charts/obscura"}, args...)
		if out, err := testenv.Helm(t, all...); err == nil {
			t.Errorf("helm template %v accepted:\n%.300s", args, out)
		}
	}
}
