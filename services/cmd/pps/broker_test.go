package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// brokerTestFiles writes a CA, a client certificate and key, a NATS password and a pipelines
// file with the given pipelines; it returns the flags naming them.
func brokerTestFiles(t *testing.T, ps []contract.Pipeline) []string {
	t.Helper()
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "garbler-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crt := write("tls.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kf := write("tls.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	pw := write("nats.pw", []byte("pw\n"))
	pb, _ := json.Marshal(contract.PipelinesFile{Pipelines: ps})
	pf := write("pipelines.json", pb)
	return []string{"--tls-cert", crt, "--tls-key", kf, "--garbler-ca", crt, "--nats-user", contract.BrokerUser,
		"--nats-password-file", pw, "--pipelines-file", pf}
}

func brokerTestPipeline(mode string) contract.Pipeline {
	id := strings.Repeat("ab", 32)
	return contract.Pipeline{Name: "ns/sum", Mode: mode, Source: `(begin (define xs (list (val "a"))) (start-building) (sum xs))`,
		Publishers: []contract.PipelinePublisher{{Topic: "a", DeviceID: id}},
		Window:     contract.Duration{Duration: time.Second}, Schedule: contract.Duration{Duration: time.Minute}}
}

// Configuration errors exit 2 with a message naming the problem, before anything connects:
// a pipeline that does not compile or
// does not validate, a missing pipelines file, missing credentials, bad numbers, no TLS.
func TestBrokerConfigErrorsExit2(t *testing.T) {
	bad := brokerTestPipeline(contract.ModeFaithful)
	bad.Source = "(begin (sum"
	for _, tc := range []struct {
		name  string
		args  func(t *testing.T) []string
		wants []string
	}{
		{"pipeline does not compile", func(t *testing.T) []string { return brokerTestFiles(t, []contract.Pipeline{bad}) },
			[]string{"--pipelines-file", "compile"}},
		{"invalid pipeline", func(t *testing.T) []string {
			p := brokerTestPipeline(contract.ModeFaithful)
			p.Publishers[0].DeviceID = "nope"
			return brokerTestFiles(t, []contract.Pipeline{p})
		}, []string{"device id"}},
		{"no pipelines file", func(t *testing.T) []string {
			return append(brokerTestFiles(t, nil), "--pipelines-file", filepath.Join(t.TempDir(), "missing.json"))
		}, []string{"--pipelines-file", "no such file"}},
		{"no NATS user", func(t *testing.T) []string {
			return append(brokerTestFiles(t, nil), "--nats-user", "")
		}, []string{"--nats-user"}},
		{"bad numbers", func(t *testing.T) []string {
			return append(brokerTestFiles(t, nil), "--workers", "0", "--chunk-bytes", "1", "--garbler-addr", "nohost")
		}, []string{"--workers 0", "--chunk-bytes 1", "--garbler-addr"}},
		{"no TLS", func(t *testing.T) []string {
			return append(brokerTestFiles(t, nil), "--garbler-ca", "")
		}, []string{"mutual TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runPPS(t, nil, append([]string{"broker"}, tc.args(t)...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, stderr)
			}
			for _, w := range tc.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("%s: want it to name %q", stderr, w)
				}
			}
		})
	}
}

// A broker process: ready only once NATS, its streams and consumers, its Redis and the garbler
// link (every pipeline registered) are there — not while the garbler is down — then it
// reports the pipeline's function on /metrics and stops cleanly on SIGTERM.
func TestBrokerProcessReadyWithTheGarblerLink(t *testing.T) {
	gf := newGarblerFiles(t)
	gport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	perms := natsx.Permissions{PublishAllow: []string{"$JS.API.>", "$JS.ACK.>", contract.DownSubjects, contract.OutSubjects},
		SubscribeAllow: []string{"_INBOX.>"}}
	layout := natsx.Layout{Accounts: []natsx.Account{{Name: "PPS", JetStream: true,
		Users: []natsx.User{{Name: contract.BrokerUser, Password: "pw", Permissions: &perms}}}}}
	n := testenv.StartNATS(t, testenv.WithNATSConfig(layout.Render()), testenv.WithMQTT())
	br := testenv.StartRedis(t)
	files := brokerTestFiles(t, []contract.Pipeline{brokerTestPipeline(contract.ModeFaithful)})
	addrs := filepath.Join(t.TempDir(), "addrs")
	args := append([]string{"broker"}, files...)
	args = append(args, "--tls-cert", gf.brokerCert, "--tls-key", gf.brokerKey, "--garbler-ca", gf.gCA,
		"--garbler-addr", "127.0.0.1:"+strconv.Itoa(gport), "--nats-url", n.URL(), "--redis-addr", br.Addr(),
		"--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--addr-file", addrs)
	d := testenv.StartDaemon(t, "pps-broker", exec.Command(ppsBin, args...))
	health := garblerWaitAddr(t, d, addrs, telemetry.AddrHealth)
	testenv.Eventually(t, time.Minute, "readyz 503 naming the garbler link", func() error {
		code, body := garblerGet(health, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "garbler") {
			return fmt.Errorf("readyz %d %q", code, body)
		}
		return nil
	})
	g := testenv.StartDaemon(t, "pps-garbler", exec.Command(ppsBin, append(gf.args(testenv.StartRedis(t).Addr()),
		"--listen", "127.0.0.1:"+strconv.Itoa(gport))...))
	d.Get(t, 2*time.Minute, health, "/readyz")
	metrics := d.Get(t, time.Minute, garblerWaitAddr(t, d, addrs, telemetry.AddrMetrics), "/metrics")
	if !strings.Contains(metrics, contract.MetricFunction+`{circuit_hash="`) || !strings.Contains(metrics, `pipeline="ns/sum"`) {
		t.Errorf("metrics do not report the function:\n%s", metrics)
	}
	d.Stop(t)
	g.Stop(t)
}
