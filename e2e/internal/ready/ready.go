// Package ready waits for custom resources on a real API server to report Ready, the one wait
// the e2e packages share.
package ready

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

// Check returns nil when u's Ready condition is True for its current generation, otherwise
// why not (the condition's status, reason and message). A kind that runs to completion
// (EncounterSimulation) reports Complete instead of Ready: it is ready when Complete is True,
// or when an operator without the workload's image has validated it (reason ValidatedOnly),
// for its current generation.
func Check(u *unstructured.Unstructured) error {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		gen, _ := m["observedGeneration"].(int64)
		switch m["type"] {
		case "Ready":
			if m["status"] == "True" && gen == u.GetGeneration() {
				return nil
			}
		case "Complete":
			if gen == u.GetGeneration() && (m["status"] == "True" || m["reason"] == "ValidatedOnly") {
				return nil
			}
		default:
			continue
		}
		return fmt.Errorf("condition %v=%v %v: %v", m["type"], m["status"], m["reason"], m["message"])
	}
	return fmt.Errorf("no Ready (or Complete) condition yet")
}

// Wait waits up to a minute until the object u names is Ready (Check). alive, when set, ends
// the wait early with its error (a controller process that exited).
func Wait(t testing.TB, c client.Client, u *unstructured.Unstructured, alive func() error) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s %s Ready", u.GetKind(), u.GetName()), func() error {
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(u), cur); err != nil {
			return err
		}
		return Check(cur)
	})
}
