package main

import (
	"errors"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var roleNames = []string{"gateway", "coordinator", "decrypt-worker", "encoder", "responder", "shuffler", "vendor-agent"}

// TestFlagsMatchDocs checks every role's flags and environment variables
// against the table in docs/services.md, which the operator relies on.
func TestFlagsMatchDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/services.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `--([a-z-]+)` \\| ([^|]*) \\| [^|]* \\| ([^|]*) \\|$")
	envName := regexp.MustCompile("`(OBSCURA_[A-Z_]+)`")
	paren := regexp.MustCompile(`\([^)]*\)`)
	want := map[string]map[string]string{} // role → flag → "(env A or B)"
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var envs []string
		for _, e := range envName.FindAllStringSubmatch(m[2], -1) {
			envs = append(envs, e[1])
		}
		for _, r := range strings.FieldsFunc(paren.ReplaceAllString(m[3], ""), func(r rune) bool { return r == ',' || r == ';' }) {
			r = strings.TrimSpace(r)
			rs := []string{r}
			if r == "all" {
				rs = roleNames
			} else if !slices.Contains(roleNames, r) {
				t.Fatalf("docs/services.md: unknown role %q in %q", r, line)
			}
			for _, r := range rs {
				if want[r] == nil {
					want[r] = map[string]string{}
				}
				want[r][m[1]] = "(env " + strings.Join(envs, " or ") + ")"
			}
		}
	}
	if len(want) != len(roleNames) {
		t.Fatalf("docs/services.md table covers roleNames %v", want)
	}
	for _, role := range roleNames {
		f, _, err := bindRole(role)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		f.FlagSet().VisitAll(func(fl *flag.Flag) {
			got[fl.Name] = true
			w, ok := want[role][fl.Name]
			if !ok {
				t.Errorf("%s --%s is not in docs/services.md", role, fl.Name)
			} else if !strings.HasSuffix(fl.Usage, w) {
				t.Errorf("%s --%s usage %q, docs/services.md says %s", role, fl.Name, fl.Usage, w)
			}
		})
		for name := range want[role] {
			if !got[name] {
				t.Errorf("docs/services.md lists %s --%s, which the role does not have", role, name)
			}
		}
	}
}

func TestRoleEnvFallbacks(t *testing.T) {
	t.Setenv("OBSCURA_LISTEN", ":7000")
	t.Setenv("OBSCURA_FAKE_POOL_SIZE", "9")
	t.Setenv("OBSCURA_VENDOR_INDEX", "1")
	_, cfg, err := bindRole("gateway")
	if err != nil {
		t.Fatal(err)
	}
	if gw := cfg.(*GatewayConfig); gw.GRPCAddr != ":7000" {
		t.Errorf("gateway --grpc-addr = %q, want OBSCURA_LISTEN", gw.GRPCAddr)
	}
	_, cfg, _ = bindRole("shuffler")
	if sh := cfg.(*ShufflerConfig); sh.FakePool != 9 || sh.Vendor != 1 {
		t.Errorf("shuffler --fake-pool %d --vendor %d, want 9 and 1", sh.FakePool, sh.Vendor)
	}
	t.Setenv("OBSCURA_FAKE_POOL", "12")
	_, cfg, _ = bindRole("shuffler")
	if sh := cfg.(*ShufflerConfig); sh.FakePool != 12 {
		t.Errorf("shuffler --fake-pool %d, want OBSCURA_FAKE_POOL over OBSCURA_FAKE_POOL_SIZE", sh.FakePool)
	}
}

func TestMalformedEnvIsConfigError(t *testing.T) {
	t.Setenv("OBSCURA_MAX_ROUNDS", "many")
	_, err := parseRole("coordinator", nil)
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `OBSCURA_MAX_ROUNDS="many"`) {
		t.Fatalf("parseRole = %v, want a config error naming OBSCURA_MAX_ROUNDS", err)
	}
	t.Setenv("OBSCURA_ROUNDS", "ten")
	err = runLoadgen(nil)
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `OBSCURA_ROUNDS="ten"`) {
		t.Fatalf("runLoadgen = %v, want a config error naming OBSCURA_ROUNDS", err)
	}
}

func TestLoadgenHasNoAggregation(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = null
	t.Cleanup(func() { os.Stderr = stderr; null.Close() })
	if err := runLoadgen([]string{"-aggregation=false"}); !errors.Is(err, errConfig) {
		t.Errorf("loadgen -aggregation=false: %v, want a configuration error (demo only)", err)
	}
}
