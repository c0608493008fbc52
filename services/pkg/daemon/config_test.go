package daemon

import (
	"os"
	"path/filepath"
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
