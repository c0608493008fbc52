package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
)

// ProvisionConfig configures `obscura provision`.
type ProvisionConfig struct {
	Kubeconfig string
	Namespace  string
	Users      int
	Timeout    time.Duration
}

func parseProvision(args []string) (*ProvisionConfig, error) {
	f := daemon.NewFlags("provision")
	var c ProvisionConfig
	f.String(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	f.String(&c.Namespace, "namespace", "", "namespace of the resources to provision for (default: the kubeconfig context's, else default)")
	f.Int(&c.Users, "users", 4, "access tokens to create in each Round's user-token Secret")
	f.Duration(&c.Timeout, "timeout", time.Minute, "bound on the whole run")
	if err := daemon.ParseFlags(f, args); err != nil {
		return nil, err
	}
	if len(f.Args()) > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errConfig, f.Args())
	}
	if c.Users < 1 || c.Users > 10000 {
		return nil, fmt.Errorf("%w: --users must be in [1, 10000]", errConfig)
	}
	if c.Timeout <= 0 {
		return nil, fmt.Errorf("%w: --timeout must be positive", errConfig)
	}
	return &c, nil
}

// runProvision is `obscura provision`: for every Obscura resource in the namespace (the samples
// once `kubectl apply -k config/samples` has run), it creates what the resource references and
// nobody else makes — the trust domains' namespaces, key Secrets (keys generated here), the
// gateway's user tokens, the vendor's device registry, the TLS Secrets of the PDA ingress and
// the PPS broker↔garbler link — and publishes the PDA domains' public keys in the job. It never
// replaces anything that exists (run it again and again), and prints one line per item, never
// a key, token or password.
func runProvision(args []string) error {
	c, err := parseProvision(args)
	if err != nil {
		return err
	}
	cfg, ns, err := kubeConfig(c.Kubeconfig, c.Namespace)
	if err != nil {
		return fmt.Errorf("%w: %v", errConfig, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	p := &provisioner{k: k, ns: ns, users: c.Users, out: os.Stdout}
	return p.run(ctx)
}

// kubeConfig loads the client configuration and the namespace as kubectl does.
func kubeConfig(path, ns string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
		}
	}
	return cfg, ns, nil
}

// provisioner holds one run.
type provisioner struct {
	k     client.Client
	ns    string
	users int
	out   io.Writer

	created, kept, problems int
}

// The kinds provisioned for, in the order they are handled.
var provisionKinds = []struct{ group, kind string }{
	{"mohito.obscura.dev", "Vendor"},
	{"mohito.obscura.dev", "Round"},
	{"pda.obscura.dev", "AggregationJob"},
	{"pps.obscura.dev", "SecurePipeline"},
	{"lois.obscura.dev", "HeaderGateway"},
	{"sddr.obscura.dev", "EncounterMailbox"},
}

func (p *provisioner) run(ctx context.Context) error {
	fmt.Fprintf(p.out, "provisioning what the Obscura resources of namespace %s reference\n", p.ns)
	found := 0
	for _, pk := range provisionKinds {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(pk.group + "/v1alpha1")
		list.SetKind(pk.kind + "List")
		if err := p.k.List(ctx, list, client.InNamespace(p.ns)); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				fmt.Fprintf(p.out, "%s: no such resource type on this cluster (is the chart installed?)\n", pk.kind)
				continue
			}
			return fmt.Errorf("list %s: %w", pk.kind, err)
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].GetName() < list.Items[j].GetName() })
		for i := range list.Items {
			u := &list.Items[i]
			found++
			var err error
			switch pk.kind {
			case "Vendor":
				err = p.vendor(ctx, u)
			case "Round":
				err = p.round(ctx, u)
			case "AggregationJob":
				err = p.aggregationJob(ctx, u)
			case "SecurePipeline":
				err = p.securePipeline(ctx, u)
			case "HeaderGateway":
				p.optionalSecret(u, "registrar NATS credentials", "spec", "registrar", "natsSecret")
			case "EncounterMailbox":
				p.optionalSecret(u, "Redis password", "spec", "redis", "passwordSecret")
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	if found == 0 {
		fmt.Fprintf(p.out, "no Obscura resource in namespace %s: apply them first (kubectl apply -n %s -k config/samples)\n", p.ns, p.ns)
	}
	fmt.Fprintf(p.out, "done: %d created, %d already there (kept), %d to fix by hand\n", p.created, p.kept, p.problems)
	if p.problems > 0 {
		return fmt.Errorf("%d item(s) need fixing by hand (see above)", p.problems)
	}
	return nil
}

func str(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

func obj(u *unstructured.Unstructured, fields ...string) map[string]any {
	m, _, _ := unstructured.NestedMap(u.Object, fields...)
	return m
}

func (p *provisioner) say(u *unstructured.Unstructured, format string, args ...any) {
	fmt.Fprintf(p.out, "%s %s: %s\n", u.GetKind(), u.GetName(), fmt.Sprintf(format, args...))
}

// namespace creates a trust domain's namespace.
func (p *provisioner) namespace(ctx context.Context, u *unstructured.Unstructured, name, what string) error {
	err := p.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"app.kubernetes.io/part-of": "obscura", "app.kubernetes.io/managed-by": "obscura-provision"}}})
	switch {
	case err == nil:
		p.created++
		p.say(u, "namespace %s (%s): created", name, what)
	case apierrors.IsAlreadyExists(err):
		p.kept++
		p.say(u, "namespace %s (%s): exists, kept", name, what)
	default:
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// secret creates Secret ns/name with the entries gen returns (called only when the Secret is
// missing). An existing Secret is kept as it is; one lacking an entry the resource needs is
// reported, not changed (its other entries may be keys in use).
func (p *provisioner) secret(ctx context.Context, u *unstructured.Unstructured, ns, name, what string, entries []string,
	gen func() (map[string][]byte, error)) (created bool, err error) {
	cur := &corev1.Secret{}
	err = p.k.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur)
	if err == nil {
		var missing []string
		for _, e := range entries {
			if len(cur.Data[e]) == 0 {
				missing = append(missing, e)
			}
		}
		if len(missing) > 0 {
			p.problems++
			p.say(u, "secret %s/%s (%s): exists without %s: left as it is, add the entries or delete the Secret and run again",
				ns, name, what, strings.Join(missing, ", "))
			return false, nil
		}
		p.kept++
		p.say(u, "secret %s/%s (%s): exists, kept", ns, name, what)
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("get secret %s/%s: %w", ns, name, err)
	}
	data, err := gen()
	if err != nil {
		return false, err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{"app.kubernetes.io/part-of": "obscura", "app.kubernetes.io/managed-by": "obscura-provision"}}, Data: data}
	if err := p.k.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) { // made concurrently: keep theirs
			p.kept++
			p.say(u, "secret %s/%s (%s): exists, kept", ns, name, what)
			return false, nil
		}
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("create secret %s/%s: namespace %s does not exist", ns, name, ns)
		}
		return false, fmt.Errorf("create secret %s/%s: %w", ns, name, err)
	}
	p.created++
	p.say(u, "secret %s/%s (%s): created", ns, name, what)
	return true, nil
}

// keyRef is a keys: {secretRef|vault} reference: the Secret and the entry the operator reads.
// ok is false for Vault (the operator does not read it; nor does provision write it).
func (p *provisioner) keyRef(u *unstructured.Unstructured, def string, fields ...string) (name, entry string, ok bool) {
	ref := obj(u, fields...)
	if v, isVault := ref["vault"].(map[string]any); isVault {
		p.say(u, "keys in Vault (path %v): not provisioned here; write the key there (docs/operators.md, Keys in Vault)", v["path"])
		return "", "", false
	}
	sr, _ := ref["secretRef"].(map[string]any)
	if sr == nil {
		return "", "", false
	}
	name, _ = sr["name"].(string)
	entry, _ = sr["key"].(string)
	if entry == "" {
		entry = def
	}
	if epochs, _ := sr["epochs"].(bool); epochs {
		entry = "epoch-0.key"
	}
	return name, entry, name != ""
}

// mohitoKey is a fresh Mohito private key (32 bytes in either suite), base64 text.
func mohitoKey(suite mohito.Suite) ([]byte, error) {
	k, err := mohito.GenerateKey(suite)
	if err != nil {
		return nil, err
	}
	b, err := k.Bytes()
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return []byte(base64.StdEncoding.EncodeToString(b) + "\n"), nil
}

// vendor: the vendor's key (ring) and its agent's device registry of spec.devices devices.
func (p *provisioner) vendor(ctx context.Context, u *unstructured.Unstructured) error {
	if name, entry, ok := p.keyRef(u, "private.key", "spec", "keys"); ok {
		// A vendor key serves Rounds of either suite: 32 bytes load in both.
		if _, err := p.secret(ctx, u, u.GetNamespace(), name, "vendor private key", []string{entry}, func() (map[string][]byte, error) {
			k, err := mohitoKey(mohito.SuiteX25519)
			return map[string][]byte{entry: k}, err
		}); err != nil {
			return err
		}
	}
	if ref := obj(u, "spec", "agent", "devices"); ref != nil {
		name, _ := ref["name"].(string)
		entry, _ := ref["key"].(string)
		if entry == "" {
			entry = "devices.json"
		}
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "devices")
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("spec.devices %d: want 1 to 1,000,000 devices for the registry", n)
		}
		if _, err := p.secret(ctx, u, u.GetNamespace(), name, fmt.Sprintf("device registry, %d devices", n), []string{entry}, func() (map[string][]byte, error) {
			type device struct {
				ID  string `json:"id"`
				PRF []byte `json:"prf"`
			}
			reg := make([]device, n)
			for i := range reg {
				sec, err := mohito.NewDeviceSecret(rand.Reader)
				if err != nil {
					return nil, err
				}
				k := sec.Keys()
				reg[i] = device{ID: fmt.Sprintf("%s-d%d", u.GetName(), i), PRF: k.PRF[:]}
				clear(sec[:])
			}
			b, err := json.Marshal(reg)
			return map[string][]byte{entry: b}, err
		}); err != nil {
			return err
		}
	}
	return nil
}

// round: the integrator's key in the Round's suite and the gateway's user tokens.
func (p *provisioner) round(ctx context.Context, u *unstructured.Unstructured) error {
	suite, suiteName := mohito.SuiteX25519, str(u, "spec", "suite")
	switch suiteName {
	case "", "X25519":
		suiteName = "X25519"
	case "MLKEM768X25519":
		suite = mohito.SuiteMLKEM768X25519
	default:
		return fmt.Errorf("spec.suite %q: want X25519 or MLKEM768X25519", suiteName)
	}
	if name, entry, ok := p.keyRef(u, "private.key", "spec", "keys"); ok {
		if _, err := p.secret(ctx, u, u.GetNamespace(), name, "integrator private key, "+suiteName, []string{entry}, func() (map[string][]byte, error) {
			k, err := mohitoKey(suite)
			return map[string][]byte{entry: k}, err
		}); err != nil {
			return err
		}
	}
	if ref := obj(u, "spec", "gateway", "tokens"); ref != nil {
		name, _ := ref["name"].(string)
		entry, _ := ref["key"].(string)
		if entry == "" {
			entry = "tokens.json"
		}
		if _, err := p.secret(ctx, u, u.GetNamespace(), name, fmt.Sprintf("user access tokens, %d users", p.users), []string{entry}, func() (map[string][]byte, error) {
			toks := map[string]string{}
			for i := range p.users {
				toks[randomText(24)] = fmt.Sprintf("user%d", i)
			}
			b, err := json.Marshal(toks)
			return map[string][]byte{entry: b}, err
		}); err != nil {
			return err
		}
	}
	return nil
}

// aggregationJob: each trust domain's namespace and key bundle (as `pda keygen` writes it), the
// domains' public keys published in the job, and the proxy ingress's TLS Secret.
func (p *provisioner) aggregationJob(ctx context.Context, u *unstructured.Unstructured) error {
	gid := pda.Ristretto255
	switch g := str(u, "spec", "group"); g {
	case "", "Ristretto255":
	case "P256":
		gid = pda.P256
	default:
		return fmt.Errorf("spec.group %q: want Ristretto255 or P256", g)
	}
	g, err := pda.NewGroup(gid)
	if err != nil {
		return err
	}
	for _, d := range []struct{ field, what string }{{"proxy", "proxy domain"}, {"database", "database domain"}} {
		ns := str(u, "spec", d.field, "namespace")
		if ns == "" {
			return fmt.Errorf("spec.%s.namespace is empty", d.field)
		}
		if err := p.namespace(ctx, u, ns, d.what); err != nil {
			return err
		}
		name, entry, ok := p.keyRef(u, "private.key", "spec", d.field, "keys")
		if !ok {
			continue
		}
		if _, err := p.secret(ctx, u, ns, name, d.what+" key bundle", []string{entry}, func() (map[string][]byte, error) {
			var b []byte
			if d.field == "proxy" {
				s, err := pdaroles.GenerateProxySecrets(g)
				if err != nil {
					return nil, err
				}
				b, err = pdaroles.MarshalProxySecrets(g, s)
				return map[string][]byte{entry: b}, err
			}
			s, err := pdaroles.GenerateDBSecrets(g)
			if err != nil {
				return nil, err
			}
			b, err = pdaroles.MarshalDBSecrets(g, s)
			return map[string][]byte{entry: b}, err
		}); err != nil {
			return err
		}
		// Publish the domain's public key: what `pda keygen` prints and every role of both
		// domains reads from spec.<domain>.publicKey.
		s := &corev1.Secret{}
		if err := p.k.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			return fmt.Errorf("read back secret %s/%s: %w", ns, name, err)
		}
		var pub []byte
		if d.field == "proxy" {
			ps, _, err := pdaroles.ParseProxySecrets(s.Data[entry])
			if err != nil {
				p.problems++
				p.say(u, "secret %s/%s entry %s is not a proxy key bundle (pda keygen --role proxy): %v", ns, name, entry, err)
				continue
			}
			pub = ps.Keys.Oracle.PublicKey()
		} else {
			ds, _, err := pdaroles.ParseDBSecrets(s.Data[entry])
			if err != nil {
				p.problems++
				p.say(u, "secret %s/%s entry %s is not a database key bundle (pda keygen --role db): %v", ns, name, entry, err)
				continue
			}
			pub = ds.Key.PublicKey()
		}
		want := hex.EncodeToString(pub)
		if str(u, "spec", d.field, "publicKey") == want {
			p.kept++
			p.say(u, "spec.%s.publicKey: matches the key in %s/%s", d.field, ns, name)
			continue
		}
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{d.field: map[string]any{"publicKey": want}}})
		if err := p.k.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("publish spec.%s.publicKey: %w", d.field, err)
		}
		p.created++
		p.say(u, "spec.%s.publicKey: published (the public key of %s/%s)", d.field, ns, name)
	}
	// The proxy ingress's serving certificate, and as ca.crt the CA of the participants' client
	// certificates; that CA (with its key) stays in the proxy domain for issuing them.
	pns := str(u, "spec", "proxy", "namespace")
	host := u.GetName() + "-proxy." + pns + ".svc"
	caName := u.GetName() + "-participants-ca"
	var participants *certAuthority
	created, err := p.secret(ctx, u, pns, caName, "CA of the participants' client certificates", []string{"tls.crt", "tls.key"}, func() (map[string][]byte, error) {
		var err error
		if participants, err = newCertAuthority(u.GetName() + " participants"); err != nil {
			return nil, err
		}
		return participants.secretData()
	})
	if err != nil {
		return err
	}
	if !created {
		s := &corev1.Secret{}
		if err := p.k.Get(ctx, types.NamespacedName{Namespace: pns, Name: caName}, s); err != nil {
			return err
		}
		if participants, err = parseCertAuthority(s.Data); err != nil {
			p.problems++
			p.say(u, "secret %s/%s: not a CA (tls.crt, tls.key): %v", pns, caName, err)
			return nil
		}
	}
	_, err = p.secret(ctx, u, pns, u.GetName()+"-proxy-tls", "proxy ingress TLS for "+host, []string{"tls.crt", "tls.key", "ca.crt"}, func() (map[string][]byte, error) {
		own, err := newCertAuthority(u.GetName() + " proxy ingress")
		if err != nil {
			return nil, err
		}
		d, err := own.issue("proxy", host)
		if err != nil {
			return nil, err
		}
		d["ca.crt"] = participants.certPEM
		return d, nil
	})
	return err
}

// securePipeline: the garbler's namespace, its identity and sealing keys, and the two TLS
// Secrets of the broker↔garbler link (each domain's own CA; each trusts only the other's).
func (p *provisioner) securePipeline(ctx context.Context, u *unstructured.Unstructured) error {
	gns := str(u, "spec", "garbler", "namespace")
	if gns == "" {
		return errors.New("spec.garbler.namespace is empty")
	}
	if err := p.namespace(ctx, u, gns, "garbler domain"); err != nil {
		return err
	}
	keys := obj(u, "spec", "garbler", "keys")
	if v, ok := keys["vault"]; ok && v != nil {
		p.say(u, "garbler keys in Vault transit: not provisioned here (docs/pps.md)")
	} else if sr, _ := keys["secretRef"].(map[string]any); sr != nil {
		name, _ := sr["name"].(string)
		id, _ := sr["identityKey"].(string)
		seal, _ := sr["sealKey"].(string)
		if id == "" {
			id = "identity.key"
		}
		if seal == "" {
			seal = "seal.key"
		}
		if _, err := p.secret(ctx, u, gns, name, "garbler identity and sealing keys", []string{id, seal}, func() (map[string][]byte, error) {
			seed, sk := make([]byte, ed25519.SeedSize), make([]byte, 32)
			if _, err := rand.Read(seed); err != nil {
				return nil, err
			}
			if _, err := rand.Read(sk); err != nil {
				return nil, err
			}
			defer clear(seed)
			defer clear(sk)
			return map[string][]byte{id: []byte(hex.EncodeToString(seed)), seal: []byte(hex.EncodeToString(sk))}, nil
		}); err != nil {
			return err
		}
	}
	gSecret, bSecret := str(u, "spec", "tls", "garblerSecret"), str(u, "spec", "tls", "brokerSecret")
	if gSecret == "" {
		gSecret = u.GetName() + "-pps-garbler-tls"
	}
	if bSecret == "" {
		bSecret = u.GetName() + "-pps-broker-tls"
	}
	host := u.GetName() + "-pps-garbler." + gns + ".svc"
	// The two Secrets are one pair: made together, or not at all.
	exists := func(ns, name string) (bool, error) {
		err := p.k.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	gOK, err := exists(gns, gSecret)
	if err != nil {
		return err
	}
	bOK, err := exists(u.GetNamespace(), bSecret)
	if err != nil {
		return err
	}
	if gOK != bOK {
		p.problems++
		p.say(u, "link TLS: only one of %s/%s and %s/%s exists; they are a pair (each holds the other's CA): delete it and run again",
			gns, gSecret, u.GetNamespace(), bSecret)
		return nil
	}
	var garbler, broker map[string][]byte
	if !gOK {
		gca, err := newCertAuthority(u.GetName() + " garbler")
		if err != nil {
			return err
		}
		bca, err := newCertAuthority(u.GetName() + " broker")
		if err != nil {
			return err
		}
		if garbler, err = gca.issue("garbler", host); err != nil {
			return err
		}
		garbler["ca.crt"] = bca.certPEM
		if broker, err = bca.issue("broker", ""); err != nil {
			return err
		}
		broker["ca.crt"] = gca.certPEM
	}
	tls := []string{"tls.crt", "tls.key", "ca.crt"}
	if _, err := p.secret(ctx, u, gns, gSecret, "garbler TLS for "+host, tls, func() (map[string][]byte, error) { return garbler, nil }); err != nil {
		return err
	}
	_, err = p.secret(ctx, u, u.GetNamespace(), bSecret, "broker TLS client certificate", tls, func() (map[string][]byte, error) { return broker, nil })
	return err
}

// optionalSecret reports a Secret the resource names that provision cannot make up (it must
// match a service run elsewhere): present, or what to create.
func (p *provisioner) optionalSecret(u *unstructured.Unstructured, what string, fields ...string) {
	ref := obj(u, fields...)
	if ref == nil {
		p.say(u, "nothing to provision")
		return
	}
	p.say(u, "%s Secret %v: not made here (it must match the service it logs in to); create it as docs/operators.md says", what, ref["name"])
}

// randomText is n random bytes, base64url without padding: tokens.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// certAuthority is a self-signed P-256 CA.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// certValidity is how long provisioned certificates last: a year, for samples; production
// deployments issue them with cert-manager (docs/chart.md).
const certValidity = 365 * 24 * time.Hour

func newCertAuthority(cn string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (c *certAuthority) secretData() (map[string][]byte, error) {
	k, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"tls.crt": c.certPEM, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})}, nil
}

func parseCertAuthority(data map[string][]byte) (*certAuthority, error) {
	cb, _ := pem.Decode(data["tls.crt"])
	kb, _ := pem.Decode(data["tls.key"])
	if cb == nil || kb == nil {
		return nil, errors.New("no PEM certificate and key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, errors.New("not an ECDSA CA")
	}
	return &certAuthority{cert: cert, key: ek, certPEM: data["tls.crt"]}, nil
}

// issue is a server certificate for dnsName, or a client certificate for "".
func (c *certAuthority) issue(cn, dnsName string) (map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if dnsName != "" {
		tpl.ExtKeyUsage, tpl.DNSNames = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}
