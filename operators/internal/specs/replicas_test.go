package specs

import "testing"

// TestNATSReplicasEnv: with Runtime.NATSReplicas above 1 every role connected to NATS gets
// OBSCURA_NATS_REPLICAS (its --nats-replicas), so the streams, buckets and object stores it
// creates are replicated on a JetStream cluster; with 0 or 1 the template sets nothing (no
// rollout of existing workloads), nor for a pod without NATS.
func TestNATSReplicasEnv(t *testing.T) {
	env := func(p Pod, rt Runtime) (string, bool) {
		for _, e := range p.Template(rt).Spec.Containers[0].Env {
			if e.Name == EnvNATSReplicas {
				return e.Value, true
			}
		}
		return "", false
	}
	withNATS := Pod{Role: "gateway", Image: "img", NATSSecret: "integrator-nats", CPU: "10m", Memory: "64Mi"}
	if v, ok := env(withNATS, Runtime{NATSReplicas: 3}); !ok || v != "3" {
		t.Errorf("3 replicas: %s=%q (set %v), want \"3\"", EnvNATSReplicas, v, ok)
	}
	for _, n := range []int{0, 1} {
		if v, ok := env(withNATS, Runtime{NATSReplicas: n}); ok {
			t.Errorf("%d replicas: %s=%q set, want nothing", n, EnvNATSReplicas, v)
		}
	}
	noNATS := Pod{Role: "edge", Image: "img", CPU: "10m", Memory: "64Mi"}
	if v, ok := env(noNATS, Runtime{NATSReplicas: 3}); ok {
		t.Errorf("a pod without NATS: %s=%q", EnvNATSReplicas, v)
	}
}
