// Package images runs the image builder's own tests (hack/images is a module of its own, outside
// go.work, so that go-containerregistry stays out of the platform's modules): an image built twice
// has one digest, runs as the non-root user, and carries its entrypoint.
package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/obscura-iot/obscura/services/testenv"
)

func TestImageBuilder(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = filepath.Join(root, "hack", "images")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/images tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
