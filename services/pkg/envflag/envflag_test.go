package envflag

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newSet(prefix string) *Set {
	s := New("test", prefix)
	s.FlagSet().SetOutput(io.Discard)
	return s
}

func TestDefault(t *testing.T) {
	s := newSet("EFT_")
	var n int
	var d time.Duration
	s.Int(&n, "rounds", 20, "rounds")
	s.Duration(&d, "round", time.Second, "period")
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if n != 20 || d != time.Second {
		t.Fatalf("got %d %v, want the defaults", n, d)
	}
}

func TestEnvOverridesDefault(t *testing.T) {
	t.Setenv("EFT_MAX_BATCH", "7")
	t.Setenv("EFT_NAME", "")
	t.Setenv("EFT_ROUND", "250ms")
	t.Setenv("EFT_ON", "true")
	t.Setenv("EFT_SKEW", "0.5")
	s := newSet("EFT_")
	var (
		n    int
		name string
		d    time.Duration
		on   bool
		skew float64
	)
	s.Int(&n, "max-batch", 1000, "")
	s.String(&name, "name", "default", "")
	s.Duration(&d, "round", time.Second, "")
	s.Bool(&on, "on", false, "")
	s.Float64(&skew, "skew", 1, "")
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if n != 7 || name != "" || d != 250*time.Millisecond || !on || skew != 0.5 {
		t.Fatalf("got %d %q %v %v %v", n, name, d, on, skew)
	}
}

func TestFlagOverridesEnv(t *testing.T) {
	t.Setenv("EFT_ROUNDS", "7")
	t.Setenv("EFT_NAME", "env")
	s := newSet("EFT_")
	var n int
	var name string
	s.Int(&n, "rounds", 20, "")
	s.String(&name, "name", "default", "")
	if err := s.Parse([]string{"-rounds", "3", "-name", "flag", "rest"}); err != nil {
		t.Fatal(err)
	}
	if n != 3 || name != "flag" {
		t.Fatalf("got %d %q, want 3 flag", n, name)
	}
	if a := s.Args(); len(a) != 1 || a[0] != "rest" {
		t.Fatalf("Args() = %q", a)
	}
}

func TestExplicitEnvAndAlias(t *testing.T) {
	t.Setenv("EFT_LISTEN", ":1")
	s := newSet("EFT_")
	var addr string
	var v int
	s.String(&addr, "grpc-addr", ":50051", "", "EFT_GRPC_ADDR", "EFT_LISTEN")
	s.Int(&v, "vendor", -1, "", "EFT_VENDOR_INDEX")
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if addr != ":1" || v != -1 {
		t.Fatalf("got %q %d", addr, v)
	}
	// The first variable that is set wins.
	t.Setenv("EFT_GRPC_ADDR", ":2")
	s = newSet("")
	s.String(&addr, "grpc-addr", ":50051", "", "EFT_GRPC_ADDR", "EFT_LISTEN")
	if err := s.Parse(nil); err != nil || addr != ":2" {
		t.Fatalf("got %q %v, want :2", addr, err)
	}
}

func TestMalformedEnvReported(t *testing.T) {
	t.Setenv("EFT_ROUNDS", "ten")
	t.Setenv("EFT_ROUND", "soon")
	t.Setenv("EFT_ON", "yes please")
	t.Setenv("EFT_SKEW", "steep")
	t.Setenv("EFT_OK", "5")
	s := newSet("EFT_")
	var (
		n, ok int
		d     time.Duration
		on    bool
		skew  float64
	)
	s.Int(&n, "rounds", 20, "")
	s.Duration(&d, "round", time.Second, "")
	s.Bool(&on, "on", false, "")
	s.Float64(&skew, "skew", 1, "")
	s.Int(&ok, "ok", 0, "")
	// A command-line value does not excuse a malformed variable.
	err := s.Parse([]string{"-rounds", "3"})
	if err == nil {
		t.Fatal("Parse accepted malformed environment values")
	}
	for _, want := range []string{`EFT_ROUNDS="ten" is not an integer`, `EFT_ROUND="soon" is not a duration`,
		`EFT_ON="yes please" is not a boolean`, `EFT_SKEW="steep" is not a number`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "EFT_OK") {
		t.Errorf("error %q names a well-formed variable", err)
	}
	if n != 3 || d != time.Second || on || skew != 1 || ok != 5 {
		t.Errorf("got %d %v %v %v %d", n, d, on, skew, ok)
	}
}

func TestBadCommandLine(t *testing.T) {
	t.Setenv("EFT_ROUNDS", "ten")
	s := newSet("EFT_")
	var n int
	s.Int(&n, "rounds", 20, "")
	err := s.Parse([]string{"-nope"})
	if err == nil || !strings.Contains(err.Error(), "-nope") || !strings.Contains(err.Error(), "EFT_ROUNDS") {
		t.Fatalf("Parse(-nope) = %v, want both the flag and the variable", err)
	}
	if err := s.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestUsageNamesVariable(t *testing.T) {
	s := newSet("EFT_")
	var a, b string
	s.String(&a, "nats-url", "", "NATS server URL")
	s.String(&b, "grpc-addr", "", "listen address", "EFT_GRPC_ADDR", "EFT_LISTEN")
	for name, want := range map[string]string{
		"nats-url":  "NATS server URL (env EFT_NATS_URL)",
		"grpc-addr": "listen address (env EFT_GRPC_ADDR or EFT_LISTEN)",
	} {
		if got := s.FlagSet().Lookup(name).Usage; got != want {
			t.Errorf("usage of -%s = %q, want %q", name, got, want)
		}
	}
	if got := New("x", "").EnvName("a-b"); got != "" {
		t.Errorf("EnvName without prefix = %q", got)
	}
	var sb strings.Builder
	s.FlagSet().SetOutput(&sb)
	s.FlagSet().PrintDefaults()
	if !strings.Contains(sb.String(), "EFT_NATS_URL") {
		t.Errorf("PrintDefaults does not name EFT_NATS_URL:\n%s", sb.String())
	}
}
