package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

// hpaDrivesScale is issue 14 item 3 on the cluster: a HorizontalPodAutoscaler (the example in
// config/autoscaling) drives the Round's decryption workers through the Round's scale
// subresource and the operator follows. The workers start at 1, below the HPA's minReplicas (2),
// so the HPA must act whatever the CPU figures say (on this cluster the workers' CPU request is
// tiny, so their utilisation usually takes it to its maximum, 3). The phase asserts that the
// Round's count is the HPA's decision, at least its minimum, and that the workers' Deployment runs
// it; then it hands the count back to the operator.
func (e *env) hpaDrivesScale() {
	ctx := context.Background()
	round := "rounds.mohito.obscura.dev/" + roundName
	e.run("kubectl", "patch", "-n", e.ns, round, "--type=merge",
		"-p", `{"spec":{"decryptWorkers":{"autoscaler":"External","replicas":1}}}`)
	hpaFile := filepath.Join(e.root, "config/autoscaling/round-hpa.yaml")
	e.run("kubectl", "apply", "-n", e.ns, "-f", hpaFile)
	var desired int32
	testenv.Eventually(e.t, 3*time.Minute, "the Round's decrypt workers follow the HPA", func() error {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := e.k.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "home-decrypt-workers"}, hpa); err != nil {
			return err
		}
		desired = hpa.Status.DesiredReplicas
		if desired < 2 {
			return fmt.Errorf("HPA desired replicas %d (minimum 2)", desired)
		}
		u, err := e.resource("Round", roundName)
		if err != nil {
			return err
		}
		spec, _ := u.Object["spec"].(map[string]any)
		dw, _ := spec["decryptWorkers"].(map[string]any)
		if r := num(dw["replicas"]); r != float64(desired) {
			return fmt.Errorf("Round spec.decryptWorkers.replicas %v, HPA desired %d", dw["replicas"], desired)
		}
		want, ready, err := e.decryptWorkers()
		if err != nil {
			return err
		}
		if want != desired || ready != desired {
			return fmt.Errorf("decrypt worker Deployment wants %d, %d ready; HPA desired %d", want, ready, desired)
		}
		return nil
	})
	e.t.Logf("the HPA took the Round's decrypt workers from 1 to %d through the scale subresource", desired)
	e.run("kubectl", "delete", "-n", e.ns, "-f", hpaFile, "--wait=true")
	e.run("kubectl", "patch", "-n", e.ns, round, "--type=merge", "-p", `{"spec":{"decryptWorkers":{"autoscaler":"Operator"}}}`)
}
