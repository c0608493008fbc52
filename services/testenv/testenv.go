package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Host is the only address anything started by this package listens on or dials.
const Host = "127.0.0.1"

// RepoRoot finds the repository root (the directory holding go.work) from the working
// directory upward. Tests run in their package directory, so this works from every module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for start := dir; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repository root: no go.work in %s or any parent directory", start)
		}
		dir = parent
	}
}

// Bin returns <root>/bin/<name>, the pinned tool binary installed by hack/tools.sh, or an
// error that says how to install it.
func Bin(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", name)
	info, err := os.Stat(path) // follows the symlinks tools.sh makes for redis-server and envoy
	if err != nil {
		return "", fmt.Errorf("tool %s not found at %s: run `make tools` (or `hack/tools.sh %s`) first: %w", name, path, name, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("tool %s at %s is not an executable file: rerun `make tools`", name, path)
	}
	return path, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another process may
// take it before the caller binds it; the process starters in this package retry on a bind
// conflict.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(Host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", Host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	// Hold every listener until all are chosen so the n ports are distinct.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(Host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find %d free ports on %s: %w", n, Host, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errNotYet marks a readiness probe that should be retried.
var errNotYet = errors.New("not ready yet")

// poll calls probe until it returns nil, an error other than one wrapping errNotYet, or ctx
// ends. It backs off from 5 ms to 100 ms so a fast server is seen quickly without spinning.
func poll(ctx context.Context, probe func(context.Context) error) error {
	wait := 5 * time.Millisecond
	var last error
	for {
		err := probe(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNotYet) {
			return err
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last probe: %v)", context.Cause(ctx), last)
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// logTail returns the last lines of a log file, indented for an error message.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("    (cannot read log %s: %v)", path, err)
	}
	text := strings.TrimRight(string(data), "\n")
	if text == "" {
		return fmt.Sprintf("    (log %s is empty)", path)
	}
	all := strings.Split(text, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	for i, l := range all {
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		all[i] = "    " + l
	}
	return fmt.Sprintf("last %d lines of %s:\n%s", len(all), path, strings.Join(all, "\n"))
}

func checkLoopback(what, host string) error {
	if host != Host {
		return fmt.Errorf("%s must listen on %s only, not %q", what, Host, host)
	}
	return nil
}
