package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// samplesFromKustomization decodes the resources config/samples/kustomization.yaml lists (what
// `kubectl apply -k config/samples` applies) and fails when a sample file is not listed.
func samplesFromKustomization(t *testing.T, root string) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(root, "config", "samples")
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if n := filepath.Base(f); n != "kustomization.yaml" && !slices.Contains(k.Resources, n) {
			t.Errorf("config/samples/%s is not in kustomization.yaml: kubectl apply -k would not apply it", n)
		}
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

// TestProvisionSamples: on a real API server with the chart's CRDs and every sample applied as
// the NOTES say, `obscura provision` creates every namespace and Secret the samples reference,
// in the formats the services load, publishes the PDA domains' public keys, prints no secret,
// and a second run changes nothing.
func TestProvisionSamples(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	api := testenv.StartAPIServerT(t, testenv.APIServerOptions{})
	k := api.ClientT(t)
	ctx := context.Background()
	const ns = "home"
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, u := range samplesFromKustomization(t, root) {
		u.SetNamespace(ns)
		if err := k.Create(ctx, u); err != nil {
			t.Fatalf("apply sample %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}

	var out1 bytes.Buffer
	p := &provisioner{k: k, ns: ns, users: 3, out: &out1}
	if err := p.run(ctx); err != nil {
		t.Fatalf("provision: %v\n%s", err, out1.String())
	}
	t.Logf("first run:\n%s", out1.String())

	for _, n := range []string{"pda-proxy", "pda-db", "pps-garbler"} {
		if err := k.Get(ctx, client.ObjectKey{Name: n}, &corev1.Namespace{}); err != nil {
			t.Errorf("trust-domain namespace %s: %v", n, err)
		}
	}
	get := func(ns, name string) *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatalf("secret %s/%s: %v", ns, name, err)
		}
		return s
	}
	var secretValues []string // what the output must not contain
	key32 := func(ns, name, entry string) {
		t.Helper()
		v := get(ns, name).Data[entry]
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(v)))
		if err != nil || len(raw) != 32 {
			t.Errorf("%s/%s %s: want a base64 32-byte key, got %d bytes (%v)", ns, name, entry, len(raw), err)
		}
		secretValues = append(secretValues, strings.TrimSpace(string(v)), hex.EncodeToString(raw))
	}
	key32(ns, "acme-vendor-key", "epoch-0.key")
	key32(ns, "integrator-key", "private.key")

	var toks map[string]string
	if err := json.Unmarshal(get(ns, "home-user-tokens").Data["tokens.json"], &toks); err != nil || len(toks) != 3 {
		t.Errorf("home-user-tokens: %d tokens (%v), want 3", len(toks), err)
	}
	for tok := range toks {
		secretValues = append(secretValues, tok)
	}
	var reg []struct {
		ID  string `json:"id"`
		PRF []byte `json:"prf"`
	}
	if err := json.Unmarshal(get(ns, "acme-devices").Data["devices.json"], &reg); err != nil || len(reg) != 1000 || len(reg[0].PRF) != 32 {
		t.Errorf("acme-devices: %d devices (%v), want the Vendor's 1000 with 32-byte PRF keys", len(reg), err)
	}

	job := &unstructured.Unstructured{}
	job.SetAPIVersion("pda.obscura.dev/v1alpha1")
	job.SetKind("AggregationJob")
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "attackers-hourly"}, job); err != nil {
		t.Fatal(err)
	}
	ps, _, err := pdaroles.ParseProxySecrets(get("pda-proxy", "pda-proxy-keys").Data["private.key"])
	if err != nil {
		t.Fatalf("pda-proxy-keys: %v", err)
	}
	ds, _, err := pdaroles.ParseDBSecrets(get("pda-db", "pda-db-keys").Data["private.key"])
	if err != nil {
		t.Fatalf("pda-db-keys: %v", err)
	}
	if got, want := str(job, "spec", "proxy", "publicKey"), hex.EncodeToString(ps.Keys.Oracle.PublicKey()); got != want {
		t.Errorf("spec.proxy.publicKey %s, want the provisioned key's %s", got, want)
	}
	if got, want := str(job, "spec", "database", "publicKey"), hex.EncodeToString(ds.Key.PublicKey()); got != want {
		t.Errorf("spec.database.publicKey %s, want the provisioned key's %s", got, want)
	}
	jobVersion := job.GetResourceVersion()

	// TLS: each side's certificate verifies against the CA the other side holds.
	verify := func(s *corev1.Secret, roots []byte, dns string, usage x509.ExtKeyUsage) {
		t.Helper()
		b, _ := pem.Decode(s.Data["tls.crt"])
		if b == nil {
			t.Fatalf("%s: no certificate", s.Name)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots)
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: dns, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s/%s: %v", s.Namespace, s.Name, err)
		}
		secretValues = append(secretValues, pemBody(s.Data["tls.key"]))
	}
	g, br := get("pps-garbler", "parking-daily-pps-garbler-tls"), get(ns, "parking-daily-pps-broker-tls")
	verify(g, br.Data["ca.crt"], "parking-daily-pps-garbler.pps-garbler.svc", x509.ExtKeyUsageServerAuth)
	verify(br, g.Data["ca.crt"], "", x509.ExtKeyUsageClientAuth)
	proxyTLS, participants := get("pda-proxy", "attackers-hourly-proxy-tls"), get("pda-proxy", "attackers-hourly-participants-ca")
	if !bytes.Equal(proxyTLS.Data["ca.crt"], participants.Data["tls.crt"]) {
		t.Error("the proxy's ca.crt is not the participants' CA")
	}
	gk := get("pps-garbler", "pps-garbler-keys")
	for _, e := range []string{"identity.key", "seal.key"} {
		if raw, err := hex.DecodeString(string(gk.Data[e])); err != nil || len(raw) != 32 {
			t.Errorf("pps-garbler-keys %s: want 32 bytes in hex (%v)", e, err)
		}
		secretValues = append(secretValues, string(gk.Data[e]))
	}

	for _, v := range secretValues {
		if v != "" && strings.Contains(out1.String(), v) {
			t.Errorf("the output shows a secret value (%d bytes)", len(v))
		}
	}

	// Again: nothing created, nothing changed.
	var all1 corev1.SecretList
	if err := k.List(ctx, &all1); err != nil {
		t.Fatal(err)
	}
	var out2 bytes.Buffer
	p2 := &provisioner{k: k, ns: ns, users: 3, out: &out2}
	if err := p2.run(ctx); err != nil {
		t.Fatalf("second provision: %v\n%s", err, out2.String())
	}
	if p2.created != 0 || p2.kept != p.created+p.kept {
		t.Errorf("second run: %d created, %d kept; want 0 and %d\n%s", p2.created, p2.kept, p.created+p.kept, out2.String())
	}
	var all2 corev1.SecretList
	if err := k.List(ctx, &all2); err != nil {
		t.Fatal(err)
	}
	if len(all1.Items) != len(all2.Items) {
		t.Errorf("second run: %d Secrets, was %d", len(all2.Items), len(all1.Items))
	}
	for i := range all1.Items {
		if all1.Items[i].ResourceVersion != all2.Items[i].ResourceVersion {
			t.Errorf("second run changed Secret %s/%s", all1.Items[i].Namespace, all1.Items[i].Name)
		}
	}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "attackers-hourly"}, job); err != nil || job.GetResourceVersion() != jobVersion {
		t.Errorf("second run changed the AggregationJob (%v)", err)
	}

	// A Secret that exists without the entry a resource needs is reported, not replaced.
	s := get(ns, "integrator-key")
	s.Data = map[string][]byte{"other": []byte("x")}
	if err := k.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	var out3 bytes.Buffer
	if err := (&provisioner{k: k, ns: ns, users: 3, out: &out3}).run(ctx); err == nil ||
		!strings.Contains(out3.String(), "integrator-key") || !strings.Contains(out3.String(), "exists without private.key") {
		t.Errorf("a Secret lacking its entry: err %v, output\n%s", err, out3.String())
	}
	if string(get(ns, "integrator-key").Data["other"]) != "x" {
		t.Error("the incomplete Secret was changed")
	}
}

func pemBody(b []byte) string {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(blk.Bytes)[:40]
}
