package lois

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// startNATS runs bin/nats-server with JetStream inside namespace n, listening on all of the
// namespace's addresses (port 4222), and stops it at cleanup.
func startNATS(t *testing.T, n netns) {
	t.Helper()
	bin := filepath.Join(os.Getenv("OBSCURA_BIN"), "nats-server")
	if os.Getenv("OBSCURA_BIN") == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			bin = p
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("needs nats-server (set OBSCURA_BIN to the repository's bin): %v", err)
	}
	d := testenv.StartDaemon(t, "nats-server", n.cmd(bin, "-js", "-sd", t.TempDir(), "-a", "0.0.0.0", "-p", "4222"))
	t.Cleanup(func() { d.Terminate(); d.Stopped(10 * time.Second) })
	testenv.Eventually(t, 20*time.Second, "nats-server accepting", func() error {
		if err := d.Exited(); err != nil {
			return err
		}
		c, err := n.dial("tcp4", "127.0.0.1:4222")
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// TestHTTPThroughLOISWithRegistrar: the same exchange with the keys coming from the
// registrar over JetStream instead of provisioned files. nats-server runs in the cloud
// namespace; the CI and the SI start with empty tables and follow the session stream;
// `lois register` publishes the device's session and writes the device's keys file only once
// both acknowledged installing it (install before use); then the DI starts with it and curl's
// exchange succeeds.
func TestHTTPThroughLOISWithRegistrar(t *testing.T) {
	w := setup(t, options{registrar: true})
	out := w.curl(t, "/registered")
	if !strings.HasPrefix(out, fmt.Sprintf("hello %s:", dipS)) {
		t.Fatalf("response %q", out)
	}
	if n := w.packets(t, w.cloud, "ci", "up", "ok"); n < 3 {
		t.Fatalf("CI forwarded %d packets", n)
	}
}
