package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRoleWithAnotherWindowExits2 (issue 15 item 8) runs `pda oracle` as a process against a
// NATS whose pool stream a job with a one-hour window created: an oracle started with
// --window 2m exits with status 2 and says why, and the stream keeps its retention. Before, the
// role rewrote the shared stream's max age and ran.
func TestRoleWithAnotherWindowExits2(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pda")
	if out, err := exec.Command(testenv.GoTool(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build pda: %v\n%s", err, out)
	}
	keygen := func(role string) (file, pub string) {
		file = filepath.Join(dir, role+".json")
		out, err := exec.Command(bin, "keygen", "--role", role, "--out", file).Output()
		if err != nil {
			t.Fatalf("keygen %s: %v", role, err)
		}
		return file, strings.TrimSpace(string(out))
	}
	proxyKeys, proxyPub := keygen("proxy")
	_, dbPub := keygen("db")

	n := testenv.StartNATS(t)
	js := n.JetStream(t)
	live := (&pdaroles.Job{WindowLength: time.Hour, Grace: 30 * time.Second}).PoolRetention()
	if err := pdaroles.EnsureProxyDomain(t.Context(), js, live); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // bounds a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "oracle", "--nats-url", n.URL(), "--keys", proxyKeys,
		"--proxy-public-key", proxyPub, "--db-public-key", dbPub, "--window", "2m", "--grace", "30s",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("oracle with another window: %v, want exit status 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "every role of a job must run with one window and grace") {
		t.Fatalf("the exit does not say why:\n%s", out)
	}
	s, err := js.Stream(t.Context(), contract.PoolStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != live {
		t.Fatalf("the pool's max age is %v, want the live %v", got, live)
	}
}
