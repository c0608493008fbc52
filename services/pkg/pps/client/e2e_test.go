package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/roles"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// pki is a throw-away CA of one trust domain, its files written as cert-manager would.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	ca   string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{cert: cert, key: key, dir: t.TempDir()}
	p.ca = p.write(t, name+"-ca.crt", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leaf issues a certificate for 127.0.0.1 (server) or a client, and returns its files.
func (p *pki) leaf(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP(testenv.Host)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, cn+".crt", "CERTIFICATE", der), p.write(t, cn+".key", "PRIVATE KEY", kder)
}

// startGarbler runs the real garbler (trust domain G: its own Redis, a file sealer and
// identity) behind gRPC with mutual TLS on 127.0.0.1, and returns the broker's client of it
// and the garbler's identity key, which devices pin.
func startGarbler(t *testing.T) (ppsv1.GarblerClient, []byte) {
	t.Helper()
	gdom, bdom := newPKI(t, "garbler"), newPKI(t, "broker")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	sealKey := make([]byte, 32)
	rand.Read(sealKey)
	sealer, err := roles.NewFileSealer(sealKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	idSeed := make([]byte, 32)
	rand.Read(idSeed)
	signer, err := roles.NewFileSigner(idSeed)
	if err != nil {
		t.Fatal(err)
	}
	g, err := roles.NewGarbler(roles.GarblerOptions{Redis: rdb, Sealer: sealer, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := gdom.leaf(t, "garbler", true)
	stls, err := roles.ServerTLS(cert, key, bdom.ca)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(testenv.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(stls)))
	g.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	ccert, ckey := bdom.leaf(t, "broker", false)
	ctls, err := roles.ClientTLS(ccert, ckey, gdom.ca, testenv.Host)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ctls)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ppsv1.NewGarblerClient(cc), g.Identity()
}

// TestEndToEndThroughTheGarblerAndBroker runs the clients against the real services: the
// garbler behind mutual TLS, the broker on NATS with its own Redis. Three publishers set up
// (their hellos relayed to the garbler, the acks verified under the pinned key), a
// subscriber is granted the function key, the publishers publish, and an execution's output
// unmasks to the sum of their values with every input valid. A device that pins another
// garbler key refuses the real garbler's ack (§10 #11, D20).
func TestEndToEndThroughTheGarblerAndBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the garbler, the broker, NATS and two redis-servers")
	}
	garbler, identity := startGarbler(t)
	pubs := []*Device{newDevice(t, nil), newDevice(t, nil), newDevice(t, nil)}
	sub := newDevice(t, nil)
	src := `(begin (define a (val "e2e/a")) (define b (val "e2e/b")) (define c (val "e2e/c")) (start-building) (+ a b c))`
	f := compile(t, src)
	e := startNATS(t, append(append([]*Device{}, pubs...), sub), []string{f.ID})
	for _, d := range append(append([]*Device{}, pubs...), sub) {
		d.Garbler = identity
	}
	p := contract.Pipeline{Name: "e2e/sum", Source: src, Mode: contract.ModeFaithful,
		Window: contract.Duration{Duration: 2 * time.Second}, Schedule: contract.Duration{Duration: 2 * time.Second},
		Subscribers: []string{sub.ID()}}
	for i, topic := range []string{"e2e/a", "e2e/b", "e2e/c"} {
		p.Publishers = append(p.Publishers, contract.PipelinePublisher{Topic: topic, DeviceID: pubs[i].ID()})
	}
	brdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(t).Addr()})
	t.Cleanup(func() { brdb.Close() })
	b, err := roles.NewBroker(roles.BrokerOptions{NC: e.nc, JS: e.js, Redis: brdb, Garbler: garbler, Pipelines: []contract.Pipeline{p}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	testenv.Eventually(t, 2*time.Minute, "the broker ready", func() error {
		for _, c := range b.Checks() {
			if err := c(ctx); err != nil {
				return err
			}
		}
		return nil
	})

	// Publisher 0, provisioned with another garbler key, refuses the real garbler's answer;
	// then, with the right key, sets up anew.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	wrong := Device{Key: pubs[0].Key, Garbler: other.Public().(ed25519.PublicKey)}
	sp, err := DialPublisher(e.ctx(), wrong, PublisherOptions{Options: e.options(pubs[0])})
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Setup(e.ctx(), policyFor(f.ID)); !errors.Is(err, ErrTampered) {
		t.Fatalf("a device pinning another garbler key: %v, want ErrTampered", err)
	}
	sp.Close()

	s := e.subscriber(sub, 30*time.Second)
	feed, err := s.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	values := []pps.Fixed{pps.FixedFromFloat(1.5), pps.FixedFromInt(20), pps.FixedFromFloat(-0.25)}
	var publishers []*Publisher
	for _, d := range pubs {
		pp := e.publisher(d, nil)
		if err := pp.Setup(e.ctx(), policyFor(f.ID)); err != nil {
			t.Fatal(err)
		}
		publishers = append(publishers, pp)
	}
	// Publishers publish every half second, as sensors do, so some execution's window holds
	// a value of each; each message is a new round.
	pctx, pcancel := context.WithCancel(e.ctx())
	defer pcancel()
	go func() {
		for pctx.Err() == nil {
			for i, pp := range publishers {
				if _, err := pp.Publish(pctx, values[i:i+1]); err != nil && pctx.Err() == nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
			select {
			case <-pctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	want := values[0].Add(values[1]).Add(values[2])
	octx, ocancel := context.WithTimeout(e.ctx(), 3*time.Minute)
	defer ocancel()
	for {
		o, err := feed.Next(octx)
		if err != nil {
			t.Fatalf("waiting for an execution over all three inputs: %v", err)
		}
		if o.Insufficient || o.Valid < len(values) {
			continue // a tick whose window missed a publisher
		}
		if o.Values[0] != want {
			t.Fatalf("output %v with %d valid inputs, want %v", o.Values[0].Float64(), o.Valid, want.Float64())
		}
		break
	}
}
