package main

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRolesLoadBundleFromVault runs the PDA roles' own entry points with the key bundle in a
// real Vault dev server (KV v2), selected by the same OBSCURA_VAULT_* variables as the Mohito
// roles. The proxy domain logs in with the Kubernetes auth method: Vault reviews a
// ServiceAccount token against a real kube-apiserver (TokenReview) and the role's policy
// allows only the proxy's path. The DB front-end uses token auth (--vault-token-file). A role that
// loaded its bundle goes on to connect to NATS (at a URL with no port, which the client
// refuses at once — an unreachable server the runtime would retry for ever: the error is
// then a runtime one, not a configuration one); a role that cannot load it exits with a
// configuration error naming the source and never the bundle.
func TestRolesLoadBundleFromVault(t *testing.T) { // not parallel: it sets the environment
	quiet(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	v := testenv.StartVault(t)
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	const ns, sa = "pda-proxy", "pda-proxy"
	auth := v.EnableKubernetesAuth(t, api, ns, sa)
	auth.Role(t, "pda-proxy", sa, `path "secret/data/pda/proxy" { capabilities = ["read"] }`)
	token, jwt := auth.Token(t, sa)
	root := v.Client(t)

	g, err := pda.NewGroup(pda.Ristretto255)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := pdaroles.GenerateProxySecrets(g)
	proxyBundle, _ := pdaroles.MarshalProxySecrets(g, ps)
	ds, _ := pdaroles.GenerateDBSecrets(g)
	dbBundle, _ := pdaroles.MarshalDBSecrets(g, ds)
	for path, b := range map[string][]byte{"pda/proxy": proxyBundle, "pda/db": dbBundle} {
		if _, err := root.KVv2("secret").Put(ctx, path, map[string]any{"private_key": string(b)}); err != nil {
			t.Fatal(err)
		}
	}

	// What the operator sets on a pod (operators/internal/specs, AggregationJob with keys.vault).
	rootTokenFile := filepath.Join(t.TempDir(), "vault-token")
	if err := os.WriteFile(rootTokenFile, []byte(v.RootToken), 0o600); err != nil {
		t.Fatal(err)
	}
	vaultEnv := func(role, path string) {
		// Token auth (no role) reads the token from a file; Kubernetes auth has none.
		tokenFile := ""
		if role == "" {
			tokenFile = rootTokenFile
		}
		t.Setenv("OBSCURA_VAULT_TOKEN_FILE", tokenFile)
		t.Setenv("OBSCURA_VAULT_ADDR", v.Addr())
		t.Setenv("OBSCURA_VAULT_ROLE", role)
		t.Setenv("OBSCURA_VAULT_MOUNT", "secret")
		t.Setenv("OBSCURA_VAULT_PATH", path)
		t.Setenv("OBSCURA_VAULT_FIELD", "private_key")
		t.Setenv("OBSCURA_VAULT_JWT_FILE", jwt)
	}
	noNATS := []string{"-nats-url", "nats://127.0.0.1:no-port", "-metrics-addr", "", "-health-addr", "127.0.0.1:0",
		"-proxy-public-key", hex.EncodeToString(ps.Keys.Oracle.PublicKey()), "-db-public-key", hex.EncodeToString(ds.Key.PublicKey())}
	loaded := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, errConfig) || !strings.Contains(err.Error(), "connect to NATS") {
			t.Fatalf("%s: %v; want the bundle loaded and then no NATS\nvault log:\n%s", what, err, tail(v.LogPath))
		}
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want a configuration error saying %q", what, err, want)
		}
		for _, secret := range []string{string(proxyBundle), string(dbBundle), v.RootToken, token} {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("%s: the error quotes a secret: %v", what, err)
			}
		}
	}

	// Proxy domain: Kubernetes auth; an ambient root token must not be used when a role is set.
	t.Setenv("VAULT_TOKEN", v.RootToken)
	vaultEnv("pda-proxy", "pda/proxy")
	loaded("oracle via Kubernetes auth", runOracle(noNATS))
	loaded("mixer via Kubernetes auth", runMixer(noNATS))
	// The role's policy confines the proxy to its own bundle.
	vaultEnv("pda-proxy", "pda/db")
	refused("proxy reading the DB bundle", runOracle(noNATS), "403")
	// Both sources at once.
	vaultEnv("pda-proxy", "pda/proxy")
	refused("-keys and Vault", runOracle(append([]string{"-keys", "/nonexistent/proxy.json"}, noNATS...)), "not both")

	// DB domain: token auth.
	vaultEnv("", "pda/db")
	loaded("db-frontend via token auth", runFrontend(noNATS))
	// A bundle of the other domain is refused, naming where it came from.
	vaultEnv("", "pda/proxy")
	refused("db-frontend with the proxy bundle", runFrontend(noNATS), "secret/data/pda/proxy field private_key")
	// Vault settings without a path are reported before anything is contacted.
	vaultEnv("", "")
	refused("no path", runFrontend(noNATS), "--vault-path")
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
