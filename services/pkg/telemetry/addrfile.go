package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Names of the lines of an address file.
const (
	AddrHealth  = "health"  // /healthz and /readyz
	AddrMetrics = "metrics" // /metrics
	AddrGRPC    = "grpc"    // the gateway's user API
	AddrHTTPS   = "https"   // the PDA proxy's participant API
)

// AddrFile publishes the addresses a process has bound, so that a process
// listening on port 0 can still be probed. With hostNetwork, replicas of one
// role share the node's ports: each listens on 127.0.0.1:0 and writes
// "health=127.0.0.1:41234" and "metrics=…" lines to a file on its own
// emptyDir, which `mohito probe` and `pda probe` read.
//
// The file is replaced atomically (write to a temporary file in the same
// directory, then rename), so a reader sees either the previous complete
// file or the new one, never a partial line.
type AddrFile struct {
	path  string
	mu    sync.Mutex
	addrs map[string]string
}

// NewAddrFile returns the address file at path, or nil for "" (no file). It
// removes a file left by an earlier process in the same pod: an emptyDir
// outlives a container restart, and a stale address may by now belong to
// another replica on the node, whose health the probe would report instead.
func NewAddrFile(path string) (*AddrFile, error) {
	if path == "" {
		return nil, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale address file: %w", err)
	}
	return &AddrFile{path: path, addrs: map[string]string{}}, nil
}

// Record sets the address of each of names and rewrites the file. A nil
// AddrFile records nothing.
func (f *AddrFile) Record(addr string, names ...string) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range names {
		f.addrs[n] = addr
	}
	var b bytes.Buffer
	for _, n := range slices.Sorted(maps.Keys(f.addrs)) {
		fmt.Fprintf(&b, "%s=%s\n", n, f.addrs[n])
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".*")
	if err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write address file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write address file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	return nil
}

// ErrNoAddr means the address file does not (yet) name the wanted address.
var ErrNoAddr = errors.New("address not published")

// ReadAddr returns the address recorded under name in the file at path.
func ReadAddr(path, name string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: no address file %s yet", ErrNoAddr, path)
	}
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && k == name && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: %s has no %s= line yet", ErrNoAddr, path, name)
}

// Publish records the server's bound address under names in f (see
// [Serve]); a nil f records nothing.
func Publish(f *AddrFile, names ...string) ServeOption {
	return func(bound net.Addr) error { return f.Record(bound.String(), names...) }
}

// ProbeTimeout bounds a probe's request.
const ProbeTimeout = 2 * time.Second

// Probe does GET http://<addr><path> and returns nil on 200, otherwise an
// error with one line of reason (the status and the first line of the body).
// An address without a host (":8081") is taken on 127.0.0.1.
func Probe(ctx context.Context, addr, path string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("health address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	url := "http://" + net.JoinHostPort(host, port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: ProbeTimeout}).Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, line)
	}
	return nil
}

// ProbeRole is a role's exec probe (`mohito probe`, `pda probe`): it resolves the health address
// (ProbeAddr) and GETs path on it within timeout; no answer in time is reported as such.
func ProbeRole(addrFile, fallback, path string, timeout time.Duration) error {
	addr, err := ProbeAddr(addrFile, fallback)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Probe(ctx, addr, path); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s%s: no answer within %v", addr, path, timeout)
		}
		return err
	}
	return nil
}

// ProbeAddr resolves the address a probe targets: the health= line of the
// address file when one is configured, else fallback (the configured health
// address, which then must not be port 0).
func ProbeAddr(addrFile, fallback string) (string, error) {
	if addrFile != "" {
		return ReadAddr(addrFile, AddrHealth)
	}
	if _, port, err := net.SplitHostPort(fallback); err != nil || port == "0" {
		return "", fmt.Errorf("health address %q is not probeable without an address file (set OBSCURA_ADDR_FILE)", fallback)
	}
	return fallback, nil
}
