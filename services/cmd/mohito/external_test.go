package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// buildMohito builds this command into dir.
func buildMohito(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "mohito")
	out, err := exec.Command(testenv.GoTool(), "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build mohito: %v\n%s", err, out)
	}
	return bin
}

// roleProc is one role started as a process, with the file it writes its listen addresses to.
type roleProc struct {
	*testenv.Daemon
	name, addrFile string
}

// runBin runs the binary to completion and returns its exit code, stdout and stderr.
func runBin(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run %v: %v", args, err)
	return 0, "", ""
}

// edgeCert writes a CA and returns a TLS server config for name signed by it.
func edgeCert(t *testing.T, caPath, name string) *tls.Config {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "obscura test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
}

// tlsEdge terminates TLS on 127.0.0.1:0 and forwards to upstream: the
// stand-in for Envoy at the edge.
func tlsEdge(t *testing.T, cfg *tls.Config, upstream string) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
	return l.Addr().String()
}

const externalDeployment = `{"series":"ext","mode":"Hardened","suite":"X25519","commandsPerUser":1,"delta":2,"commandSize":256,"responseSize":128,
 "period":"400ms","shufflerTimeout":"3s","responseDeadline":"1500ms","asyncWindow":0,"encoders":1,"outBatch":32,"responseQuantum":16,
 "capacityDraw":"Random",
 "vendors":[
  {"index":0,"name":"acme","devices":3,"base":2,"jitter":2,"paddedEntries":16,"responsePaddedEntries":16},
  {"index":1,"name":"bolt","devices":3,"base":2,"jitter":2,"paddedEntries":16,"responsePaddedEntries":16}]}`

// TestExternalDriveSmokeProbe provisions a deployment with `mohito
// provision`, runs every role as a process with port-0 health listeners and
// address files (as with hostNetwork) and two gateways on one port with
// SO_REUSEPORT, then, through a TLS edge: `mohito smoke` sees rounds advance,
// `mohito drive` gets every command delivered exactly once to MQTT devices,
// and `mohito probe` reports each role's readiness.
func TestExternalDriveSmokeProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, Redis and the roles as processes")
	}
	dir := t.TempDir()
	bin := buildMohito(t, dir)
	prov := filepath.Join(dir, "provision")

	// provision: files for the cluster, nothing secret on stdout.
	code, stdout, stderr := runBin(t, bin, nil, "provision", "--vendors", "2", "--devices-per-vendor", "3", "--users", "4", "--out", prov)
	if code != 0 {
		t.Fatalf("provision: exit %d\n%s", code, stderr)
	}
	var sum provisionSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil || sum.Vendors != 2 || len(sum.VendorKeys) != 2 || sum.IntegratorKey == "" {
		t.Fatalf("provision summary %q: %v", stdout, err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(prov, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var passwords, tokens map[string]string
	var devices []loadgen.ProvisionedDevice
	json.Unmarshal(read(ProvisionNATSPasswords), &passwords)
	json.Unmarshal(read(ProvisionTokens), &tokens)
	json.Unmarshal(read(ProvisionDevices), &devices)
	secrets := []string{strings.TrimSpace(string(read(ProvisionIntegratorKey)))}
	for _, p := range passwords {
		secrets = append(secrets, p)
	}
	for tok := range tokens {
		secrets = append(secrets, tok)
	}
	for _, d := range devices {
		b, _ := json.Marshal(d.Secret)
		secrets = append(secrets, strings.Trim(string(b), `"`))
	}
	// One password for the integrator, one per vendor and one per device: no login is shared
	// between devices (issue 15 #2).
	if len(passwords) != 1+2+6 || len(tokens) != 4 || len(devices) != 6 {
		t.Fatalf("provisioned %d passwords, %d tokens, %d devices", len(passwords), len(tokens), len(devices))
	}
	var logins map[string]loadgen.DeviceLogin
	json.Unmarshal(read(ProvisionDeviceLogins), &logins)
	for _, d := range devices {
		if l := logins[d.ID]; l.User != contract.DeviceUser(d.Vendor, d.ID) || l.Password == "" || passwords[l.User] != l.Password {
			t.Fatalf("device %s: login %q, want its own user %s", d.ID, l.User, contract.DeviceUser(d.Vendor, d.ID))
		}
	}
	for _, s := range secrets {
		if strings.Contains(stdout, s) {
			t.Fatalf("provision printed a secret")
		}
	}
	if code, _, stderr := runBin(t, bin, nil, "provision", "--vendors", "2", "--out", prov); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Fatalf("provision over an earlier one: exit %d %s", code, stderr)
	}

	nats := testenv.StartNATS(t, testenv.WithNATSConfig(string(read(ProvisionNATSAccounts))), testenv.WithMQTT())
	redis := testenv.StartRedis(t)
	deployment := filepath.Join(dir, "deployment.json")
	if err := os.WriteFile(deployment, []byte(externalDeployment), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*roleProc
	start := func(name, sub, user string, env []string, args ...string) *roleProc {
		// Each user's password file is written once: rewriting it for the
		// next process of the same user truncates it under a running one,
		// which may read it empty (Authorization Violation).
		pwFile := filepath.Join(dir, "pw-"+user)
		if _, err := os.Stat(pwFile); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(pwFile, []byte(passwords[user]+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		p := &roleProc{name: name, addrFile: filepath.Join(dir, name+".addr")}
		full := append([]string{sub, "--deployment", deployment, "--nats-url", nats.URL(), "--nats-user", user, "--nats-password-file", pwFile,
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"}, args...)
		cmd := exec.Command(bin, full...)
		cmd.Env = append(os.Environ(), append(env, "OBSCURA_ADDR_FILE="+p.addrFile)...)
		p.Daemon = testenv.StartDaemon(t, name, cmd)
		procs = append(procs, p)
		return p
	}
	for v := range 2 {
		vk := filepath.Join(prov, ProvisionVendorKey(v))
		vu := contract.VendorUser(v)
		start(fmt.Sprintf("shuffler-%d", v), "shuffler", vu, nil, "--key-file", vk, "--vendor", strconv.Itoa(v))
		start(fmt.Sprintf("vendor-agent-%d", v), "vendor-agent", vu, nil, "--key-file", vk, "--vendor", strconv.Itoa(v),
			"--devices-file", filepath.Join(prov, ProvisionRegistry(v)))
	}
	iu, ikey := contract.IntegratorUser, filepath.Join(prov, ProvisionIntegratorKey)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := []string{"--redis-addr", redis.Addr()}
	gws := []*roleProc{
		start("gateway-0", "gateway", iu, []string{"OBSCURA_REUSE_PORT=true"}, append(rdb, "--grpc-addr", grpcAddr, "--tokens-file", filepath.Join(prov, ProvisionTokens))...),
		start("gateway-1", "gateway", iu, []string{"OBSCURA_REUSE_PORT=true"}, append(rdb, "--grpc-addr", grpcAddr, "--tokens-file", filepath.Join(prov, ProvisionTokens))...),
	}
	start("decrypt-worker", "decrypt-worker", iu, nil, "--key-file", ikey)
	start("encoder", "encoder", iu, nil, append(rdb, "--partition", "0")...)
	start("responder", "responder", iu, nil, rdb...)
	start("coordinator", "coordinator", iu, nil, append(rdb, "--key-file", ikey)...)

	// probe: every role becomes ready on the address its file names.
	testenv.Eventually(t, 30*time.Second, "mohito probe /readyz exits 0 for every role", func() error {
		for _, p := range procs {
			if err := p.Exited(); err != nil {
				return err
			}
			if code, _, stderr := runBin(t, bin, []string{"OBSCURA_ADDR_FILE=" + p.addrFile}, "probe", "/readyz"); code != 0 {
				return fmt.Errorf("%s: exit %d: %s", p.name, code, stderr)
			}
		}
		return nil
	})
	for _, gw := range gws {
		if a, err := telemetry.ReadAddr(gw.addrFile, telemetry.AddrGRPC); err != nil || a != grpcAddr {
			t.Fatalf("%s grpc= %q %v, want %s", gw.name, a, err, grpcAddr)
		}
	}
	probeCases := []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{[]string{"OBSCURA_ADDR_FILE=" + procs[0].addrFile}, []string{"probe", "/healthz"}, 0, ""},
		{[]string{"OBSCURA_ADDR_FILE=" + procs[0].addrFile}, []string{"probe", "/nope"}, 1, "404"},
		{[]string{"OBSCURA_ADDR_FILE=" + filepath.Join(dir, "missing.addr")}, []string{"probe", "/readyz"}, 1, "no address file"},
		{nil, []string{"probe", "--health-addr", "127.0.0.1:1", "/readyz"}, 1, "connection refused"},
		{nil, []string{"probe"}, 2, "exactly one path"},
	}
	for _, c := range probeCases {
		code, _, stderr := runBin(t, bin, c.env, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v %v: exit %d %q, want %d and one line with %q", c.env, c.args, code, stderr, c.code, c.want)
		}
	}

	// The TLS edge in front of the shared gateway port.
	ca := filepath.Join(dir, "ca.pem")
	edgeAddr := tlsEdge(t, edgeCert(t, ca, "edge.obscura.test"), grpcAddr)
	edgeArgs := []string{"--gateway", edgeAddr, "--ca-file", ca, "--server-name", "edge.obscura.test"}

	code, stdout, stderr = runBin(t, bin, nil, append([]string{"smoke", "--token-file", filepath.Join(prov, ProvisionTokens), "--timeout", "20s"}, edgeArgs...)...)
	var sr SmokeResult
	if code != 0 || json.Unmarshal([]byte(stdout), &sr) != nil || !sr.OK || sr.Advanced < 2 || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("smoke: exit %d %q %s", code, stdout, stderr)
	}
	badToken := filepath.Join(dir, "bad-token")
	os.WriteFile(badToken, []byte("not-a-token\n"), 0o600)
	if code, stdout, _ := runBin(t, bin, nil, append([]string{"smoke", "--token-file", badToken, "--timeout", "10s"}, edgeArgs...)...); code != 1 || !strings.Contains(stdout, `"ok":false`) {
		t.Fatalf("smoke with an unknown token: exit %d %q", code, stdout)
	}
	if code, _, stderr := runBin(t, bin, nil, "smoke", "--gateway", edgeAddr, "--token-file", badToken, "--timeout", "3s", "--server-name", "wrong.example"); code != 1 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("smoke against an untrusted edge: exit %d %q", code, stderr)
	}

	// drive: users through the edge, devices over MQTT, exactly once.
	out := filepath.Join(dir, "drive.json")
	code, stdout, stderr = runBin(t, bin, nil, append([]string{"drive",
		"--tokens-file", filepath.Join(prov, ProvisionTokens), "--devices-file", filepath.Join(prov, ProvisionDevices),
		"--mqtt", nats.MQTTAddr(), "--device-credentials-file", filepath.Join(prov, ProvisionDeviceLogins),
		"--commands", "20", "--users", "4", "--progress", "1s", "--timeout", "30s", "--json", out, "--csv", filepath.Join(dir, "drive.csv")}, edgeArgs...)...)
	t.Logf("drive:\n%s", stdout)
	if code != 0 {
		t.Fatalf("drive: exit %d\n%s", code, stderr) // every role's log follows (testenv.Daemon)
	}
	var ds loadgen.Summary
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &ds); err != nil || !ds.ExactlyOnce || ds.Commands != 20 || ds.Sent != 20 || ds.Target != "external" || len(ds.Rows) == 0 || len(ds.PerSecond) == 0 {
		t.Fatalf("drive summary %s: %v", b, err)
	}
	if !strings.Contains(stdout, "answered") {
		t.Errorf("drive printed no progress line")
	}

	// Two gateways on one port: with the first stopped, the second still
	// serves the same address.
	gws[0].Stop(t)
	conn, err := client.DialGateway(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var tok string
	for tok = range tokens {
		break
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := client.NewGatewayClient(conn, tok).RoundInfo(ctx); err != nil {
		t.Fatalf("gateway-1 on the shared port: %v", err)
	}

	for _, p := range procs {
		if err := p.Terminate(); err != nil {
			t.Error(err)
		}
	}
	for _, p := range procs {
		if err := p.Stopped(20 * time.Second); err != nil {
			t.Error(err)
		}
	}
}
