package manifests

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/obscura-iot/obscura/services/testenv"
)

func kustomize(t *testing.T, dir string) string {
	t.Helper()
	bin, err := testenv.Bin("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "build", dir)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return string(out)
}

func TestKustomizeDefaultAcceptedByAPIServer(t *testing.T) {
	kinds := dryRunAll(t, kustomize(t, "config/default"))
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Every CRD make generate writes (one per kind).
	crds, err := filepath.Glob(filepath.Join(root, "crds", "*.obscura.dev_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("crds/: %d CRDs (%v), want every kind's", len(crds), err)
	}
	for k, want := range map[string]int{"CustomResourceDefinition": len(crds), "Deployment": 1, "ClusterRole": 1, "Namespace": 1} {
		if kinds[k] != want {
			t.Errorf("config/default renders %d %s, want %d (all: %v)", kinds[k], k, want, kinds)
		}
	}
}

func TestKustomizeSamplesAcceptedByAPIServer(t *testing.T) {
	kinds := dryRunAll(t, kustomize(t, "config/samples"), "default")
	for _, k := range []string{"Vendor", "Shuffler", "Round", "AggregationJob", "SecurePipeline", "EncounterMailbox"} {
		if kinds[k] != 1 {
			t.Errorf("config/samples renders %d %s, want 1", kinds[k], k)
		}
	}
}
