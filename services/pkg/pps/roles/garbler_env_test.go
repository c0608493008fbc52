package roles

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
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// --- A throw-away PKI per trust domain, written to files as cert-manager would. ---

type gtCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	file string // PEM of the CA certificate
}

func gtNewCA(t *testing.T, name string) *gtCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	dir := t.TempDir()
	ca := &gtCA{cert: cert, key: key, dir: dir, file: filepath.Join(dir, name+"-ca.crt")}
	gtWritePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a leaf certificate and its key and returns their paths.
func (ca *gtCA) issue(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, cn+".crt"), filepath.Join(ca.dir, cn+".key")
	gtWritePEM(t, certFile, "CERTIFICATE", der)
	gtWritePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

func gtWritePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// --- The garbler under test, served over mutual TLS on 127.0.0.1. ---

type garblerEnv struct {
	redis    *testenv.Redis
	sealer   Sealer
	signer   Signer
	garbler  *Garbler
	client   ppsv1.GarblerClient
	addr     string
	brokerCA *gtCA // the broker domain's CA (the garbler trusts it for clients)
	gCA      *gtCA // the garbler domain's CA (the broker trusts it for the server)
	logs     *gtBuffer
	stop     func()
}

type gtBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *gtBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *gtBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type garblerEnvOption func(*GarblerOptions)

// newGarblerEnv starts a redis-server, a file-sealed garbler with a file identity, and
// serves it over mutual TLS; the client is a broker with a certificate of the broker CA.
func newGarblerEnv(t *testing.T, opts ...garblerEnvOption) *garblerEnv {
	t.Helper()
	e := &garblerEnv{redis: testenv.StartRedis(t), brokerCA: gtNewCA(t, "broker"), gCA: gtNewCA(t, "garbler")}
	var key [32]byte
	rand.Read(key[:])
	s, err := NewFileSealer(key[:], nil)
	if err != nil {
		t.Fatal(err)
	}
	seed := make([]byte, 32)
	rand.Read(seed)
	sg, err := NewFileSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	e.sealer, e.signer = s, sg
	e.start(t, opts...)
	return e
}

// start (re)starts the garbler process state on the env's Redis, sealer and signer: a new
// Garbler with nothing in memory, as after a restart.
func (e *garblerEnv) start(t *testing.T, opts ...garblerEnvOption) {
	t.Helper()
	e.logs = &gtBuffer{}
	o := GarblerOptions{Redis: e.redis.Client(), Sealer: e.sealer, Signer: e.signer,
		Logger:     slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: prometheus.NewRegistry()}
	for _, f := range opts {
		f(&o)
	}
	g, err := NewGarbler(o)
	if err != nil {
		t.Fatal(err)
	}
	e.garbler = g
	e.addr, e.stop = serveGarbler(t, g, e.gCA, e.brokerCA)
	e.client = e.dial(t, e.brokerCA, e.gCA)
}

// serveGarbler serves g with a server certificate of serverCA, accepting clients of clientCA.
func serveGarbler(t *testing.T, g *Garbler, serverCA, clientCA *gtCA) (string, func()) {
	t.Helper()
	cert, key := serverCA.issue(t, "pps-garbler", true)
	cfg, err := ServerTLS(cert, key, clientCA.file)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.MaxRecvMsgSize(GarblerMaxRecvMsgSize()), grpc.MaxSendMsgSize(GarblerMaxSendMsgSize()))
	g.Register(srv)
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// dial connects a broker with a client certificate of clientCA, trusting serverCA.
func (e *garblerEnv) dial(t *testing.T, clientCA, serverCA *gtCA) ppsv1.GarblerClient {
	t.Helper()
	cert, key := clientCA.issue(t, "pps-broker", false)
	cfg, err := ClientTLS(cert, key, serverCA.file, "")
	if err != nil {
		t.Fatal(err)
	}
	return gtDial(t, e.addr, credentials.NewTLS(cfg))
}

func gtDial(t *testing.T, addr string, creds credentials.TransportCredentials) ppsv1.GarblerClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(GarblerMaxSendMsgSize()), grpc.MaxCallSendMsgSize(GarblerMaxRecvMsgSize())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ppsv1.NewGarblerClient(cc)
}

// --- Devices, with pps's own client-side code. ---

type gtDevice struct {
	key ed25519.PrivateKey
	pk  ed25519.PublicKey
	id  string
}

func gtNewDevice(t *testing.T) *gtDevice {
	t.Helper()
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &gtDevice{key: sk, pk: pk, id: contract.DeviceID(pk)}
}

// hello builds a signed setup message and the device's ephemeral X25519 key.
func (d *gtDevice) hello(t *testing.T, typ, fn string, policy *contract.Policy) (*contract.Hello, *ecdh.PrivateKey, []byte) {
	t.Helper()
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &contract.Hello{V: contract.Version, Type: typ, Fn: fn, EdPK: d.pk, XEphPK: eph.PublicKey().Bytes(),
		Nonce: make([]byte, contract.NonceSize), Policy: policy}
	if typ == contract.TypeHello {
		h.Role = contract.RolePublisher
	}
	rand.Read(h.Nonce)
	h.Sign(d.key)
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return h, eph, b
}

// gtAck decodes the garbler's answer as the device does, and validates it under the pinned key.
func gtAck(t *testing.T, h *contract.Hello, msg []byte, pinned ed25519.PublicKey) *contract.Ack {
	t.Helper()
	down, err := contract.DecodeDown(msg)
	if err != nil {
		t.Fatal(err)
	}
	if down.Ack == nil {
		t.Fatalf("down message is not an ack: %+v", down.Notice)
	}
	if err := down.Ack.Validate(h, pinned); err != nil {
		t.Fatal(err)
	}
	return down.Ack
}

// gtPublisher is a publisher device: K_0 from its side of the handshake.
type gtPublisher struct {
	dev *gtDevice
	k0  pps.Seed
}

func (e *garblerEnv) setupPublisher(t *testing.T, fns ...string) *gtPublisher {
	t.Helper()
	d := gtNewDevice(t)
	h, eph, msg := d.hello(t, contract.TypeHello, "", &contract.Policy{Fns: fns})
	resp, err := e.client.Setup(context.Background(), &ppsv1.SetupRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	if resp.DeviceId != d.id || len(resp.PolicyFns) != len(fns) {
		t.Fatalf("setup response for %s with policy %v", resp.DeviceId, resp.PolicyFns)
	}
	a := gtAck(t, h, resp.Message, e.signer.Public())
	keys, err := pps.ClientSessionKeys(eph, a.XEphPK)
	if err != nil {
		t.Fatal(err)
	}
	return &gtPublisher{dev: d, k0: pps.PublisherRatchetKey(&keys)}
}

// ratchetAt is the publisher's ratchet at round (its key K_round and seed s_round).
func (p *gtPublisher) ratchetAt(t *testing.T, round uint64) (key, seed pps.Seed) {
	t.Helper()
	k := p.k0
	r := pps.NewRatchet(&k, 0, pps.RatchetOptions{})
	s, err := r.AdvanceTo(round)
	if err != nil {
		t.Fatal(err)
	}
	key, _ = r.Export()
	return key, s
}

// publish is the publisher's message of round carrying x, through contract's decoder as the
// broker receives it; it returns the 32 labels the broker holds.
func (p *gtPublisher) publish(t *testing.T, round uint64, x pps.Fixed) []pps.Label {
	t.Helper()
	_, s := p.ratchetAt(t, round)
	msg, err := json.Marshal(&contract.Publish{V: contract.Version, Round: round, Labels: pps.PublishLabels(&s, []pps.Fixed{x})})
	if err != nil {
		t.Fatal(err)
	}
	m, err := contract.DecodePublish(msg)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := pps.SplitPublished(m.Labels, m.Values())
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// gtSubscriber is a subscriber device of one function.
type gtSubscriber struct {
	dev   *gtDevice
	hello *contract.Hello
	keys  pps.SessionKeys
	sub   *pps.Subscription
}

func (e *garblerEnv) subscribe(t *testing.T, fn string) *gtSubscriber {
	t.Helper()
	d := gtNewDevice(t)
	h, eph, msg := d.hello(t, contract.TypeSub, fn, nil)
	resp, err := e.client.Setup(context.Background(), &ppsv1.SetupRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	a := gtAck(t, h, resp.Message, e.signer.Public())
	keys, err := pps.ClientSessionKeys(eph, a.XEphPK)
	if err != nil {
		t.Fatal(err)
	}
	s := &gtSubscriber{dev: d, hello: h, keys: keys, sub: pps.NewSubscription(16)}
	s.accept(t, a)
	return s
}

func (s *gtSubscriber) accept(t *testing.T, a *contract.Ack) {
	t.Helper()
	g, err := pps.OpenGrant(&s.keys, a.Grant, contract.GrantAD(s.hello.Fn, s.hello.EdPK, s.hello.Transcript()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sub.Accept(&g); err != nil {
		t.Fatal(err)
	}
}

// --- The broker's side of an execution, with pps's and gc's real code. ---

// gtFeed is what the broker holds for a slot: the publisher round and its labels.
type gtFeed struct {
	pub    *gtPublisher
	round  uint64
	labels []pps.Label
}

// gtView records every byte the broker received from the garbler.
type gtView struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (v *gtView) add(p []byte) {
	v.mu.Lock()
	v.b.Write(p)
	v.mu.Unlock()
}

// gtPSI is the broker's pps.PSITransport over the garbler's CheckConsistency.
type gtPSI struct {
	c      ppsv1.GarblerClient
	fn     string
	slots  []*ppsv1.SlotInput
	erased []uint32
	view   *gtView
}

func (p *gtPSI) EvaluatePSI(ctx context.Context, req *pps.PSIRequest) (*pps.PSIResponse, error) {
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := p.c.CheckConsistency(ctx, &ppsv1.CheckConsistencyRequest{FnId: p.fn, Slots: p.slots, PsiRequest: b})
	if err != nil {
		return nil, err
	}
	p.erased = resp.ErasedSlots
	if p.view != nil {
		p.view.add(resp.PsiResponse)
	}
	var out pps.PSIResponse
	return &out, out.UnmarshalBinary(resp.PsiResponse)
}

// gtExecution is one run of the broker's execution driver (spec §8.8) against the garbler.
type gtExecution struct {
	bad     []uint32 // slots the consistency check found inconsistent
	erased  []uint32 // slots the garbler reported erased (check and header)
	header  *ppsv1.GarbleHeader
	masked  []byte
	assign  *pps.Assignment
	chunks  []int // data message sizes
	garbErr error
}

// execute checks consistency, nullifies, asks for the garbled stream in chunks of chunk
// bytes and evaluates it while it arrives. missing slots have no feed.
func gtExecute(t *testing.T, c ppsv1.GarblerClient, f *dsl.Function, feeds map[int]*gtFeed, chunk int, view *gtView) *gtExecution {
	t.Helper()
	ctx := context.Background()
	ex := &gtExecution{}
	var recv []pps.ReceivedLabel
	var inputs []*ppsv1.SlotInput
	for s := range f.Layout.Slots {
		fd := feeds[s]
		if fd == nil {
			continue
		}
		inputs = append(inputs, &ppsv1.SlotInput{Slot: uint32(s), PubId: fd.pub.dev.id, Round: fd.round})
		for j, l := range fd.labels {
			recv = append(recv, pps.ReceivedLabel{Pos: pps.PositionOf(s, j), Label: l})
		}
	}
	psi := &gtPSI{c: c, fn: f.ID, slots: inputs, view: view}
	var exec pps.ExecID
	rand.Read(exec[:])
	bad, err := (&pps.OPRFChecker{Garbler: psi}).Check(ctx, exec, recv)
	if err != nil {
		t.Fatal(err)
	}
	ex.bad = pps.BadSlots(bad)
	nulls := map[int]pps.NullReason{}
	for s := range f.Layout.Slots {
		if feeds[s] == nil {
			nulls[s] = pps.Missing
		}
	}
	for _, s := range psi.erased {
		nulls[int(s)] = pps.Erased
		ex.erased = append(ex.erased, s)
	}
	for _, s := range ex.bad {
		if _, ok := nulls[int(s)]; !ok {
			nulls[int(s)] = pps.Inconsistent
		}
	}
	req := &ppsv1.GarbleRequest{FnId: f.ID, ChunkBytes: uint32(chunk)}
	h := f.Circuit.Hash()
	req.CircuitHash = h[:]
	for s := range f.Layout.Slots {
		if r, ok := nulls[s]; ok {
			req.Nullified = append(req.Nullified, &ppsv1.Nullified{Slot: uint32(s), Reason: uint32(r)})
		} else {
			req.Slots = append(req.Slots, &ppsv1.SlotInput{Slot: uint32(s), PubId: feeds[s].pub.dev.id, Round: feeds[s].round})
		}
	}
	stream, err := c.Garble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		ex.garbErr = err
		return ex
	}
	ex.header = first.GetHeader()
	if ex.header == nil {
		t.Fatal("the garbled stream does not start with a header")
	}
	for _, s := range ex.header.ErasedSlots {
		nulls[int(s)] = pps.Erased
		ex.erased = append(ex.erased, s)
	}
	if ex.assign, err = pps.Nullify(&f.Layout, nulls); err != nil {
		t.Fatal(err)
	}
	labels, err := pps.EvaluatorLabels(ex.assign, func(s int) []pps.Label { return feeds[s].labels })
	if err != nil {
		t.Fatal(err)
	}
	plan, err := gc.Compile(f.Circuit)
	if err != nil {
		t.Fatal(err)
	}
	// Evaluate while the stream arrives: chunks go through a pipe, one at a time.
	pr, pw := io.Pipe()
	recvErr := make(chan error, 1)
	go func() {
		var total uint64
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				if total != ex.header.StreamBytes {
					err = fmt.Errorf("stream of %d bytes, header says %d", total, ex.header.StreamBytes)
				} else {
					err = nil
				}
				pw.CloseWithError(err)
				recvErr <- err
				return
			}
			if err == nil && m.GetData() == nil {
				err = errors.New("a second header in the stream")
			}
			if err != nil {
				pw.CloseWithError(err)
				recvErr <- err
				return
			}
			ex.chunks = append(ex.chunks, len(m.GetData()))
			total += uint64(len(m.GetData()))
			if view != nil {
				view.add(m.GetData())
			}
			if _, err := pw.Write(m.GetData()); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	gh, err := gc.ReadHeader(pr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gh.ExecID[:], ex.header.ExecId) {
		t.Fatalf("stream exec id %x, header %x", gh.ExecID, ex.header.ExecId)
	}
	want := garbleContext(f.ID, ex.header.Round, ex.header.Epoch)
	if !bytes.Equal(gh.Context, want) {
		t.Fatalf("stream context %q, want fn, round and epoch %q", gh.Context, want)
	}
	res, err := gc.EvaluateAfterHeader(ctx, plan, gh, pr, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, pr); err != nil {
		t.Fatal(err)
	}
	if err := <-recvErr; err != nil {
		t.Fatal(err)
	}
	ex.masked = res.Masked
	return ex
}

// gtCompile compiles a DSL program as the broker does.
func gtCompile(t *testing.T, src string) *dsl.Function {
	t.Helper()
	f, err := dsl.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// register registers src on the garbler and checks that both sides agree on the circuit.
func (e *garblerEnv) register(t *testing.T, src string) *dsl.Function {
	t.Helper()
	f := gtCompile(t, src)
	resp, err := e.client.RegisterFunction(context.Background(), &ppsv1.RegisterFunctionRequest{Source: src, Mode: ppsv1.Mode_MODE_FAITHFUL})
	if err != nil {
		t.Fatal(err)
	}
	h := f.Circuit.Hash()
	if resp.FnId != f.ID || !bytes.Equal(resp.CircuitHash, h[:]) || resp.Slots != uint32(len(f.Layout.Slots)) ||
		resp.OutputBits != uint32(f.OutputBits()) {
		t.Fatalf("garbler compiled %s/%x, broker %s/%x", resp.FnId, resp.CircuitHash, f.ID, h)
	}
	return f
}
