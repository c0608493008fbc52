package keys_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/testenv"
)

func key32(seed byte) []byte {
	k := make([]byte, keys.Size)
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestVaultKV reads keys from a real Vault dev server's KV v2 engine with token auth.
func TestVaultKV(t *testing.T) {
	t.Parallel()
	v := testenv.StartVault(t)
	root := v.Client(t)
	k := key32(0x10)
	kv := root.KVv2("secret")
	put := func(path string, data map[string]any) {
		t.Helper()
		if _, err := kv.Put(ctx(t), path, data); err != nil {
			t.Fatalf("put %s: %v", path, err)
		}
	}
	put("mohito/raw", map[string]any{"private_key": string(k)})
	put("mohito/hex", map[string]any{"private_key": hex.EncodeToString(k)})
	put("mohito/b64", map[string]any{"private_key": base64.StdEncoding.EncodeToString(k), "other": "x"})
	put("mohito/custom-field", map[string]any{"sk_v": base64.RawURLEncoding.EncodeToString(k)})
	put("mohito/short", map[string]any{"private_key": hex.EncodeToString(k[:20])})
	put("mohito/number", map[string]any{"private_key": 42})

	src := func(path, field string) *keys.Source {
		return &keys.Source{Vault: keys.Vault{Addr: v.Addr(), Path: path, Field: field, Token: v.RootToken, Timeout: 10 * time.Second}}
	}
	for _, path := range []string{"mohito/raw", "mohito/hex", "mohito/b64"} {
		got, err := src(path, "").Load(ctx(t))
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: Load = %x, %v; want %x", path, got, err, k)
		}
	}
	if got, err := src("mohito/custom-field", "sk_v").Load(ctx(t)); err != nil || !bytes.Equal(got, k) {
		t.Errorf("custom field: %x, %v", got, err)
	}
	// A newer version wins.
	k2 := key32(0x50)
	put("mohito/hex", map[string]any{"private_key": hex.EncodeToString(k2)})
	if got, err := src("mohito/hex", "").Load(ctx(t)); err != nil || !bytes.Equal(got, k2) {
		t.Errorf("version 2: %x, %v", got, err)
	}

	for _, c := range []struct{ path, field, want string }{
		{"mohito/short", "", "not a 32-byte private key (raw, hex or base64); got 40 bytes"},
		{"mohito/missing", "", "secret/data/mohito/missing field private_key: secret not found"},
		{"mohito/b64", "nope", `the secret has no field "nope"`},
		{"mohito/number", "", `field "private_key" is a json.Number, not a string`},
	} {
		_, err := src(c.path, c.field).Load(ctx(t))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s: error %v, want %q", c.path, c.field, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), hex.EncodeToString(k[:20])) {
			t.Errorf("%s: the error echoes key material: %v", c.path, err)
		}
	}
	// Token auth from a token file (--vault-token-file); $VAULT_TOKEN is never read
	// (TestVaultKubernetesAuth sets it and checks it is not used).
	tokenFile := filepath.Join(t.TempDir(), "vault-token")
	if err := os.WriteFile(tokenFile, []byte(v.RootToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := src("mohito/hex", "")
	fromFile.Vault.Token, fromFile.Vault.TokenFile = "", tokenFile
	if got, err := fromFile.Load(ctx(t)); err != nil || !bytes.Equal(got, k2) {
		t.Errorf("token file: %x, %v", got, err)
	}
	if err := os.WriteFile(tokenFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fromFile.Load(ctx(t)); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file (an ambient $VAULT_TOKEN must not be used): %v", err)
	}
	// Bad token, unreachable server: errors that name the source, within the timeout.
	bad := src("mohito/hex", "")
	bad.Vault.Token = "not-a-token"
	if _, err := bad.Load(ctx(t)); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("bad token: %v", err)
	}
	down := src("mohito/hex", "")
	port, _ := testenv.FreePort()
	down.Vault.Addr = "http://127.0.0.1:" + strconv.Itoa(port)
	down.Vault.Timeout = 2 * time.Second
	start := time.Now()
	if _, err := down.Load(ctx(t)); err == nil || !strings.Contains(err.Error(), down.Vault.Addr) {
		t.Errorf("no server: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("no server: took %s", d)
	}
}

// TestVaultKubernetesAuth logs in through Vault's Kubernetes auth method end to end: Vault
// reviews a ServiceAccount token (minted with the TokenRequest API) against a real
// kube-apiserver, and the role's policy lets the workload read only its own key.
func TestVaultKubernetesAuth(t *testing.T) { // not parallel: it sets VAULT_TOKEN
	v := testenv.StartVault(t)
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	const ns, sa = "acme", "acme-vendor-agent"
	auth := v.EnableKubernetesAuth(t, api, ns, sa, "intruder")
	auth.Role(t, "acme-vendor-agent", sa, `path "secret/data/acme/*" { capabilities = ["read"] }`)
	mint := func(name string) string {
		t.Helper()
		_, file := auth.Token(t, name)
		return file
	}
	root := v.Client(t)
	k := key32(0x77)
	if _, err := root.KVv2("secret").Put(ctx(t), "acme/vendor-agent", map[string]any{"private_key": base64.StdEncoding.EncodeToString(k)}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.KVv2("secret").Put(ctx(t), "globex/vendor-agent", map[string]any{"private_key": hex.EncodeToString(key32(1))}); err != nil {
		t.Fatal(err)
	}

	t.Setenv("VAULT_TOKEN", v.RootToken) // an ambient token must not be used when a role is set
	jwt := mint(sa)
	src := func(role, path, jwt string) *keys.Source {
		return &keys.Source{Vault: keys.Vault{Addr: v.Addr(), Role: role, Path: path, JWTFile: jwt, Timeout: 10 * time.Second}}
	}
	got, err := src("acme-vendor-agent", "acme/vendor-agent", jwt).Load(ctx(t))
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("Load through Kubernetes auth = %x, %v; want %x\nvault log:\n%s", got, err, k, tail(v.LogPath))
	}
	// The role's policy confines the workload to its party's keys.
	if _, err := src("acme-vendor-agent", "globex/vendor-agent", jwt).Load(ctx(t)); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("another party's key: %v, want 403", err)
	}
	// Another ServiceAccount is not bound to the role.
	if _, err := src("acme-vendor-agent", "acme/vendor-agent", mint("intruder")).Load(ctx(t)); err == nil || !strings.Contains(err.Error(), "kubernetes auth login") {
		t.Errorf("unbound service account: %v", err)
	}
	// A token that is not a ServiceAccount token of this cluster.
	forged := filepath.Join(t.TempDir(), "forged.jwt")
	os.WriteFile(forged, []byte("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"), 0o600)
	if _, err := src("acme-vendor-agent", "acme/vendor-agent", forged).Load(ctx(t)); err == nil {
		t.Error("forged token: no error")
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
