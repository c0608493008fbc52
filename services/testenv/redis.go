package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis is a redis-server process started by StartRedis.
type Redis struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// LogPath is the server's log (stdout and stderr), under the test's temporary directory.
	LogPath string

	client *redis.Client
	proc   *process
	bin    string
	args   []string // the full command line, for Restart
	dir    string
	starts int
}

// Addr returns "127.0.0.1:<port>".
func (r *Redis) Addr() string { return net.JoinHostPort(Host, strconv.Itoa(r.Port)) }

// Client returns a go-redis client for this server, closed at cleanup before the server stops.
func (r *Redis) Client() *redis.Client { return r.client }

// StartRedis starts `redis-server` from <root>/bin on 127.0.0.1 and a free port, with no
// persistence (--save "" --appendonly no) and its working directory under t.TempDir().
// Extra args are appended as redis-server command-line options, which override earlier ones
// (e.g. "--maxmemory", "1mb"); --bind and --port belong to the harness. It returns once the
// server answers PING, and stops it (SIGTERM, then SIGKILL) at cleanup.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	bin, err := Bin("redis-server")
	if err != nil {
		t.Fatalf("testenv: start redis: %v", err)
	}
	for _, a := range args {
		if a == "--bind" || a == "--port" {
			t.Fatalf("testenv: start redis: %s is chosen by the harness (only %s, a free port); remove it from the args", a, Host)
		}
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("testenv: start redis: %v", err)
		}
		full := append([]string{
			"--bind", Host, "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", dir,
		}, args...)
		logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
		p, err := startProcess("redis-server", bin, full, dir, logPath)
		if err != nil {
			t.Fatalf("testenv: start redis: %v", err)
		}
		addr := net.JoinHostPort(Host, strconv.Itoa(port))
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		err = p.waitReady(ctx, func(ctx context.Context) error { return redisPing(ctx, addr) })
		cancel()
		if err != nil {
			_ = p.stop(time.Second)
			if attempt < bindAttempts && p.bindConflict() {
				continue
			}
			t.Fatal(p.failure(fmt.Sprintf("redis-server %s on %s did not answer PING", bin, addr), err))
		}
		r := &Redis{Port: port, LogPath: logPath, proc: p, bin: bin, args: full, dir: dir, starts: attempt}
		r.client = redis.NewClient(&redis.Options{
			Addr: addr,
			// Redis 7.0 knows neither CLIENT SETINFO nor maintenance notifications; asking would
			// only produce handshake noise in the test output.
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		t.Cleanup(func() {
			r.client.Close()
			if err := r.proc.stop(5 * time.Second); err != nil {
				t.Errorf("testenv: %v", err)
			}
		})
		return r
	}
}

// Stop stops the server now (SIGTERM, then SIGKILL after 5 s), for a test of what its clients
// do when it goes away; the cleanup then only closes the client.
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	if err := r.proc.stop(5 * time.Second); err != nil {
		t.Errorf("testenv: %v", err)
	}
}

// redisPing speaks the inline protocol so that probing needs no client and logs nothing.
func redisPing(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotYet, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("%w: %v", errNotYet, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: %v", errNotYet, err)
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		// -LOADING and friends: the server is up but not serving yet.
		return fmt.Errorf("%w: PING answered %q", errNotYet, line)
	}
	return nil
}

// Kill sends SIGKILL to the server's pid and waits for it to exit: a crash, with no shutdown
// save — what the server had written to its append-only file is all that survives.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	if err := r.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("testenv: kill redis-server (pid %d): %v", r.proc.cmd.Process.Pid, err)
	}
	<-r.proc.done
}

// Restart starts the server again (after Kill or Stop) on the same port, directory and
// arguments, so that it loads what it persisted there, and returns once it answers PING (after
// loading). The client reconnects by itself.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if r.proc.exitError() == nil {
		t.Fatalf("testenv: restart redis-server (pid %d): still running (Kill or Stop it first)", r.proc.cmd.Process.Pid)
	}
	r.starts++
	r.LogPath = filepath.Join(r.dir, fmt.Sprintf("redis-%d.log", r.starts))
	p, err := startProcess("redis-server", r.bin, r.args, r.dir, r.LogPath)
	if err != nil {
		t.Fatalf("testenv: restart redis: %v", err)
	}
	r.proc = p
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := p.waitReady(ctx, func(ctx context.Context) error { return redisPing(ctx, r.Addr()) }); err != nil {
		t.Fatal(p.failure(fmt.Sprintf("restarted redis-server on %s did not answer PING", r.Addr()), err))
	}
}
