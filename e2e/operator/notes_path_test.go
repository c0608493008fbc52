package operator

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestNotesPathSamplesReady runs the chart NOTES' sample commands against a real API server
// under the operator's manager binary (no workload images: it validates and reports Ready):
// `kubectl apply -k config/samples` (kustomize's build, applied server-side) and then `go run ./services/cmd/obscura provision`, both from
// the repository's root as a user types them. Every sample of the kustomization must become
// Ready (Complete) — nothing left at KeySecretNotFound, SecretNotFound, NamespaceNotFound,
// PublicKeyMissing or InvalidKey — which is what the namespaces, keys and Secrets provision makes
// must satisfy (issue 19 item 5; the hand-made Secrets of the test above are the other path).
func TestNotesPathSamplesReady(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	k8s := api.ClientT(t)
	startManager(t, root, api.KubeConfig)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, api.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	const ns = "obscura"
	mustCreate(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	run := func(name string, args ...string) string {
		t.Helper()
		bin := name
		if name == "kustomize" {
			bin = filepath.Join(root, "bin", "kustomize")
		}
		cmd := exec.Command(bin, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		t.Logf("$ %s %s\n%s", name, strings.Join(args, " "), out.String())
		return out.String()
	}
	// The NOTES' commands for a release in namespace obscura (charts/obscura/templates/NOTES.txt).
	// `kubectl apply -n obscura -k config/samples` is kustomize's build applied server-side into
	// the namespace: make test installs kustomize (the engine kubectl embeds), not kubectl, so the
	// test builds with it and applies each object as kubectl would.
	rendered := run("kustomize", "build", "config/samples")
	var samples []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		samples = append(samples, u)
	}
	for _, u := range samples {
		if err := k8s.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	run("go", "run", "./services/cmd/obscura", "provision", "--namespace", ns)

	n := 0
	for _, u := range samples {
		ready.Wait(t, k8s, u, nil)
		n++
	}
	if n < 8 {
		t.Errorf("%d samples in the kustomization, want every kind's (8)", n)
	}
}
