package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/testenv"
)

// TestSupervisorRestartsServerInPlace runs the image's nats-server (built here) the way the chart
// does: the reloader's SIGTERM to the pid in the pid file stops only the server, which is running
// again under a new pid — the supervisor, the container's process, never exits — with its
// JetStream file store; the kubelet's SIGTERM to the supervisor ends both, exit code 0.
func TestSupervisorRestartsServerInPlace(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	pidFile := filepath.Join(dir, "nats.pid")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "host: %s\nport: %d\njetstream { store_dir: %q }\n", testenv.Host, port, filepath.Join(dir, "js")), 0o600); err != nil {
		t.Fatal(err)
	}
	sup := exec.Command(bin, "--config", conf, "--pid", pidFile)
	sup.Stdout, sup.Stderr = os.Stderr, os.Stderr
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	t.Cleanup(func() {
		_ = sup.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})
	url := fmt.Sprintf("nats://%s:%d", testenv.Host, port)
	serverPid := func() (int, error) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	// up waits for a server other than the one with pid not, answering with the stream S.
	up := func(what string, not int, publish bool) int {
		var pid int
		testenv.Eventually(t, time.Minute, what, func() error {
			p, err := serverPid()
			if err != nil {
				return err
			}
			if p == not || p == sup.Process.Pid {
				return fmt.Errorf("pid file holds %d", p)
			}
			return testenv.EnsureStream(url, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}, func(ctx context.Context, js jetstream.JetStream, s jetstream.Stream) error {
				if publish {
					if _, err := js.Publish(ctx, "s", []byte("kept")); err != nil {
						return err
					}
				}
				info, err := s.Info(ctx)
				if err != nil {
					return err
				}
				if info.State.Msgs != 1 {
					return fmt.Errorf("holds %d messages", info.State.Msgs)
				}
				pid = p
				return nil
			}, nats.Timeout(time.Second))
		})
		return pid
	}
	first := up("the first server with a stream of one message", 0, true)
	for i := range 2 {
		// The reloader's restart.
		if err := syscall.Kill(first, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		first = up(fmt.Sprintf("the server started again (%d), its message kept", i+1), first, false)
		select {
		case err := <-exited:
			t.Fatalf("the supervisor exited with the server: %v", err)
		default:
		}
	}
	// The kubelet's stop.
	if err := sup.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("supervisor stopped with %v, want exit code 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the supervisor did not stop within a minute of SIGTERM")
	}
	if err := syscall.Kill(first, 0); err == nil {
		t.Errorf("the server (pid %d) outlived the supervisor", first)
	}
}
