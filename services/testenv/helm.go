package testenv

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Helm runs the pinned bin/helm with args in the repository root (so chart paths are
// relative to it), its cache, config and data kept in the test's temporary directory, and
// returns its combined output. A missing helm fails the test.
func Helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin, err := Bin("helm")
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	tmp := t.TempDir()
	cmd.Env = []string{"HOME=" + tmp, "HELM_CACHE_HOME=" + filepath.Join(tmp, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(tmp, "config"), "HELM_DATA_HOME=" + filepath.Join(tmp, "data")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
