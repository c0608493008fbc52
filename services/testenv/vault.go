package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Vault is a `vault server -dev` process started by StartVault: in-memory storage, unsealed,
// KV v2 mounted at secret/, plain HTTP on 127.0.0.1.
type Vault struct {
	// Port is the API's TCP port on 127.0.0.1; Vault also listens on Port+1 (cluster).
	Port int
	// RootToken is the dev server's root token (random per server).
	RootToken string
	// LogPath is the server's log (stdout and stderr), under the test's temporary directory.
	LogPath string
}

// Addr returns "http://127.0.0.1:<port>", the value for VAULT_ADDR or --vault-addr.
func (v *Vault) Addr() string { return "http://" + net.JoinHostPort(Host, strconv.Itoa(v.Port)) }

// Client returns an API client logged in with the root token (to write secrets, enable auth
// methods, write policies). Each call returns a new client, so callers may change its token.
func (v *Vault) Client(t testing.TB) *vault.Client {
	t.Helper()
	cfg := vault.DefaultConfig()
	cfg.Address = v.Addr()
	cfg.Timeout = 10 * time.Second
	c, err := vault.NewClient(cfg)
	if err != nil {
		t.Fatalf("testenv: vault client for %s: %v", v.Addr(), err)
	}
	c.SetToken(v.RootToken)
	return c
}

// StartVault starts `vault server -dev` from <root>/bin on 127.0.0.1 with a random root token
// (-dev-no-store-token: nothing is written to ~/.vault-token). It returns once
// /v1/sys/health reports the server initialized, unsealed and active, and stops it (SIGTERM,
// then SIGKILL) at cleanup. The dev server mounts KV v2 at secret/ and keeps everything in
// memory. If <root>/bin/vault does not exist (hack/tools.sh has not built it yet) the test is
// skipped with a message saying so.
func StartVault(t testing.TB) *Vault {
	t.Helper()
	bin, err := Bin("vault")
	if err != nil {
		// Vault is the one tool whose cold build (8–15 min, ~5.7 GB RAM) may not have happened
		// yet: skip, loudly, only when the binary is absent; anything else fails.
		if root, rerr := RepoRoot(); rerr == nil {
			if _, serr := os.Stat(filepath.Join(root, "bin", "vault")); errors.Is(serr, os.ErrNotExist) {
				t.Skipf("testenv: SKIP: %s/bin/vault is absent; build it with `hack/tools.sh vault` (8–15 min cold) to run the Vault tests", root)
			}
		}
		t.Fatalf("testenv: start vault: %v", err)
	}
	dir := t.TempDir()
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := "root-" + hex.EncodeToString(tok[:])
	for attempt := 1; ; attempt++ {
		port, err := freePortPair()
		if err != nil {
			t.Fatalf("testenv: start vault: %v", err)
		}
		addr := net.JoinHostPort(Host, strconv.Itoa(port))
		logPath := filepath.Join(dir, fmt.Sprintf("vault-%d.log", attempt))
		p, err := startProcess("vault", bin, []string{
			"server", "-dev",
			"-dev-listen-address=" + addr,
			"-dev-root-token-id=" + token,
			"-dev-no-store-token", // nothing written to ~/.vault-token
			"-log-level=warn",
		}, dir, logPath)
		if err != nil {
			t.Fatalf("testenv: start vault: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = p.waitReady(ctx, func(ctx context.Context) error { return vaultHealthy(ctx, addr) })
		cancel()
		if err != nil {
			_ = p.stop(time.Second)
			if attempt < bindAttempts && p.bindConflict() {
				continue
			}
			t.Fatal(p.failure(fmt.Sprintf("vault %s on %s is not healthy (unsealed and active)", bin, addr), err))
		}
		v := &Vault{Port: port, RootToken: token, LogPath: logPath}
		t.Cleanup(func() {
			if err := p.stop(10 * time.Second); err != nil {
				t.Errorf("testenv: %v", err)
			}
		})
		return v
	}
}

// vaultHealthy asks /v1/sys/health, which answers 200 only when the server is initialized,
// unsealed and active.
func vaultHealthy(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/sys/health", nil)
	if err != nil {
		return err
	}
	resp, err := loopbackHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotYet, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: /v1/sys/health answered %s", errNotYet, resp.Status)
	}
	return nil
}

// freePortPair returns a port p on 127.0.0.1 such that p and p+1 were both free a moment ago
// (Vault's dev server takes p+1 for its cluster listener).
func freePortPair() (int, error) {
	for range 50 {
		l1, err := net.Listen("tcp", net.JoinHostPort(Host, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port on %s: %w", Host, err)
		}
		p := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort(Host, strconv.Itoa(p+1)))
		l1.Close()
		if err == nil {
			l2.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("find two consecutive free ports on %s: gave up after 50 tries", Host)
}

// KubernetesAuth is Vault's Kubernetes auth method pointed at a test API server. Vault reviews
// a login's ServiceAccount token with that token itself (disable_local_ca_jwt), so every
// account created here is bound to system:auth-delegator.
type KubernetesAuth struct {
	v  *Vault
	kc kubernetes.Interface
	ns string
}

// EnableKubernetesAuth creates namespace ns with the given service accounts on api, enables
// the kubernetes auth method at auth/kubernetes and configures it for api.
func (v *Vault) EnableKubernetesAuth(t testing.TB, api *APIServer, ns string, accounts ...string) *KubernetesAuth {
	t.Helper()
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vault-tokenreview-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
	}
	for _, sa := range accounts {
		if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: sa})
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := v.Client(t)
	if err := root.Sys().EnableAuthWithOptionsWithContext(ctx, "kubernetes", &vault.EnableAuthOptions{Type: "kubernetes"}); err != nil {
		t.Fatalf("enable kubernetes auth: %v", err)
	}
	k := &KubernetesAuth{v: v, kc: kc, ns: ns}
	k.write(t, "auth/kubernetes/config", map[string]any{
		"kubernetes_host": api.Config.Host, "kubernetes_ca_cert": string(api.Config.CAData), "disable_local_ca_jwt": true})
	return k
}

func (k *KubernetesAuth) write(t testing.TB, path string, data map[string]any) {
	t.Helper()
	if _, err := k.v.Client(t).Logical().WriteWithContext(context.Background(), path, data); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// Role writes policy name (its HCL text) and the auth role name that lets service account sa
// of the namespace log in with it (tokens valid 5 minutes).
func (k *KubernetesAuth) Role(t testing.TB, name, sa, policy string) {
	t.Helper()
	if err := k.v.Client(t).Sys().PutPolicyWithContext(context.Background(), name, policy); err != nil {
		t.Fatal(err)
	}
	k.write(t, "auth/kubernetes/role/"+name, map[string]any{
		"bound_service_account_names": sa, "bound_service_account_namespaces": k.ns, "token_policies": name, "token_ttl": "5m"})
}

// Token mints a 10-minute token of service account sa (TokenRequest) and returns it and a file
// holding it (what --vault-jwt-file names).
func (k *KubernetesAuth) Token(t testing.TB, sa string) (token, file string) {
	t.Helper()
	exp := int64(600)
	tr, err := k.kc.CoreV1().ServiceAccounts(k.ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	file = filepath.Join(t.TempDir(), sa+".jwt")
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token, file
}
