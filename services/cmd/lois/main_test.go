package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
)

// TestConfigErrorsExit2: every invalid setting is a configuration error (exit status 2),
// named in the message, found before any file or device is opened.
func TestConfigErrorsExit2(t *testing.T) {
	cases := []struct {
		name string
		run  func([]string) error
		args []string
		want string
	}{
		{"di bad cloud", runDI, []string{"--cloud-wire", "nope", "--keys-file", "/nonexistent"}, "--cloud-wire"},
		{"di long tun", runDI, []string{"--tun", "a-very-long-tun-name", "--keys-file", "/nonexistent"}, "--tun"},
		{"di keys missing", runDI, []string{"--keys-file", "/nonexistent/keys.json"}, "keys.json"},
		{"ci no backends", runCI, []string{"--keys-files", "/nonexistent"}, "--backends"},
		{"ci bad backend", runCI, []string{"--keys-files", "/x", "--backends", "8080=10.0.0.1:80"}, "--backends"},
		{"ci bad cip", runCI, []string{"--keys-files", "/x", "--backends", "8080=10.0.0.1:80@10.0.0.2:7402", "--cip", "::1"}, "--cip"},
		{"si bad service", runSI, []string{"--keys-files", "/x", "--services", "80"}, "--services"},
		{"ci batch 0", runCI, []string{"--keys-files", "/x", "--backends", "8080=10.0.0.1:80@10.0.0.2:7402", "--batch", "0"}, "--batch"},
		{"si batch too large", runSI, []string{"--keys-files", "/x", "--services", "80=8080", "--batch", "2000"}, "--batch"},
		{"si bad tun addr", runSI, []string{"--keys-files", "/x", "--services", "80=8080", "--tun-addr", "::1"}, "--tun-addr"},
		{"si bad tun route", runSI, []string{"--keys-files", "/x", "--services", "80=8080", "--tun-addr", "10.0.0.1", "--tun-routes", "10.1.0.0"}, "--tun-routes"},
		{"si routes without addr", runSI, []string{"--keys-files", "/x", "--services", "80=8080", "--tun-routes", "10.1.0.0/16"}, "--tun-addr"},
		{"si bad mtu", runSI, []string{"--keys-files", "/x", "--services", "80=8080", "--mtu", "100"}, "--mtu"},
		{"provision no device", runProvision, []string{"--out-dir", t.TempDir(), "--services", "8080"}, "--device-ip"},
		{"stray argument", runDI, []string{"extra"}, "unexpected"},
		{"di bad stp", runDI, []string{"--keys-file", "/x", "--stp", "--stp-q", "2"}, "--stp-q"},
		{"registrar no nats", runRegistrar, []string{"--services", "8080", "--wait-for", "ci-0", "--seed-store", "memory"}, "--nats-url"},
		{"registrar no replicas", runRegistrar, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "8080", "--seed-store", "memory"}, "--wait-for"},
		{"registrar no vault", runRegistrar, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "8080", "--wait-for", "ci-0"}, "--vault-addr"},
		{"registrar vault two logins", runRegistrar, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "8080", "--wait-for", "ci-0",
			"--vault-addr", "http://127.0.0.1:1", "--vault-role", "r", "--vault-token-file", "/x"}, "--vault-role"},
		{"registrar bad store", runRegistrar, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "8080", "--wait-for", "ci-0", "--seed-store", "disk"}, "--seed-store"},
		{"registrar bad services", runRegistrar, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "x", "--wait-for", "ci-0", "--seed-store", "memory"}, "sid"},
		{"di replenish without nats", runDI, []string{"--keys-file", "/x", "--replenish"}, "--replenish"},
		{"hello no device", runHello, []string{"--nats-url", "nats://127.0.0.1:1", "--services", "8080", "--out-dir", "/tmp/x"}, "--device-ip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run(c.args)
			if !errors.Is(err, daemon.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a configuration error naming %s", err, c.want)
			}
		})
	}
}

func TestParseBackendsAndServices(t *testing.T) {
	bs, err := parseBackends("8080=10.200.0.10:80@10.0.2.2:7402, 8081=10.200.0.11:81@10.0.2.3:7402")
	if err != nil || len(bs) != 2 || bs[1].SID != 8081 || bs[1].Backend.Port != 81 || bs[1].Wire.String() != "10.0.2.3:7402" {
		t.Fatalf("parseBackends: %+v %v", bs, err)
	}
	s, err := parseServices("80=8080,81=8081")
	if err != nil || s[80] != 8080 || s[81] != 8081 {
		t.Fatalf("parseServices: %v %v", s, err)
	}
}
