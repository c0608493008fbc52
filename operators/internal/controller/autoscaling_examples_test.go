package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestAutoscalingExamplesValidate (issue 14 item 3): the HPA and KEDA examples in
// config/autoscaling are accepted by a real API server with strict field validation — the HPA
// by the built-in autoscaling/v2 schema, the ScaledObject by KEDA's own CRD (v2.21.0, which
// hack/tools.sh takes from the KEDA Go module into bin/crds) — and both target a Round.
func TestAutoscalingExamplesValidate(t *testing.T) {
	ctx := context.Background()
	bin := os.Getenv("OBSCURA_BIN")
	if bin == "" {
		bin = "../../../bin"
	}
	crd := readObject(t, filepath.Join(bin, "crds", "keda.sh_scaledobjects.yaml"))
	if err := k8s.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("install KEDA's ScaledObject CRD: %v", err)
	}
	eventually(t, "KEDA's ScaledObject CRD established", func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(crd.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKey{Name: crd.GetName()}, u); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conds)
	})
	ns := namespace(t)
	for _, f := range []string{"round-hpa.yaml", "round-keda-scaledobject.yaml"} {
		u := readObject(t, filepath.Join("../../../config/autoscaling", f))
		ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "scaleTargetRef")
		if ref["apiVersion"] != "mohito.obscura.dev/v1alpha1" || ref["kind"] != "Round" {
			t.Errorf("%s: scaleTargetRef %v is not a Round", f, ref)
		}
		u.SetNamespace(ns)
		eventually(t, f+" accepted", func() error {
			return k8s.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict"))
		})
	}
}

func readObject(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (make tools puts KEDA's CRD into bin/crds)", err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}
