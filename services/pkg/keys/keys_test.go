package keys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
)

func testKey() []byte {
	k := make([]byte, Size)
	for i := range k {
		k[i] = byte(0xA0 + i)
	}
	return k
}

func TestDecodeEncodings(t *testing.T) {
	k := testKey()
	for name, in := range map[string][]byte{
		"raw":              k,
		"hex":              []byte(hex.EncodeToString(k)),
		"hex newline":      []byte(hex.EncodeToString(k) + "\n"),
		"base64":           []byte(base64.StdEncoding.EncodeToString(k)),
		"base64 raw":       []byte(base64.RawStdEncoding.EncodeToString(k)),
		"base64url":        []byte(base64.URLEncoding.EncodeToString(k)),
		"base64 trailing":  []byte(" " + base64.StdEncoding.EncodeToString(k) + "\r\n"),
		"base64url no pad": []byte(base64.RawURLEncoding.EncodeToString(k)),
	} {
		got, err := Decode(in)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: Decode = %x, %v; want %x", name, got, err, k)
		}
	}
}

func TestDecodeRejectsWrongLengthWithoutEchoing(t *testing.T) {
	for name, in := range map[string][]byte{
		"31 raw":     bytes.Repeat([]byte{7}, 31),
		"33 raw":     bytes.Repeat([]byte{7}, 33),
		"hex 20":     []byte(strings.Repeat("ab", 20)),
		"base64 30":  []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 30))),
		"empty":      nil,
		"not hex 64": []byte(strings.Repeat("zz", 32)),
	} {
		_, err := Decode(in)
		if err == nil {
			t.Errorf("%s: Decode accepted %d bytes", name, len(in))
			continue
		}
		if !strings.Contains(err.Error(), "not a 32-byte private key") {
			t.Errorf("%s: unclear error %q", name, err)
		}
		if len(in) > 4 && strings.Contains(err.Error(), string(in)) {
			t.Errorf("%s: error echoes the input: %q", name, err)
		}
	}
}

func bind(t *testing.T, args ...string) (*Source, error) {
	t.Helper()
	f := envflag.New("test", "OBSCURA_")
	f.FlagSet().SetOutput(io.Discard)
	var s Source
	s.Bind(f, "/etc/obscura/keys/private.key", "sk_test")
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &s, s.Validate()
}

func TestValidateExactlyOneSource(t *testing.T) {
	t.Setenv("VAULT_TOKEN", "ambient") // never read
	// The default key file alone is the file source.
	s, err := bind(t)
	if err != nil || s.String() != "file /etc/obscura/keys/private.key" {
		t.Fatalf("default: %v, %s", err, s)
	}
	// Vault settings alone select Vault; the default --key-file yields.
	s, err = bind(t, "--vault-addr", "http://127.0.0.1:1", "--vault-role", "r", "--vault-path", "a/b")
	if err != nil || !strings.HasPrefix(s.String(), "vault http://127.0.0.1:1 secret/data/a/b field private_key") {
		t.Fatalf("vault: %v, %s", err, s)
	}
	// Both: refused, also when --key-file names the default path explicitly.
	for _, kf := range []string{"/k", "/etc/obscura/keys/private.key"} {
		if _, err := bind(t, "--key-file", kf, "--vault-addr", "http://127.0.0.1:1", "--vault-role", "r", "--vault-path", "a"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "not both") {
			t.Errorf("both (--key-file %s): %v", kf, err)
		}
	}
	t.Setenv("OBSCURA_KEY_FILE", "/etc/obscura/keys/private.key")
	if _, err := bind(t, "--vault-addr", "http://127.0.0.1:1", "--vault-role", "r", "--vault-path", "a"); !errors.Is(err, ErrConfig) {
		t.Errorf("both (OBSCURA_KEY_FILE): %v", err)
	}
	os.Unsetenv("OBSCURA_KEY_FILE")
	// Neither.
	if _, err := bind(t, "--key-file", ""); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "no key source") {
		t.Errorf("none: %v", err)
	}
	// Incomplete Vault settings.
	for _, args := range [][]string{
		{"--vault-path", "a", "--vault-role", "r"},                                   // no address
		{"--vault-addr", "127.0.0.1:8200", "--vault-path", "a", "--vault-role", "r"}, // not a URL
		{"--vault-addr", "http://127.0.0.1:1", "--vault-role", "r"},                  // no path
		{"--vault-addr", "http://127.0.0.1:1", "--vault-role", "r", "--vault-path", "../x"},
		{"--vault-addr", "http://127.0.0.1:1", "--vault-path", "a"},                                                  // neither role nor token file ($VAULT_TOKEN is not read)
		{"--vault-addr", "http://127.0.0.1:1", "--vault-path", "a", "--vault-role", "r", "--vault-token-file", "/t"}, // both
	} {
		if _, err := bind(t, args...); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want a configuration error", args, err)
		}
	}
	// Token auth from a token file (read at login, not here).
	if _, err := bind(t, "--vault-addr", "http://127.0.0.1:1", "--vault-path", "a", "--vault-token-file", "/run/secrets/vault-token"); err != nil {
		t.Errorf("token auth: %v", err)
	}
}

func TestVaultFlagsFromEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		EnvVaultAddr: "https://vault:8200", EnvVaultRole: "mohito", EnvVaultMount: "kv", EnvVaultPath: "p/q",
		EnvVaultField: "sk", EnvVaultAuthPath: "k8s-a", EnvVaultJWTFile: "/jwt",
	} {
		t.Setenv(k, v)
	}
	s, err := bind(t)
	if err != nil {
		t.Fatal(err)
	}
	want := Vault{Addr: "https://vault:8200", Role: "mohito", Mount: "kv", Path: "p/q", Field: "sk", AuthPath: "k8s-a", JWTFile: "/jwt", Token: s.Vault.Token}
	if s.Vault != want {
		t.Errorf("Vault = %+v, want %+v", s.Vault, want)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	k := testKey()
	raw := filepath.Join(dir, "raw")
	hexed := filepath.Join(dir, "hex")
	short := filepath.Join(dir, "short")
	os.WriteFile(raw, k, 0o600)
	os.WriteFile(hexed, []byte(hex.EncodeToString(k)+"\n"), 0o600)
	os.WriteFile(short, k[:20], 0o600)
	for _, p := range []string{raw, hexed} {
		s := Source{File: p}
		got, err := s.Load(t.Context())
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: %x, %v", p, got, err)
		}
	}
	s := Source{File: short}
	if _, err := s.Load(t.Context()); err == nil || !strings.Contains(err.Error(), "file "+short) || !strings.Contains(err.Error(), "got 20 bytes") {
		t.Errorf("short: %v", err)
	}
	s = Source{File: filepath.Join(dir, "missing")}
	if _, err := s.Load(t.Context()); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// TestKubernetesAuthHTTP checks the requests of the Kubernetes auth login and the KV v2 read
// against a fake Vault (the real-server test is in vault_test.go).
func TestKubernetesAuthHTTP(t *testing.T) {
	k := testKey()
	jwt := filepath.Join(t.TempDir(), "token")
	os.WriteFile(jwt, []byte("sa-jwt\n"), 0o600)
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		switch r.URL.Path {
		case "/v1/auth/k8s-a/login":
			var body map[string]string
			json.NewDecoder(r.Body).Decode(&body)
			if body["role"] != "mohito-vendor" || body["jwt"] != "sa-jwt" {
				http.Error(w, `{"errors":["permission denied"]}`, http.StatusForbidden)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"auth": map[string]any{"client_token": "s.login"}})
		case "/v1/kv/data/vendors/acme":
			if r.Header.Get("X-Vault-Token") != "s.login" {
				http.Error(w, `{"errors":["permission denied"]}`, http.StatusForbidden)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{
				"data":     map[string]any{"sk": base64.StdEncoding.EncodeToString(k)},
				"metadata": map[string]any{"version": 1},
			}})
		case "/v1/auth/token/revoke-self":
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("VAULT_TOKEN", "ambient-must-not-be-used")
	s := Source{Vault: Vault{Addr: srv.URL, Role: "mohito-vendor", Mount: "kv", Path: "vendors/acme", Field: "sk",
		AuthPath: "k8s-a", JWTFile: jwt, Timeout: 5 * time.Second}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := s.Load(ctx)
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("Load = %x, %v (calls %q)", got, err, calls)
	}
	want := []string{"PUT /v1/auth/k8s-a/login", "GET /v1/kv/data/vendors/acme", "PUT /v1/auth/token/revoke-self"}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Errorf("calls = %q, want %q", calls, want)
	}

	s.Vault.Role = "other"
	if _, err := s.Load(ctx); err == nil || !strings.Contains(err.Error(), `kubernetes auth login (role "other", auth/k8s-a)`) {
		t.Errorf("wrong role: %v", err)
	}
	s.Vault.Role, s.Vault.JWTFile = "mohito-vendor", filepath.Join(t.TempDir(), "none")
	if _, err := s.Load(ctx); err == nil {
		t.Error("missing JWT file: no error")
	}
}

func TestFormattingHidesToken(t *testing.T) {
	s := Source{Vault: Vault{Addr: "http://127.0.0.1:1", Path: "p", Token: "s.secret-token"}}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", s), fmt.Sprintf("%v", s.Vault), fmt.Sprintf("%+v", &s)} {
		if strings.Contains(out, "secret-token") {
			t.Errorf("formatted source shows the token: %s", out)
		}
	}
}
