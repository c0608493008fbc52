package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
