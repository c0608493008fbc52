package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartValuesPinImages: the values file `make images` writes makes the chart run exactly the
// images built — repository, tag and digest — for every component the chart runs (rendered by the
// pinned helm in ./bin), and leaves out what the chart does not run.
func TestChartValuesPinImages(t *testing.T) {
	root, _ := filepath.Abs("../..")
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v (make tools builds helm)", err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	idx := &Index{Components: map[string]*Result{
		"operator":    {Image: "localhost/obscura/operator:0123456789ab", Digest: digest},
		"mohito":      {Image: "localhost/obscura/mohito:0123456789ab", Digest: digest},
		"nats-server": {Image: "localhost/obscura/nats-server:0123456789ab", Digest: digest},
		"vault":       {Image: "localhost/obscura/vault:0123456789ab", Digest: digest},
	}}
	path := filepath.Join(t.TempDir(), "values-images.yaml")
	if err := writeChartValues(path, idx); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "vault") {
		t.Errorf("the chart runs no vault image, the values name one:\n%s", b)
	}
	out, err := exec.Command(helm, "template", "obscura", filepath.Join(root, "charts/obscura"),
		"-f", filepath.Join(root, "charts/obscura/values-local.yaml"), "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	for _, want := range []string{"localhost/obscura/operator:0123456789ab@" + digest, "localhost/obscura/nats-server:0123456789ab@" + digest} {
		if !strings.Contains(string(out), "image: "+want) && !strings.Contains(string(out), `image: "`+want+`"`) {
			t.Errorf("rendered chart has no image %s", want)
		}
	}
	if !strings.Contains(string(out), "localhost/obscura/mohito:0123456789ab@"+digest) {
		t.Error("the operator is not told the pinned mohito image")
	}
}
