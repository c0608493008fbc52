package main

import (
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// usageFlags runs a subcommand with -h and returns its flags' names and usage lines, as printed.
func usageFlags(t *testing.T, run func([]string) error) map[string]string {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "usage")
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = out
	err = run([]string{"-h"})
	os.Stderr = stderr
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	name := regexp.MustCompile(`^  -([a-z0-9-]+)`)
	var last string
	for _, line := range strings.Split(string(b), "\n") {
		if m := name.FindStringSubmatch(line); m != nil {
			last = m[1]
			flags[last] = line
		} else if last != "" {
			flags[last] += "\n" + line
		}
	}
	if len(flags) == 0 {
		t.Fatalf("no flags in the usage:\n%s", b)
	}
	return flags
}

// TestSecretsOnlyFromFiles (issue 15 item 4): no flag of any pda subcommand — nor its
// OBSCURA_<FLAG> environment fallback, which has the same name — carries a secret's value. The
// NATS password comes from --nats-password-file (a value in a flag or a variable shows in
// /proc/<pid>/cmdline and kubectl describe); private keys, TLS keys and credentials are paths.
// A new flag whose name suggests a secret fails here until it is a path (…-file) or listed.
func TestSecretsOnlyFromFiles(t *testing.T) {
	secretish := regexp.MustCompile(`pass|secret|token|cred|key|jwt`)
	// Flags with a secret-like name that hold no secret value: paths, public keys, a type.
	paths := map[string]bool{"keys": true, "tls-key": true, "key": true, "nats-creds": true, "nats-password-file": true, "vault-jwt-file": true, "vault-token-file": true}
	public := map[string]bool{"db-public-key": true, "proxy-public-key": true, "key-type": true}
	nats := map[string]bool{"proxy": true, "mixer": true, "oracle": true, "db-frontend": true, "db-shard": true}
	for name, run := range map[string]func([]string) error{
		"proxy": runProxy, "mixer": runMixer, "oracle": runOracle, "db-frontend": runFrontend, "db-shard": runShard,
		"submit": runSubmit, "keygen": runKeygen, "demo": runDemo,
	} {
		t.Run(name, func(t *testing.T) {
			flags := usageFlags(t, run)
			for f, usage := range flags {
				if !secretish.MatchString(f) || public[f] {
					continue
				}
				if !paths[f] {
					t.Errorf("--%s (env OBSCURA_%s) looks like it carries a secret: read it from a file\n%s",
						f, strings.ToUpper(strings.ReplaceAll(f, "-", "_")), usage)
				}
			}
			if nats[name] {
				if _, ok := flags["nats-password-file"]; !ok {
					t.Error("a NATS role without --nats-password-file")
				}
			}
			for _, f := range []string{"nats-password", "redis-password", "password", "token"} {
				if _, ok := flags[f]; ok {
					t.Errorf("--%s takes a secret's value", f)
				}
			}
		})
	}
}

// TestNATSPasswordEnvIgnored: OBSCURA_NATS_PASSWORD (what a flag --nats-password would read) is
// no configuration at all: a role given only it and a user refuses to start (exit 2) for want of
// a password file, rather than using the variable.
func TestNATSPasswordEnvIgnored(t *testing.T) {
	quiet(t)
	t.Setenv("OBSCURA_NATS_PASSWORD", "hunter2")
	t.Setenv("OBSCURA_NATS_USER", "proxy")
	err := runMixer(nil)
	if !errors.Is(err, errConfig) {
		t.Fatalf("mixer with OBSCURA_NATS_PASSWORD and no password file: %v, want a configuration error", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the error shows the variable's value: %v", err)
	}
}
