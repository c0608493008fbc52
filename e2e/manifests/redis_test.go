package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestChartRedisAppendOnly: an instance with appendfsync runs redis-server with the append-only
// file on its data volume and that fsync policy (the integrator's durability decision,
// docs/services.md); an instance without it stays in memory only; the schema refuses any other
// policy; the integrator's has it by default.
func TestChartRedisAppendOnly(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("redis:\n  instances:\n    - {name: integrator, port: 6379, appendfsync: always}\n    - {name: pda-db, port: 6381}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "template", "x", "charts/obscura", "-f", values, "--show-only", "templates/redis.yaml")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	docs := strings.Split(out, "\n---\n")
	args := func(instance string) string {
		for _, d := range docs {
			if strings.Contains(d, "kind: Deployment") && strings.Contains(d, "name: x-obscura-redis-"+instance+"\n") {
				return strings.Join(strings.Fields(d[strings.Index(d, "args:"):strings.Index(d, "ports:")]), " ")
			}
		}
		t.Fatalf("no Deployment of the %s Redis in\n%s", instance, out)
		return ""
	}
	if a := args("integrator"); !strings.Contains(a, `- --appendonly - "yes" - --appendfsync - "always" - --auto-aof-rewrite-min-size - 16mb - --dir - /data`) {
		t.Errorf("integrator Redis args %s: want the append-only file, fsync always, in /data", a)
	}
	if a := args("pda-db"); !strings.Contains(a, `- --appendonly - "no"`) || strings.Contains(a, "appendfsync") {
		t.Errorf("pda-db Redis args %s: want in memory only", a)
	}
	// The chart's defaults and the local cluster's values keep the integrator's on (issue 14 item 5).
	for _, vf := range []string{"", "charts/obscura/values-local.yaml"} {
		a := []string{"template", "x", "charts/obscura", "--show-only", "templates/redis.yaml"}
		if vf != "" {
			a = append(a, "-f", vf)
		}
		out, err := helm(t, a...)
		if err != nil {
			t.Fatalf("helm template %s: %v\n%s", vf, err, out)
		}
		if !strings.Contains(strings.Join(strings.Fields(out), " "), `- --appendonly - "yes" - --appendfsync - "always"`) {
			t.Errorf("values %q: the integrator's Redis runs without the fsynced append-only file", vf)
		}
	}
	if out, err := helm(t, "template", "x", "charts/obscura", "--set", "redis.instances[0].name=integrator",
		"--set", "redis.instances[0].port=6379", "--set", "redis.instances[0].appendfsync=no"); err == nil || !strings.Contains(out, "schema") {
		t.Errorf("appendfsync=no rendered or failed for another reason: %v\n%s", err, out)
	}
}

// TestRedisDataSizedFromMaxMemory: an instance with the append-only file gets a data volume of
// 3 × redis.maxMemory + 32Mi (the base, its increments up to the base's size and a rewrite's new
// base: the largest the file grows) and asks for that ephemeral storage, so the kubelet never
// evicts it for its own file (the cluster e2e's ×8 load outgrew the 64Mi it had: the integrator's
// Redis was evicted mid-round and restarted empty); an in-memory instance keeps a small volume.
func TestRedisDataSizedFromMaxMemory(t *testing.T) {
	for _, c := range []struct {
		maxMemory, instance       string
		sizeLimit, request, limit string
	}{
		{"256mb", "integrator", "800Mi", "288Mi", "832Mi"},
		{"1gb", "integrator", "3104Mi", "1056Mi", "3136Mi"},
		{"262144kb", "integrator", "800Mi", "288Mi", "832Mi"},
		{"256mb", "pda-db", "16Mi", "32Mi", "64Mi"},
	} {
		t.Run(c.maxMemory+"-"+c.instance, func(t *testing.T) {
			_, objs := renderChart(t, chartCase{namespace: chartNamespace, args: []string{"--set", "redis.maxMemory=" + c.maxMemory,
				"--set", "redis.instances[0].name=integrator", "--set", "redis.instances[0].port=6379", "--set", "redis.instances[0].appendfsync=always",
				"--set", "redis.instances[1].name=pda-db", "--set", "redis.instances[1].port=6381"}})
			u := findObject(objs, "Deployment", "obscura-redis-"+c.instance)
			if u == nil {
				t.Fatalf("Deployment/obscura-redis-%s not rendered", c.instance)
			}
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				t.Fatal(err)
			}
			spec := d.Spec.Template.Spec
			var size *resource.Quantity
			for _, v := range spec.Volumes {
				if v.Name == "data" && v.EmptyDir != nil {
					size = v.EmptyDir.SizeLimit
				}
			}
			if size == nil || !size.Equal(resource.MustParse(c.sizeLimit)) {
				t.Errorf("data volume limit %v, want %s", size, c.sizeLimit)
			}
			checkEphemeral(t, "redis", spec.Containers[0].Resources, c.request, c.limit)
		})
	}
}

// checkEphemeral checks a container's ephemeral-storage request and limit.
func checkEphemeral(t *testing.T, name string, res corev1.ResourceRequirements, request, limit string) {
	t.Helper()
	if q := res.Requests[corev1.ResourceEphemeralStorage]; !q.Equal(resource.MustParse(request)) {
		t.Errorf("%s ephemeral-storage request %s, want %s", name, q.String(), request)
	}
	if q := res.Limits[corev1.ResourceEphemeralStorage]; !q.Equal(resource.MustParse(limit)) {
		t.Errorf("%s ephemeral-storage limit %s, want %s", name, q.String(), limit)
	}
}
