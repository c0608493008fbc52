// Package manifests checks what users apply: the Helm chart (helm lint passes, the schema
// rejects bad values) and the kustomize bases, and that every object they render is accepted
// by a real API server (server-side dry run), which validates it against the server's own
// schemas.
package manifests

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return testenv.Helm(t, args...)
}

func TestChartLints(t *testing.T) {
	for _, args := range [][]string{nil, {"-f", "charts/obscura/values-local.yaml"}} {
		if out, err := helm(t, append([]string{"lint", "--strict", "charts/obscura"}, args...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

func TestChartSchemaRejectsBadValues(t *testing.T) {
	for _, set := range []string{
		"operator.replicas=-1", "images.operator.pullPolicy=Sometimes", "vault.address=vault:8200",
		"operator.unknown=1", "images.nats.digest=sha256:short", "edge.port=0", "redis.instances[0].name=Bad_Name",
		"platform.unknown=1", "edge.rateLimit.fillInterval=soon", "nats.ports.mqtt=70000", "edge.tls.certManager.issuerRef.kind=Other",
	} {
		out, err := helm(t, "template", "x", "charts/obscura", "--set", set)
		if err == nil {
			t.Errorf("--set %s rendered; want a values.schema.json error", set)
			continue
		}
		if !strings.Contains(out, "values don't meet the specifications of the schema") && !strings.Contains(out, "schema") {
			t.Errorf("--set %s failed for another reason: %s", set, out)
		}
	}
}

// dryRunAll creates every object of a multi-document YAML stream on a fresh API server with
// a server-side dry run, after creating the namespaces given, and counts the kinds.
// CustomResourceDefinitions are checked against crds/ instead: the server already has them.
func dryRunAll(t *testing.T, manifests string, namespaces ...string) map[string]int {
	t.Helper()
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	k8s := api.ClientT(t)
	ctx := context.Background()
	for _, ns := range namespaces {
		// Enforce the restricted Pod Security level wherever the chart runs on a pod network:
		// the API server itself then rejects a non-compliant Pod (the helm test hook).
		labels := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}
		if ns == localNamespace {
			labels = map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}
		}
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	installed := map[string]bool{}
	for _, crd := range api.CRDs {
		installed[crd.Name] = true
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifests)), 4096)
	kinds := map[string]int{}
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		kinds[u.GetKind()]++
		if u.GetKind() == "CustomResourceDefinition" {
			if !installed[u.GetName()] {
				t.Errorf("rendered CRD %s is not one of crds/", u.GetName())
			}
			continue
		}
		if namespaced, err := k8s.IsObjectNamespaced(u); meta.IsNoMatchError(err) && u.GroupVersionKind().Group == certManagerGroup {
			// cert-manager's CRDs are not installed here; chart_test.go checks these objects.
			continue
		} else if err != nil {
			t.Errorf("rendered %s %s: %v", u.GetKind(), u.GetName(), err)
			continue
		} else if namespaced && u.GetNamespace() == "" {
			u.SetNamespace("default") // as kubectl apply does
		}
		opts := []client.CreateOption{client.DryRunAll}
		if u.GetKind() == "Namespace" {
			// The namespaced objects that follow need it to exist for real.
			opts = nil
		}
		if err := k8s.Create(ctx, u, opts...); err != nil {
			t.Errorf("API server rejects rendered %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	return kinds
}
