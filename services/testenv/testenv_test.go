package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRootAndBin(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("RepoRoot() = %s, which holds no go.work: %v", root, err)
	}
	_, err = Bin("no-such-tool")
	if err == nil {
		t.Fatal("Bin of a missing tool succeeded")
	}
	requireContains(t, err.Error(), filepath.Join(root, "bin", "no-such-tool"), "make tools")
}

func TestFreePort(t *testing.T) {
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
		t.Fatalf("freePorts(3) = %v; want distinct ports", ports)
	}
	if p, err := FreePort(); err != nil || p <= 0 || p > 65535 {
		t.Fatalf("FreePort() = %d, %v", p, err)
	}
}
