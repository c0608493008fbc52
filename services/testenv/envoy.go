package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"
)

// EnvoyPorts is what StartEnvoy passes to the bootstrap template.
type EnvoyPorts struct {
	// Host is 127.0.0.1; use it for every socket_address so the template states no address itself.
	Host string
	// AdminPort must be the admin listener's port: readiness is read from its /ready.
	AdminPort int
	// ListenerPorts holds as many free ports as StartEnvoy was asked for:
	// {{index .ListenerPorts 0}}.
	ListenerPorts []int
	// Dir is a per-test directory for files the bootstrap refers to (certificates, access logs).
	Dir string
}

// Envoy is an envoy process started by StartEnvoy.
type Envoy struct {
	EnvoyPorts
	// ConfigPath is the rendered bootstrap; LogPath is envoy's stdout and stderr.
	ConfigPath, LogPath string
}

// AdminAddr returns "127.0.0.1:<admin port>".
func (e *Envoy) AdminAddr() string { return net.JoinHostPort(Host, strconv.Itoa(e.AdminPort)) }

// ListenerAddr returns "127.0.0.1:<port>" for the i-th listener port.
func (e *Envoy) ListenerAddr(i int) string {
	return net.JoinHostPort(Host, strconv.Itoa(e.ListenerPorts[i]))
}

// StartEnvoy renders configTemplate (a text/template over EnvoyPorts) into a bootstrap file,
// starts <root>/bin/envoy with it and returns once the admin endpoint /ready says LIVE. It
// then checks through the admin API that the admin endpoint and every listener are bound to
// 127.0.0.1. Envoy runs with --disable-hot-restart (no shared-memory region, so parallel
// instances cannot collide on a base id and nothing is left in /dev/shm) and --concurrency 1.
// Cleanup stops it.
func StartEnvoy(t testing.TB, configTemplate string, listeners int) *Envoy {
	t.Helper()
	bin, err := Bin("envoy")
	if err != nil {
		t.Fatalf("testenv: start envoy: %v", err)
	}
	tmpl, err := template.New("envoy").Option("missingkey=error").Parse(configTemplate)
	if err != nil {
		t.Fatalf("testenv: start envoy: parse bootstrap template: %v", err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1 + listeners)
		if err != nil {
			t.Fatalf("testenv: start envoy: %v", err)
		}
		e := &Envoy{
			EnvoyPorts: EnvoyPorts{Host: Host, AdminPort: ports[0], ListenerPorts: ports[1:], Dir: dir},
			ConfigPath: filepath.Join(dir, fmt.Sprintf("envoy-%d.yaml", attempt)),
			LogPath:    filepath.Join(dir, fmt.Sprintf("envoy-%d.log", attempt)),
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, e.EnvoyPorts); err != nil {
			t.Fatalf("testenv: start envoy: render bootstrap template: %v", err)
		}
		if err := os.WriteFile(e.ConfigPath, buf.Bytes(), 0o600); err != nil {
			t.Fatalf("testenv: start envoy: %v", err)
		}
		p, err := startProcess("envoy", bin, []string{
			"--config-path", e.ConfigPath,
			"--disable-hot-restart",
			"--concurrency", "1",
			"--log-level", "warning", // info starts with ~100 lines listing extensions, burying the error
		}, dir, e.LogPath)
		if err != nil {
			t.Fatalf("testenv: start envoy: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		err = p.waitReady(ctx, func(ctx context.Context) error { return envoyLive(ctx, e.AdminAddr()) })
		if err == nil {
			if err := envoyLoopbackOnly(ctx, e.AdminAddr()); err != nil {
				cancel()
				_ = p.stop(time.Second)
				t.Fatalf("testenv: envoy with bootstrap %s: %v", e.ConfigPath, err)
			}
		}
		cancel()
		if err != nil {
			timedOut := p.exitError() == nil
			_ = p.stop(time.Second)
			if attempt < bindAttempts && p.bindConflict() {
				continue
			}
			what := fmt.Sprintf("envoy %s with bootstrap %s (admin %s, listener ports %v) is not LIVE",
				bin, e.ConfigPath, e.AdminAddr(), e.ListenerPorts)
			if timedOut {
				what += " (the bootstrap's admin address must be {{.Host}}:{{.AdminPort}})"
			}
			t.Fatal(p.failure(what, err))
		}
		t.Cleanup(func() {
			if err := p.stop(5 * time.Second); err != nil {
				t.Errorf("testenv: %v", err)
			}
		})
		return e
	}
}

// loopbackHTTP never uses a proxy: everything it asks lives on 127.0.0.1.
var loopbackHTTP = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	Timeout:   2 * time.Second,
}

func adminGet(ctx context.Context, addr, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := loopbackHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func envoyLive(ctx context.Context, admin string) error {
	code, body, err := adminGet(ctx, admin, "/ready")
	if err != nil {
		return fmt.Errorf("%w: GET /ready: %v", errNotYet, err)
	}
	if state := strings.TrimSpace(string(body)); code != http.StatusOK || state != "LIVE" {
		return fmt.Errorf("%w: GET /ready: %d %q", errNotYet, code, state)
	}
	return nil
}

func envoyLoopbackOnly(ctx context.Context, admin string) error {
	code, body, err := adminGet(ctx, admin, "/config_dump?mask=bootstrap.admin")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("read admin address: %d %v", code, err)
	}
	var dump struct {
		Configs []struct {
			Bootstrap struct {
				Admin struct {
					Address socketAddress `json:"address"`
				} `json:"admin"`
			} `json:"bootstrap"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(body, &dump); err != nil || len(dump.Configs) != 1 {
		return fmt.Errorf("decode /config_dump?mask=bootstrap.admin: %v: %.200s", err, body)
	}
	if err := checkLoopback("envoy admin", dump.Configs[0].Bootstrap.Admin.Address.SocketAddress.Address); err != nil {
		return err
	}

	code, body, err = adminGet(ctx, admin, "/listeners?format=json")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("list listeners: %d %v", code, err)
	}
	var ls struct {
		ListenerStatuses []struct {
			Name         string        `json:"name"`
			LocalAddress socketAddress `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &ls); err != nil {
		return fmt.Errorf("decode /listeners: %w", err)
	}
	for _, l := range ls.ListenerStatuses {
		if a := l.LocalAddress.SocketAddress.Address; a != "" {
			if err := checkLoopback("envoy listener "+l.Name, a); err != nil {
				return err
			}
		}
	}
	return nil
}

type socketAddress struct {
	SocketAddress struct {
		Address string `json:"address"`
	} `json:"socket_address"`
}
