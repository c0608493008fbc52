package cluster

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// hpaDrivesScale is issue 14 item 3 on the cluster: a HorizontalPodAutoscaler (the example in
// config/autoscaling) drives the Round's decryption workers through the Round's scale
// subresource and the operator follows. The HPA's minReplicas (2) is above the workers' count
// (1), which the kube-controller-manager's HPA controller corrects on its next sync (5 s here)
// whatever the CPU figures say — so the phase does not depend on load. It then hands the count
// back to the operator.
func (e *env) hpaDrivesScale() {
	round := "rounds.mohito.obscura.dev/" + roundName
	e.run("kubectl", "patch", "-n", e.ns, round, "--type=merge",
		"-p", `{"spec":{"decryptWorkers":{"autoscaler":"External","replicas":1}}}`)
	hpa := filepath.Join(e.root, "config/autoscaling/round-hpa.yaml")
	e.run("kubectl", "apply", "-n", e.ns, "-f", hpa)
	testenv.Eventually(e.t, 3*time.Minute, "the HPA scales the Round's decrypt workers to its minimum (2)", func() error {
		u, err := e.resource("Round", roundName)
		if err != nil {
			return err
		}
		spec, _ := u.Object["spec"].(map[string]any)
		dw, _ := spec["decryptWorkers"].(map[string]any)
		if r := num(dw["replicas"]); r != 2 {
			return fmt.Errorf("Round spec.decryptWorkers.replicas %v", dw["replicas"])
		}
		want, ready, err := e.decryptWorkers()
		if err != nil {
			return err
		}
		if want != 2 || ready != 2 {
			return fmt.Errorf("decrypt worker Deployment wants %d, %d ready", want, ready)
		}
		return nil
	})
	out := e.run("kubectl", "get", "hpa", "-n", e.ns, "home-decrypt-workers", "-o", "jsonpath={.status.currentReplicas}/{.status.desiredReplicas}")
	e.t.Logf("HPA current/desired replicas: %s", out)
	e.run("kubectl", "delete", "-n", e.ns, "-f", hpa, "--wait=true")
	e.run("kubectl", "patch", "-n", e.ns, round, "--type=merge", "-p", `{"spec":{"decryptWorkers":{"autoscaler":"Operator"}}}`)
}
