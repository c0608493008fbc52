package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestOperatorImportsOnlyContracts: the operator's code (tests aside) imports from services
// only the systems' contract packages, keys and natsx (DESIGN.md: operators never import
// service internals), and nothing it links is a system's roles.
func TestOperatorImportsOnlyContracts(t *testing.T) {
	const services = "github.com/obscura-iot/obscura/services/"
	allowed := regexp.MustCompile(`^` + regexp.QuoteMeta(services) + `pkg/([a-z0-9]+/contract|keys|natsx)$`)
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, services) && !allowed.MatchString(imp) {
				t.Errorf("%s imports %s; the operator imports only the systems' contract packages, keys and natsx", f[0], imp)
			}
		}
	}
	deps, err := exec.Command("go", "list", "-deps", "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, deps)
	}
	for _, d := range strings.Fields(string(deps)) {
		if strings.HasPrefix(d, services) && strings.HasSuffix(d, "/roles") {
			t.Errorf("the operator links %s", d)
		}
	}
}
