package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// RunWithBinary is a TestMain body for tests of a shipped binary: it builds the main package
// pkg once into a temporary directory, sets *binary to its path, runs the tests and exits with
// their code, removing the directory. A failed build exits 1 with the compiler's output.
func RunWithBinary(m interface{ Run() int }, pkg string, binary *string) {
	name := path.Base(pkg)
	dir, err := os.MkdirTemp("", name+"-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = filepath.Join(dir, name)
	cmd := exec.Command(GoTool(), "build", "-o", *binary, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build %s: %v\n", name, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// GoTool is the go command that runs the tests: go test puts its own GOROOT/bin first in the
// PATH of the test binary, so the first "go" in PATH is the toolchain building this test.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}
