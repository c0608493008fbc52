package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
	"github.com/obscura-iot/obscura/services/pkg/sddr/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestMailboxConfigErrors: every bad setting is a configuration error (exit status 2) before
// anything listens.
func TestMailboxConfigErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"listen":        {"--listen-addr", "8080"},
		"redis":         {"--redis-addr", "redis"},
		"ttl":           {"--ttl", "0s"},
		"size small":    {"--max-message-bytes", "104"},
		"size large":    {"--max-message-bytes", "4138"},
		"messages":      {"--max-messages", "0"},
		"rate":          {"--rate", "0"},
		"log level":     {"--log-level", "loud"},
		"password file": {"--redis-password-file", filepath.Join(t.TempDir(), "missing")},
		"stray":         {"extra"},
	} {
		if err := runMailbox(args); !errors.Is(err, daemon.ErrConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
}

// TestMailboxProcessesShareAHostPort runs two `sddr mailbox` processes as the operator runs
// its replicas on a host network (docs/sddr.md "The EncounterMailbox resource"): one API port
// shared with SO_REUSEPORT, metrics and health on port 0 published in each one's address file,
// which `sddr probe /readyz` reads; a sealed exchange goes through the shared port, a message
// above --max-message-bytes is refused, and both stop cleanly on SIGTERM.
func TestMailboxProcessesShareAHostPort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sddr")
	}
	bin := filepath.Join(t.TempDir(), "sddr")
	if out, err := exec.Command(testenv.GoTool(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build sddr: %v\n%s", err, out)
	}
	rd := testenv.StartRedis(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	api := net.JoinHostPort(testenv.Host, strconv.Itoa(port))
	var procs []*testenv.Daemon
	var addrFiles []string
	for i := range 2 {
		af := filepath.Join(t.TempDir(), "addr")
		cmd := exec.Command(bin, "mailbox")
		cmd.Env = append(os.Environ(), "OBSCURA_LISTEN_ADDR="+api, "OBSCURA_REUSE_PORT=true",
			"OBSCURA_METRICS_ADDR="+testenv.Host+":0", "OBSCURA_HEALTH_ADDR="+testenv.Host+":0", "OBSCURA_ADDR_FILE="+af,
			"OBSCURA_REDIS_ADDR="+rd.Addr(), "OBSCURA_MAX_MESSAGE_BYTES=1065")
		procs = append(procs, testenv.StartDaemon(t, fmt.Sprintf("mailbox-%d", i), cmd))
		addrFiles = append(addrFiles, af)
	}
	for i, af := range addrFiles {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("replica %d ready (sddr probe /readyz)", i), func() error {
			if err := procs[i].Exited(); err != nil {
				return fmt.Errorf("exited: %w", err)
			}
			probe := exec.Command(bin, "probe", "/readyz")
			probe.Env = append(os.Environ(), "OBSCURA_ADDR_FILE="+af)
			if out, err := probe.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}

	var id sddr.EncounterID
	var sk [sddr.KeySize]byte
	id[0], sk[0] = 1, 2
	a, _ := client.New(id, sk, 0)
	b, _ := client.New(id, sk, 1)
	c := &client.Client{BaseURL: "http://" + api, Token: "t"}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := c.Send(ctx, a, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Receive(ctx, b); err != nil || len(got) != 1 || string(got[0]) != "hello" {
		t.Fatalf("receive: %q, %v", got, err)
	}
	var se *client.StatusError
	if err := c.Send(ctx, a, make([]byte, 1100)); !errors.As(err, &se) || se.Reason != roles.ReasonTooLarge {
		t.Fatalf("a message above --max-message-bytes: %v, want %s", err, roles.ReasonTooLarge)
	}
	for _, p := range procs {
		if err := p.Terminate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if err := p.Stopped(30 * time.Second); err != nil {
			t.Error(err)
		}
	}
}
