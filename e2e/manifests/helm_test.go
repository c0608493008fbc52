// Package manifests checks what users apply: the Helm chart (helm lint passes, the schema
// rejects bad values) and the kustomize bases, and that every object they render is accepted
// by a real API server (server-side dry run), which validates it against the server's own
// schemas.
package manifests

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/testenv"
)

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := testenv.Bin("helm")
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	// Keep helm's caches and config inside the test's temporary directory.
	tmp := t.TempDir()
	cmd.Env = []string{"HOME=" + tmp, "HELM_CACHE_HOME=" + filepath.Join(tmp, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(tmp, "config"), "HELM_DATA_HOME=" + filepath.Join(tmp, "data")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestChartLints(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", "charts/obscura"); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

func TestChartSchemaRejectsBadValues(t *testing.T) {
	for _, set := range []string{"operator.replicas=-1", "operator.image.pullPolicy=Sometimes", "vault.address=vault:8200", "operator.unknown=1"} {
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

func TestRenderedChartAcceptedByAPIServer(t *testing.T) {
	out, err := helm(t, "template", "obscura", "charts/obscura", "--namespace", "obscura-system",
		"--set", "vault.address=https://vault.vault.svc:8200")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	kinds := dryRunAll(t, out, "obscura-system")
	for _, k := range []string{"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if kinds[k] == 0 {
			t.Errorf("chart renders no %s (got %v)", k, kinds)
		}
	}
}

// dryRunAll creates every object of a multi-document YAML stream on a fresh API server with
// a server-side dry run, after creating the namespaces given, and counts the kinds.
// CustomResourceDefinitions are checked against crds/ instead: the server already has them.
func dryRunAll(t *testing.T, manifests string, namespaces ...string) map[string]int {
	t.Helper()
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k8s, err := api.Client(scheme)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range namespaces {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
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
		if namespaced, err := k8s.IsObjectNamespaced(u); err != nil {
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
