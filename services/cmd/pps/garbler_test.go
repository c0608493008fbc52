package main

import (
	"bytes"
	"context"
	"crypto/ecdh"
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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// garblerFiles are the files a garbler pod gets: its certificate, the broker CA, a local
// sealing key and identity, and a broker client certificate for the test to dial with.
type garblerFiles struct {
	dir                          string
	cert, key, brokerCA, gCA     string
	brokerCert, brokerKey        string
	sealKey, identity, identityH string // identityH: the public key `pps keys garbler` printed
}

func newGarblerFiles(t *testing.T) *garblerFiles {
	t.Helper()
	dir := t.TempDir()
	gf := &garblerFiles{dir: dir}
	gCA, gKey := garblerTestCA(t, dir, "garbler-ca")
	bCA, bKey := garblerTestCA(t, dir, "broker-ca")
	gf.gCA, gf.brokerCA = filepath.Join(dir, "garbler-ca.crt"), filepath.Join(dir, "broker-ca.crt")
	gf.cert, gf.key = garblerTestLeaf(t, dir, "garbler", gCA, gKey, true)
	gf.brokerCert, gf.brokerKey = garblerTestLeaf(t, dir, "broker", bCA, bKey, false)
	var k [32]byte
	rand.Read(k[:])
	gf.sealKey = filepath.Join(dir, "seal.key")
	if err := os.WriteFile(gf.sealKey, []byte(hex.EncodeToString(k[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	gf.identity = filepath.Join(dir, "identity.key")
	out, err := exec.Command(ppsBin, "keys", "garbler", "--out", gf.identity).Output()
	if err != nil {
		t.Fatalf("pps keys garbler: %v", err)
	}
	gf.identityH = strings.TrimSpace(string(out))
	return gf
}

// args are the flags of a garbler on these files with local sealing and identity.
func (gf *garblerFiles) args(redisAddr string) []string {
	return []string{"garbler", "--listen", "127.0.0.1:0", "--tls-cert", gf.cert, "--tls-key", gf.key,
		"--client-ca", gf.brokerCA, "--redis-addr", redisAddr, "--seal", "file", "--seal-key-file", gf.sealKey,
		"--identity", "file", "--identity-key-file", gf.identity, "--health-addr", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--addr-file", filepath.Join(gf.dir, "addrs")}
}

func garblerTestCA(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	garblerWritePEM(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func garblerTestLeaf(t *testing.T, dir, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, server bool) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, keyFile := filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	garblerWritePEM(t, cert, "CERTIFICATE", der)
	garblerWritePEM(t, keyFile, "PRIVATE KEY", kder)
	return cert, keyFile
}

func garblerWritePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runPPS runs the binary to completion and returns its exit code and stderr.
func runPPS(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(ppsBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("pps %q did not exit: %s", args, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestGarblerConfigErrorsExit2: every configuration error exits with status 2 and a
// message naming what is wrong, before anything is dialled; the garbler has no NATS flag.
func TestGarblerConfigErrorsExit2(t *testing.T) {
	gf := newGarblerFiles(t)
	garbage := filepath.Join(gf.dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a key, not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := gf.args("127.0.0.1:1")
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	replace := func(flag, value string) []string {
		a := append([]string(nil), base...)
		for i := range a {
			if a[i] == flag {
				a[i+1] = value
			}
		}
		return a
	}
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"NATS flag", nil, with("--nats-url", "nats://127.0.0.1:4222"), "flag provided but not defined: -nats-url"},
		{"NATS password file", nil, with("--nats-password-file", garbage), "flag provided but not defined: -nats-password-file"},
		{"vault by default without an address", nil, []string{"garbler"}, "--vault-addr must be"},
		{"unknown seal", nil, replace("--seal", "kms"), `--seal "kms": want vault or file`},
		{"file seal without key", nil, replace("--seal-key-file", ""), "--seal file needs --seal-key-file"},
		{"unknown identity", nil, replace("--identity", "hsm"), `--identity "hsm"`},
		{"chunk too large", nil, with("--chunk-bytes", "99999999"), "--chunk-bytes 99999999"},
		{"seed ttl", []string{"OBSCURA_SEED_TTL=soon"}, base, `OBSCURA_SEED_TTL="soon"`},
		{"no certificate", nil, replace("--tls-cert", filepath.Join(gf.dir, "missing.crt")), "server certificate"},
		{"client CA not PEM", nil, replace("--client-ca", garbage), "no PEM certificate"},
		{"seal key malformed", nil, replace("--seal-key-file", garbage), "--seal-key-file"},
		{"identity key missing", nil, replace("--identity-key-file", filepath.Join(gf.dir, "none.key")), "--identity-key-file"},
		{"vault flags unused", nil, with("--vault-addr", "http://127.0.0.1:8200"), "neither --seal nor --identity is vault"},
		{"vault without auth", nil, with("--identity", "vault", "--identity-key-file", "", "--vault-addr", "http://127.0.0.1:8200"), "exactly one of --vault-role"},
		{"vault token file missing", nil, with("--identity", "vault", "--identity-key-file", "", "--vault-addr", "http://127.0.0.1:8200",
			"--vault-token-file", filepath.Join(gf.dir, "no-token")), "--vault-token-file"},
		{"pipelines file missing", nil, with("--pipelines-file", filepath.Join(gf.dir, "none.json")), "--pipelines-file"},
		{"pipelines file not JSON", nil, with("--pipelines-file", garbage), "--pipelines-file"},
		{"stray argument", nil, with("extra"), "unexpected arguments"},
		{"keys without role", nil, []string{"keys"}, "usage: pps keys garbler"},
		{"keys without out", nil, []string{"keys", "garbler"}, "--out is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stderr := runPPS(t, c.env, c.args...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 saying %q", code, stderr, c.want)
			}
		})
	}
}

// TestKeysGarblerPrintsThePinnedKey: `pps keys garbler` prints the public key of the file it
// writes, and refuses to overwrite it.
func TestKeysGarblerPrintsThePinnedKey(t *testing.T) {
	gf := newGarblerFiles(t)
	s, err := roles.LoadFileSigner(gf.identity)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(s.Public()) != gf.identityH {
		t.Fatalf("printed %s, file holds %x", gf.identityH, s.Public())
	}
	if code, _ := runPPS(t, nil, "keys", "garbler", "--out", gf.identity); code == 0 {
		t.Fatal("an existing identity was overwritten")
	}
}

// TestGarblerServesOverMTLS runs `pps garbler` as a process: it becomes ready once Redis
// answers and its listener is up, answers a relayed hello over mutual TLS with an ack that
// verifies under the key `pps keys garbler` printed, counts it in its metrics, and exits
// cleanly on SIGTERM. A garbler whose Redis is not there stays alive but not ready.
func TestGarblerServesOverMTLS(t *testing.T) {
	gf := newGarblerFiles(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	noRedis := newGarblerFiles(t)
	lonely := testenv.StartDaemon(t, "pps-garbler-no-redis", exec.Command(ppsBin, noRedis.args("127.0.0.1:"+strconv.Itoa(port))...))
	health := garblerWaitAddr(t, lonely, filepath.Join(noRedis.dir, "addrs"), telemetry.AddrHealth)
	lonely.Get(t, time.Minute, health, "/healthz")
	testenv.Eventually(t, time.Minute, "readyz 503 naming redis", func() error {
		code, body := garblerGet(health, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis") {
			return fmt.Errorf("readyz %d %q", code, body)
		}
		return nil
	})
	lonely.Stop(t)

	r := testenv.StartRedis(t)
	d := testenv.StartDaemon(t, "pps-garbler", exec.Command(ppsBin, gf.args(r.Addr())...))
	addrs := filepath.Join(gf.dir, "addrs")
	health = garblerWaitAddr(t, d, addrs, telemetry.AddrHealth)
	d.Get(t, time.Minute, health, "/readyz")
	if code, stderr := runPPS(t, []string{"OBSCURA_ADDR_FILE=" + addrs}, "probe", "/readyz"); code != 0 {
		t.Fatalf("pps probe /readyz: exit %d %s", code, stderr)
	}
	grpcAddr := garblerWaitAddr(t, d, addrs, telemetry.AddrGRPC)
	pinned, _ := hex.DecodeString(gf.identityH)
	pk := garblerHello(t, gf, grpcAddr, pinned)
	metrics := d.Get(t, time.Minute, garblerWaitAddr(t, d, addrs, telemetry.AddrMetrics), "/metrics")
	if !strings.Contains(metrics, `pps_garbler_setups_total{outcome="ok",type="hello"} 1`) {
		t.Fatalf("metrics do not count the setup:\n%s", metrics)
	}
	d.Stop(t)
	if strings.Contains(d.Log(), hex.EncodeToString(pk)) {
		t.Fatal("the garbler logged a device id")
	}
}

// garblerWaitAddr waits for the daemon's address file to name name.
func garblerWaitAddr(t *testing.T, d *testenv.Daemon, file, name string) string {
	t.Helper()
	var addr string
	testenv.Eventually(t, time.Minute, name+" address", func() error {
		if err := d.Exited(); err != nil {
			return err
		}
		a, err := telemetry.ReadAddr(file, name)
		addr = a
		return err
	})
	return addr
}

func garblerGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// garblerHello sends a publisher's hello to the garbler at addr as the broker relays it and
// checks the ack under the pinned key; it returns the device's public key.
func garblerHello(t *testing.T, gf *garblerFiles, addr string, pinned ed25519.PublicKey) ed25519.PublicKey {
	t.Helper()
	cfg, err := roles.ClientTLS(gf.brokerCert, gf.brokerKey, gf.gCA, "")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pk, sk, _ := ed25519.GenerateKey(rand.Reader)
	eph, _ := ecdh.X25519().GenerateKey(rand.Reader)
	h := &contract.Hello{V: contract.Version, Type: contract.TypeHello, Role: contract.RolePublisher, EdPK: pk,
		XEphPK: eph.PublicKey().Bytes(), Nonce: make([]byte, contract.NonceSize),
		Policy: &contract.Policy{Fns: []string{"0123456789abcdef0123456789abcdef"}}}
	rand.Read(h.Nonce)
	h.Sign(sk)
	msg, _ := json.Marshal(h)
	resp, err := ppsv1.NewGarblerClient(cc).Setup(context.Background(), &ppsv1.SetupRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	down, err := contract.DecodeDown(resp.Message)
	if err != nil || down.Ack == nil {
		t.Fatalf("answer %q: %v", resp.Message, err)
	}
	if err := down.Ack.Validate(h, pinned); err != nil {
		t.Fatalf("the ack does not verify under the pinned key: %v", err)
	}
	return pk
}

// TestGarblerWithVaultTransit runs `pps garbler --seal vault --identity vault` against a
// real Vault (Transit mounted at a custom path, token from a file): it becomes ready, its
// acks verify under the Transit key's public key, and its Redis records are Transit
// envelopes.
func TestGarblerWithVaultTransit(t *testing.T) {
	v := testenv.StartVault(t)
	c := v.Client(t)
	if err := c.Sys().Mount("pps-transit", &vault.MountInput{Type: "transit"}); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]string{"seal": "aes256-gcm96", "id": "ed25519"} {
		if _, err := c.Logical().Write("pps-transit/keys/"+name, map[string]any{"type": typ}); err != nil {
			t.Fatal(err)
		}
	}
	sec, err := c.Logical().Read("pps-transit/keys/id")
	if err != nil {
		t.Fatal(err)
	}
	pinned, _ := base64.StdEncoding.DecodeString(sec.Data["keys"].(map[string]any)["1"].(map[string]any)["public_key"].(string))
	gf := newGarblerFiles(t)
	token := filepath.Join(gf.dir, "vault-token")
	if err := os.WriteFile(token, []byte(v.RootToken), 0o600); err != nil {
		t.Fatal(err)
	}
	r := testenv.StartRedis(t)
	args := []string{"garbler", "--listen", "127.0.0.1:0", "--tls-cert", gf.cert, "--tls-key", gf.key,
		"--client-ca", gf.brokerCA, "--redis-addr", r.Addr(), "--seal", "vault", "--identity", "vault",
		"--vault-addr", v.Addr(), "--vault-token-file", token, "--vault-transit-mount", "pps-transit",
		"--vault-seal-key", "seal", "--vault-identity-key", "id", "--health-addr", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--addr-file", filepath.Join(gf.dir, "addrs")}
	d := testenv.StartDaemon(t, "pps-garbler-vault", exec.Command(ppsBin, args...))
	addrs := filepath.Join(gf.dir, "addrs")
	d.Get(t, time.Minute, garblerWaitAddr(t, d, addrs, telemetry.AddrHealth), "/readyz")
	pk := garblerHello(t, gf, garblerWaitAddr(t, d, addrs, telemetry.AddrGRPC), pinned)
	raw, err := r.Client().Get(context.Background(), "pps:g:pub:"+hex.EncodeToString(pk)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("PG\x01\x02")) || !bytes.Contains(raw, []byte("vault:v1:")) {
		t.Fatalf("the publisher record is not a Transit envelope: %q", raw[:min(len(raw), 40)])
	}
	d.Stop(t)
}
