// Package specstest is what the builders' tests share: golden files under the testing
// package's testdata/ (rewritten with `go test ./internal/specs/... -update`) and the samples
// of config/samples. Only tests import it.
package specstest

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// ReadSample reads config/samples/name into into, refusing unknown fields.
func ReadSample(t *testing.T, name string, into any) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	// self is operators/internal/specs/specstest/specstest.go; the samples are at the root.
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "..", "..", "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Golden compares objs, as YAML documents with their kinds named as kubectl shows them, with
// testdata/name.
func Golden(t *testing.T, name string, objs ...any) {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		ro := o.(k8sruntime.Object)
		gvk, err := apiutil.GVKForObject(ro, clientgoscheme.Scheme)
		if err != nil {
			t.Fatal(err)
		}
		ro.GetObjectKind().SetGroupVersionKind(gvk)
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	GoldenText(t, name, b.String())
}

// GoldenText compares got with testdata/name.
func GoldenText(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file; if the change is intended run `go test ./internal/specs/... -update` and review the diff.\n%s",
			path, firstDiff(got, string(want)))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "line " + strconv.Itoa(i+1) + ":\n  got:  " + al[i] + "\n  want: " + bl[i]
		}
	}
	return "lengths differ"
}
