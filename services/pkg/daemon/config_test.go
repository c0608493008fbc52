package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLoadSecretsPasswordFile: the password is the file's first line without
// its line end; an empty file is refused at start, with the file named and no
// secret in the message, instead of connecting with an empty password and
// failing later as an Authorization Violation.
func TestLoadSecretsPasswordFile(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, want, err string
	}{
		{"line", "s3cret-pw\n", "s3cret-pw", ""},
		{"crlf", "s3cret-pw\r\n", "s3cret-pw", ""},
		{"empty", "", "", "the file is empty"},
		{"newline only", "\n", "", "the file is empty"},
		{"missing", "-", "", "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if c.content != "-" {
				if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := Common{NATSUser: "u", NATSPasswordFile: path}
			errs := cfg.LoadSecrets()
			switch {
			case c.err == "" && len(errs) != 0:
				t.Fatalf("LoadSecrets: %v", errs)
			case c.err == "" && cfg.natsPassword != c.want:
				t.Fatalf("password %q, want %q", cfg.natsPassword, c.want)
			case c.err != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), c.err) || !strings.Contains(errs[0].Error(), path)):
				t.Fatalf("LoadSecrets = %v, want one error naming %s with %q", errs, path, c.err)
			}
		})
	}
}

// TestValidateNATSReplicas: --nats-replicas (OBSCURA_NATS_REPLICAS) takes 1, 3 or 5; any other
// count is a configuration error naming the flag, so a role refuses to start (exit 2) instead
// of failing on its first stream.
func TestValidateNATSReplicas(t *testing.T) {
	var d Common
	d.Bind(NewFlags("test"))
	if d.NATSReplicas != 1 {
		t.Fatalf("default %d replicas, want 1", d.NATSReplicas)
	}
	for _, n := range []int{-1, 0, 2, 4, 6, 7} {
		t.Setenv("OBSCURA_NATS_REPLICAS", strconv.Itoa(n))
		f := NewFlags("test")
		var c Common
		c.Bind(f)
		if err := ParseFlags(f, nil); err != nil {
			t.Fatal(err)
		}
		errs := c.Validate()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "--nats-replicas") {
			t.Fatalf("%d replicas: %v, want one error naming --nats-replicas", n, errs)
		}
	}
	for _, n := range []int{1, 3, 5} {
		f := NewFlags("test")
		var c Common
		c.Bind(f)
		if err := ParseFlags(f, []string{"--nats-replicas", strconv.Itoa(n)}); err != nil {
			t.Fatal(err)
		}
		if errs := c.Validate(); len(errs) != 0 || c.NATSReplicas != n {
			t.Fatalf("%d replicas: %v (parsed %d)", n, errs, c.NATSReplicas)
		}
	}
}
