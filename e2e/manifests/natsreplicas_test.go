package manifests

import (
	"strings"
	"testing"
)

// TestChartNATSReplicas: nats.jetstream.replicas reaches the operator as --nats-replicas (which
// passes it to every workload) when above 1 and with an external NATS; the chart's own NATS is
// one server, so replicas above 1 with it is refused, as is a count JetStream does not take;
// at 1 (the default) the operator gets no flag.
func TestChartNATSReplicas(t *testing.T) {
	external := []string{"--set", "nats.enabled=false", "--set", "nats.url=nats://nats-0.nats:4222"}
	out, err := helm(t, append([]string{"template", "x", "charts/obscura", "--show-only", "templates/operator-deployment.yaml",
		"--set", "nats.jetstream.replicas=3"}, external...)...)
	if err != nil || !strings.Contains(out, "- --nats-replicas=3\n") {
		t.Errorf("replicas 3 with an external NATS: %v; want --nats-replicas=3 in\n%s", err, out)
	}
	out, err = helm(t, append([]string{"template", "x", "charts/obscura", "--show-only", "templates/operator-deployment.yaml"}, external...)...)
	if err != nil || strings.Contains(out, "--nats-replicas") {
		t.Errorf("default replicas: %v; want no --nats-replicas in\n%s", err, out)
	}
	if out, err := helm(t, "template", "x", "charts/obscura", "--set", "nats.jetstream.replicas=3"); err == nil || !strings.Contains(out, "needs a JetStream cluster") {
		t.Errorf("replicas 3 with the chart's single NATS server: %v\n%s", err, out)
	}
	if out, err := helm(t, append([]string{"template", "x", "charts/obscura", "--set", "nats.jetstream.replicas=2"}, external...)...); err == nil || !strings.Contains(out, "schema") {
		t.Errorf("replicas 2: %v\n%s", err, out)
	}
}
