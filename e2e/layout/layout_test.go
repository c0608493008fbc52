// Package layout checks the import rules of docs/architecture.md with `go list -deps`: the
// protocol cores import no transport, clients link no server roles, contracts import only the
// standard library and natsx, and the operators import nothing of the services but the
// contracts, keys and natsx.
package layout

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/obscura-iot/obscura/"

// deps lists the non-test dependencies of the packages matching pattern, run from dir.
func deps(t *testing.T, dir string, pattern ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`}, pattern...)
	out := map[string][]string{}
	for _, p := range pattern {
		cmd := exec.Command("go", append(args[:4:4], p)...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", p, err, b)
		}
		out[p] = strings.Fields(string(b))
	}
	return out
}

func root(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// forbid fails for every dependency of a package that has one of the prefixes.
func forbid(t *testing.T, got map[string][]string, why string, prefixes ...string) {
	t.Helper()
	for pkg, ds := range got {
		for _, d := range ds {
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(d, p) }) {
				t.Errorf("%s imports %s: %s", pkg, d, why)
			}
		}
	}
}

var transports = []string{"github.com/nats-io/", "github.com/redis/", "k8s.io/", "sigs.k8s.io/", "google.golang.org/grpc", "github.com/hashicorp/vault"}

func TestCoresImportNoTransport(t *testing.T) {
	got := deps(t, filepath.Join(root(t), "services"), "./pkg/mohito", "./pkg/pda", "./pkg/pda/ring", "./pkg/pps", "./pkg/pps/dsl", "./pkg/okvs", "./pkg/gc", "./pkg/ot", "./pkg/lois", "./pkg/sddr", "./pkg/sddr/bloom")
	forbid(t, got, "a protocol core or primitive imports no NATS, Redis, Kubernetes, gRPC or Vault", transports...)
	forbid(t, got, "a core imports no runtime of its system", module+"services/pkg/mohito/", module+"services/pkg/pda/roles", module+"services/pkg/pps/roles", module+"services/pkg/lois/roles", module+"services/pkg/daemon")
}

func TestClientsLinkNoRoles(t *testing.T) {
	got := deps(t, filepath.Join(root(t), "services"), "./pkg/mohito/client", "./pkg/pda/client")
	forbid(t, got, "a client never links the server roles", module+"services/pkg/mohito/roles", module+"services/pkg/pda/roles", module+"services/pkg/daemon")
}

func TestContractsImportStdlibAndNatsxOnly(t *testing.T) {
	for _, pkg := range []string{"./pkg/mohito/contract", "./pkg/pda/contract"} {
		cmd := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, pkg)
		cmd.Dir = filepath.Join(root(t), "services")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, b)
		}
		for _, d := range strings.Fields(string(b)) {
			if strings.Contains(strings.Split(d, "/")[0], ".") && d != module+"services/pkg/natsx" {
				t.Errorf("%s imports %s: a contract imports the standard library and natsx only", pkg, d)
			}
		}
	}
}

func TestOperatorsImportOnlyContractsKeysAndNatsx(t *testing.T) {
	got := deps(t, filepath.Join(root(t), "operators"), "./...")
	allowed := func(d string) bool {
		return strings.HasSuffix(d, "/contract") || d == module+"services/pkg/keys" || d == module+"services/pkg/natsx" ||
			d == module+"services/pkg/envflag" || d == module+"services/pkg/clock"
	}
	for pkg, ds := range got {
		for _, d := range ds {
			if strings.HasPrefix(d, module+"services/") && !allowed(d) {
				t.Errorf("%s imports %s: the operators import the systems' contracts, keys and natsx only", pkg, d)
			}
		}
	}
}

// TestNoSystemNamesOnTheSharedFloor: outside a system's folder no package is named after a
// system.
func TestNoSystemNamesOnTheSharedFloor(t *testing.T) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = filepath.Join(root(t), "services")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, b)
	}
	systems := []string{"mohito", "pda", "pps", "lois", "sddr", "round"}
	for _, p := range strings.Fields(string(b)) {
		rel := strings.TrimPrefix(p, module+"services/")
		parts := strings.Split(rel, "/")
		if len(parts) < 2 || parts[0] != "pkg" {
			continue // cmd/<system> and proto are named for what they serve
		}
		if slices.Contains(systems[:5], parts[1]) {
			continue // inside a system's folder
		}
		for _, s := range systems {
			if strings.Contains(rel, s) {
				t.Errorf("%s is outside a system's folder but named after %q", rel, s)
			}
		}
	}
}
