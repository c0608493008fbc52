package manifests

import (
	"strings"
	"testing"
)

// TestChartNATSReplicas: nats.jetstream.replicas reaches the operator as --nats-replicas (which
// passes it to every workload) when above 1, with an external NATS or with the chart's own NATS
// run as a cluster of at least as many nodes (nats.cluster.replicas); more replicas than nodes,
// an even node count and a count JetStream does not take are refused; at 1 (the default) the
// operator gets no flag.
func TestChartNATSReplicas(t *testing.T) {
	external := []string{"--set", "nats.enabled=false", "--set", "nats.url=nats://nats-0.nats:4222"}
	op := []string{"template", "x", "charts/obscura", "--show-only", "templates/operator-deployment.yaml"}
	out, err := helm(t, append(append(op, "--set", "nats.jetstream.replicas=3"), external...)...)
	if err != nil || !strings.Contains(out, "- --nats-replicas=3\n") {
		t.Errorf("replicas 3 with an external NATS: %v; want --nats-replicas=3 in\n%s", err, out)
	}
	out, err = helm(t, append(op, external...)...)
	if err != nil || strings.Contains(out, "--nats-replicas") {
		t.Errorf("default replicas: %v; want no --nats-replicas in\n%s", err, out)
	}
	out, err = helm(t, append(op, "--set", "nats.jetstream.replicas=3", "--set", "nats.cluster.replicas=3")...)
	if err != nil || !strings.Contains(out, "- --nats-replicas=3\n") {
		t.Errorf("replicas 3 on the chart's 3-node cluster: %v; want --nats-replicas=3 in\n%s", err, out)
	}
	out, err = helm(t, append(op, "--set", "nats.jetstream.replicas=3", "--set", "nats.cluster.replicas=5")...)
	if err != nil || !strings.Contains(out, "- --nats-replicas=3\n") {
		t.Errorf("replicas 3 on the chart's 5-node cluster: %v; want --nats-replicas=3 in\n%s", err, out)
	}
	for _, set := range [][]string{
		{"--set", "nats.jetstream.replicas=3"},
		{"--set", "nats.jetstream.replicas=5", "--set", "nats.cluster.replicas=3"},
	} {
		if out, err := helm(t, append([]string{"template", "x", "charts/obscura"}, set...)...); err == nil || !strings.Contains(out, "needs a JetStream cluster") {
			t.Errorf("%v: more replicas than the chart's NATS nodes: %v\n%s", set, err, out)
		}
	}
	for _, set := range []string{"nats.jetstream.replicas=2", "nats.cluster.replicas=2", "nats.cluster.replicas=4", "nats.cluster.port=0"} {
		if out, err := helm(t, "template", "x", "charts/obscura", "--set", set); err == nil || !strings.Contains(out, "schema") {
			t.Errorf("%s: %v\n%s", set, err, out)
		}
	}
}
