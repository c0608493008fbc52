// Package certmanager runs bin/cert-manager-controller (hack/tools/cert-manager, built by
// `hack/tools.sh cert-manager`) against a real API server with cert-manager's CRDs: a
// self-signed Issuer issues a CA, a CA Issuer issues a server certificate from it whose Secret
// serves TLS that verifies against its ca.crt, the same works through ClusterIssuers, and every
// Secret is owned by its Certificate. It skips when the binary has not been built.
package certmanager

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/e2e/internal/ready"
	"github.com/obscura-iot/obscura/services/testenv"
)

const ns = "certs"

func TestSelfSignedAndCAIssuance(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "cert-manager-controller")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built: run `hack/tools.sh cert-manager` first", bin)
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{CRDDirs: []string{crdDir(t, root)}})
	k8s := api.ClientT(t)
	ctrl := startController(t, bin, api.KubeConfig)
	ctx := context.Background()

	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	ecdsa256 := map[string]any{"algorithm": "ECDSA", "size": int64(256)}
	objs := []*unstructured.Unstructured{
		// The chain the platform uses: a self-signed CA, and a CA Issuer signing with it.
		object("Issuer", ns, "selfsigned", map[string]any{"selfSigned": map[string]any{}}),
		object("Certificate", ns, "ca", map[string]any{
			"isCA": true, "commonName": "obscura-test-ca", "secretName": "ca",
			"privateKey": ecdsa256,
			"issuerRef":  map[string]any{"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"},
		}),
		object("Issuer", ns, "ca", map[string]any{"ca": map[string]any{"secretName": "ca"}}),
		object("Certificate", ns, "edge", map[string]any{
			"secretName":  "edge-tls",
			"dnsNames":    []any{"localhost"},
			"ipAddresses": []any{"127.0.0.1"},
			"usages":      []any{"server auth", "digital signature", "key encipherment"},
			"privateKey":  map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"issuerRef":   map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"},
		}),
		// The same through ClusterIssuers, whose CA Secret lives in the cluster resource
		// namespace ("default" here). The issuerRefs leave out what the absent webhook would
		// not default either (group; kind for an Issuer): the controllers default them.
		object("ClusterIssuer", "", "selfsigned", map[string]any{"selfSigned": map[string]any{}}),
		object("Certificate", "default", "cluster-ca", map[string]any{
			"isCA": true, "commonName": "obscura-test-cluster-ca", "secretName": "cluster-ca",
			"privateKey": ecdsa256,
			"issuerRef":  map[string]any{"name": "selfsigned", "kind": "ClusterIssuer"},
		}),
		object("ClusterIssuer", "", "ca", map[string]any{"ca": map[string]any{"secretName": "cluster-ca"}}),
		object("Certificate", ns, "internal", map[string]any{
			"secretName": "internal-tls", "dnsNames": []any{"internal.certs.svc"}, "privateKey": ecdsa256,
			"issuerRef": map[string]any{"name": "ca", "kind": "ClusterIssuer"},
		}),
		object("Certificate", ns, "plain", map[string]any{
			"secretName": "plain-tls", "dnsNames": []any{"plain.certs.svc"}, "privateKey": ecdsa256,
			"issuerRef": map[string]any{"name": "ca"},
		}),
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, o := range objs {
		ready.Wait(t, k8s, o, ctrl.Exited)
	}

	caCert := checkSecret(t, k8s, ns, "ca", "ca")
	if !caCert.IsCA || caCert.Subject.CommonName != "obscura-test-ca" {
		t.Errorf("ca: IsCA %v, CN %q", caCert.IsCA, caCert.Subject.CommonName)
	}
	leaf := checkSecret(t, k8s, ns, "edge-tls", "edge")
	loopback := func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }
	if leaf.IsCA || !slices.ContainsFunc(leaf.IPAddresses, loopback) || !slices.Contains(leaf.DNSNames, "localhost") {
		t.Errorf("edge: IsCA %v, IPs %v, DNS names %v", leaf.IsCA, leaf.IPAddresses, leaf.DNSNames)
	}
	if err := leaf.CheckSignatureFrom(caCert); err != nil {
		t.Errorf("edge is not signed by the ca Certificate's key: %v", err)
	}
	if err := checkSecret(t, k8s, ns, "plain-tls", "plain").CheckSignatureFrom(caCert); err != nil {
		t.Errorf("plain is not signed by the ca Certificate's key: %v", err)
	}
	clusterCA := checkSecret(t, k8s, "default", "cluster-ca", "cluster-ca")
	if err := checkSecret(t, k8s, ns, "internal-tls", "internal").CheckSignatureFrom(clusterCA); err != nil {
		t.Errorf("internal is not signed by the cluster-ca Certificate's key: %v", err)
	}
	serveTLS(t, k8s)

	body := ctrl.get(t, "/readyz")
	if strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz: %q", body)
	}
	ctrl.Stop(t)
}

// crdDir is the cert-manager module's deploy/crds, at the version hack/tools/cert-manager/go.mod
// pins (from the module cache that building the controller filled).
func crdDir(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(root, "hack", "tools", "cert-manager")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locate the cert-manager module (hack/tools/cert-manager): %v\n%s", err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("go mod download -json: %v", err)
	}
	dir := filepath.Join(mod.Dir, "deploy", "crds")
	if _, err := os.Stat(filepath.Join(dir, "cert-manager.io_certificates.yaml")); err != nil {
		t.Fatalf("cert-manager CRDs: %v", err)
	}
	return dir
}

// object is a cert-manager.io/v1 object; namespace is empty for a ClusterIssuer.
func object(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("cert-manager.io/v1")
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// checkSecret checks that Secret namespace/name holds a matching ECDSA P-256 key pair and a ca.crt that
// verifies tls.crt, and that the Certificate owner is its controlling owner; it returns the
// parsed tls.crt.
func checkSecret(t *testing.T, c client.Client, namespace, name, owner string) *x509.Certificate {
	t.Helper()
	ctx := context.Background()
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("secret %s: type %q", name, s.Type)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("secret %s has no %s (keys: %v)", name, k, keys(s.Data))
		}
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("secret %s: tls.crt/tls.key: %v", name, err)
	}
	if k, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("secret %s: private key %T, want ECDSA P-256", name, pair.PrivateKey)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatalf("secret %s: ca.crt holds no certificate", name)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("secret %s: ca.crt does not verify tls.crt: %v", name, err)
	}

	var crt unstructured.Unstructured
	crt.SetAPIVersion("cert-manager.io/v1")
	crt.SetKind("Certificate")
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: owner}, &crt); err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(&s)
	if ref == nil || ref.Kind != "Certificate" || ref.Name != owner || ref.UID != crt.GetUID() {
		t.Errorf("secret %s: controller owner %+v, want Certificate %s (uid %s)", name, ref, owner, crt.GetUID())
	}
	return leaf
}

// serveTLS serves HTTPS on 127.0.0.1 with edge-tls and fetches it by the name localhost and by
// the IP, trusting only the Secret's ca.crt.
func serveTLS(t *testing.T, c client.Client) {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "edge-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(testenv.Host, "0"), &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "edge")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, host := range []string{"localhost", testenv.Host} {
		resp, err := hc.Get("https://" + net.JoinHostPort(host, port) + "/")
		if err != nil {
			t.Errorf("GET https://%s: %v", host, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "edge" {
			t.Errorf("GET https://%s: %q", host, b)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// controller is a running bin/cert-manager-controller and its health address.
type controller struct {
	*testenv.Daemon
	health string
}

// startController runs the controller with a kubeconfig for the test API server and waits
// until /healthz and /readyz answer.
func startController(t *testing.T, bin string, kubeconfig []byte) *controller {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{health: fmt.Sprintf("%s:%d", testenv.Host, port)}
	c.Daemon = testenv.StartDaemon(t, "controller",
		exec.Command(bin, "--kubeconfig", kc, "--cluster-resource-namespace", "default", "--health-addr", c.health))
	c.get(t, "/healthz")
	c.get(t, "/readyz")
	return c
}

// get polls the health endpoint path until it answers 200 and returns the body.
func (c *controller) get(t *testing.T, path string) string {
	t.Helper()
	return c.Get(t, 60*time.Second, c.health, path)
}
