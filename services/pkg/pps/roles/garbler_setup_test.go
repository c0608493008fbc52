package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// TestGarblerMTLSRefusesOtherCAs: the garbler accepts only brokers whose client certificate
// the broker domain's CA issued (spec §5.3): a certificate of another CA, or none, is refused
// at the handshake; and a broker that trusts only the garbler domain's CA refuses a garbler
// with a certificate of another CA.
func TestGarblerMTLSRefusesOtherCAs(t *testing.T) {
	e := newGarblerEnv(t)
	ctx := context.Background()
	call := func(c ppsv1.GarblerClient) error {
		_, err := c.Release(ctx, &ppsv1.ReleaseRequest{})
		return err
	}
	if err := call(e.client); err != nil {
		t.Fatalf("the broker with a certificate of the broker CA: %v", err)
	}
	foreign := gtNewCA(t, "foreign")
	if err := call(e.dial(t, foreign, e.gCA)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client certificate of another CA: %v, want Unavailable (handshake refused)", err)
	}
	if err := call(e.dial(t, e.gCA, e.gCA)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client certificate of the garbler's own CA: %v, want Unavailable", err)
	}
	noCert := &tls.Config{RootCAs: mustPool(t, e.gCA.file), MinVersion: tls.VersionTLS13}
	if err := call(gtDial(t, e.addr, credentials.NewTLS(noCert))); status.Code(err) != codes.Unavailable {
		t.Fatalf("no client certificate: %v, want Unavailable", err)
	}
	// The broker side: a garbler certified by another CA is not the garbler.
	impostor, err := NewGarbler(GarblerOptions{Redis: e.redis.Client(), Sealer: e.sealer, Signer: e.signer})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveGarbler(t, impostor, foreign, e.brokerCA)
	r := &garblerEnv{addr: addr}
	if err := call(r.dial(t, e.brokerCA, e.gCA)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a garbler certified by another CA: %v, want Unavailable", err)
	}
}

func mustPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	p, err := LoadCAPool(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGarblerRelayIntegrity (spec §10 #11): a hello the broker changed in any field is
// refused and leaves no state; the garbler's ack verifies under its pinned identity only;
// an ack whose key exchange the broker substituted fails the device's check.
func TestGarblerRelayIntegrity(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, gtSumFn)
	ctx := context.Background()
	d := gtNewDevice(t)
	h, _, msg := d.hello(t, contract.TypeHello, "", &contract.Policy{Fns: []string{f.ID}})

	tampers := map[string]func(h *contract.Hello){
		"policy widened":       func(h *contract.Hello) { h.Policy.Fns = append(h.Policy.Fns, "00000000000000000000000000000000") },
		"min inputs lowered":   func(h *contract.Hello) { h.Policy.MinInputs = 5 },
		"key exchange swapped": func(h *contract.Hello) { h.XEphPK = append([]byte(nil), h.XEphPK...); h.XEphPK[0] ^= 1 },
		"nonce changed":        func(h *contract.Hello) { h.Nonce = append([]byte(nil), h.Nonce...); h.Nonce[31] ^= 0x80 },
		"re-signed by another": func(h *contract.Hello) { o := gtNewDevice(t); h.Sign(o.key) },
	}
	for name, tamper := range tampers {
		var h2 contract.Hello
		if err := json.Unmarshal(msg, &h2); err != nil {
			t.Fatal(err)
		}
		tamper(&h2)
		b, _ := json.Marshal(&h2)
		_, err := e.client.Setup(ctx, &ppsv1.SetupRequest{Message: b})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if n, _ := e.redis.Client().Exists(ctx, pubKey(d.id)).Result(); n != 0 {
		t.Fatal("a refused hello left a publisher ratchet")
	}

	resp, err := e.client.Setup(ctx, &ppsv1.SetupRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	a := gtAck(t, h, resp.Message, e.signer.Public())
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := a.Validate(h, other); !errors.Is(err, contract.ErrMalformed) {
		t.Fatalf("the ack verified under another key: %v", err)
	}
	// A broker substituting its own ephemeral key cannot re-sign the ack.
	sub := *a
	sub.XEphPK = append([]byte(nil), a.XEphPK...)
	sub.XEphPK[5] ^= 1
	if err := sub.Validate(h, e.signer.Public()); !errors.Is(err, contract.ErrMalformed) {
		t.Fatalf("an ack with a substituted key exchange verified: %v", err)
	}
	// Nor can it replay the ack to another hello of the same device.
	h2, _, _ := d.hello(t, contract.TypeHello, "", &contract.Policy{Fns: []string{f.ID}})
	if err := a.Validate(h2, e.signer.Public()); !errors.Is(err, contract.ErrMalformed) {
		t.Fatalf("the ack verified for another hello: %v", err)
	}
}

// TestGarblerSetupRefusals: a subscriber of an unregistered function and a publisher whose
// policy allows nothing are refused with PermissionDenied and a "refused" notice for the
// device in the status details; a malformed message is InvalidArgument.
func TestGarblerSetupRefusals(t *testing.T) {
	e := newGarblerEnv(t)
	ctx := context.Background()
	refusal := func(err error, dev string) *contract.Notice {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want PermissionDenied", err)
		}
		for _, det := range status.Convert(err).Details() {
			if r, ok := det.(*ppsv1.SetupResponse); ok && r.DeviceId == dev {
				down, err := contract.DecodeDown(r.Message)
				if err != nil || down.Notice == nil || down.Notice.Type != contract.TypeRefused {
					t.Fatalf("refusal detail %q: %v", r.Message, err)
				}
				return down.Notice
			}
		}
		t.Fatalf("no refusal for %s in %v", dev, err)
		return nil
	}
	d := gtNewDevice(t)
	_, _, msg := d.hello(t, contract.TypeSub, "0123456789abcdef0123456789abcdef", nil)
	_, err := e.client.Setup(ctx, &ppsv1.SetupRequest{Message: msg})
	if n := refusal(err, d.id); n.Fn != "0123456789abcdef0123456789abcdef" || n.Reason == "" {
		t.Fatalf("refusal %+v", n)
	}
	_, _, msg = d.hello(t, contract.TypeHello, "", &contract.Policy{})
	_, err = e.client.Setup(ctx, &ppsv1.SetupRequest{Message: msg})
	refusal(err, d.id)
	if _, err := e.client.Setup(ctx, &ppsv1.SetupRequest{Message: []byte(`{"v":1,"type":"hello"}`)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("malformed hello: %v", err)
	}
}

// TestGarblerRefusesWhatItDoesNotImplement: an unspecified mode is refused, like an OT
// request for a faithful function, a garble request for another circuit, and slots that are
// not exactly the function's.
func TestGarblerRefusesWhatItDoesNotImplement(t *testing.T) {
	e := newGarblerEnv(t)
	ctx := context.Background()
	for mode, want := range map[ppsv1.Mode]codes.Code{ppsv1.Mode_MODE_UNSPECIFIED: codes.InvalidArgument} {
		if _, err := e.client.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: gtSumFn, Mode: mode}); status.Code(err) != want {
			t.Fatalf("register in %v: %v, want %v", mode, err, want)
		}
	}
	if _, err := e.client.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: "(+ 1", Mode: ppsv1.Mode_MODE_FAITHFUL}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad source: %v", err)
	}
	f := e.register(t, gtSumFn)
	again, err := e.client.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: gtSumFn, Mode: ppsv1.Mode_MODE_FAITHFUL})
	if err != nil || again.FnId != f.ID || again.Epoch != 0 || again.Round != 0 {
		t.Fatalf("registering again is not idempotent: %v %v", again, err)
	}
	p := e.setupPublisher(t, f.ID)
	h := f.Circuit.Hash()
	slots := []*ppsv1.SlotInput{{Slot: 0, PubId: p.dev.id}, {Slot: 1, PubId: p.dev.id}}
	garble := func(req *ppsv1.GarbleRequest) error {
		s, err := e.client.Garble(ctx, req)
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	bad := map[string]struct {
		req  *ppsv1.GarbleRequest
		code codes.Code
	}{
		"another circuit": {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: make([]byte, 32), Slots: slots}, codes.FailedPrecondition},
		"ot request":      {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Slots: slots, OtRequest: []byte{1}}, codes.InvalidArgument},
		"a slot missing":  {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Slots: slots[:1]}, codes.InvalidArgument},
		"valid and null": {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Slots: slots,
			Nullified: []*ppsv1.Nullified{{Slot: 1, Reason: uint32(pps.Missing)}}}, codes.InvalidArgument},
		"reason valid": {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Slots: slots[:1],
			Nullified: []*ppsv1.Nullified{{Slot: 1, Reason: uint32(pps.Valid)}}}, codes.InvalidArgument},
		"unknown function": {&ppsv1.GarbleRequest{FnId: "0123456789abcdef0123456789abcdef", CircuitHash: h[:], Slots: slots}, codes.NotFound},
		"all nullified": {&ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Nullified: []*ppsv1.Nullified{
			{Slot: 0, Reason: uint32(pps.Missing)}, {Slot: 1, Reason: uint32(pps.Inconsistent)}}}, codes.FailedPrecondition},
	}
	for name, c := range bad {
		if err := garble(c.req); status.Code(err) != c.code {
			t.Fatalf("%s: %v, want %v", name, err, c.code)
		}
	}
}

// TestGarblerEnforcesPublisherPolicy (D13, defence in depth): a slot fed by a publisher
// whose signed policy does not allow the function gets no labels in the consistency check
// and is hard-wired by the garbler itself, reported in the header.
func TestGarblerEnforcesPublisherPolicy(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, gtSumFn)
	allowed := e.setupPublisher(t, f.ID)
	elsewhere := e.setupPublisher(t, "00000000000000000000000000000000")
	feeds := map[int]*gtFeed{
		0: {pub: allowed, round: 0, labels: allowed.publish(t, 0, 3<<8)},
		1: {pub: elsewhere, round: 0, labels: elsewhere.publish(t, 0, 4<<8)},
	}
	ex := gtExecute(t, e.client, f, feeds, 0, nil)
	if !slices.Equal(ex.bad, []uint32{1}) || !slices.Equal(ex.erased, []uint32{1}) {
		t.Fatalf("bad %v erased %v, want slot 1 refused", ex.bad, ex.erased)
	}
	if ex.header.Valid != 1 {
		t.Fatalf("%d valid slots", ex.header.Valid)
	}
	// The broker's own nullification left slot 1 out; asked to garble it as valid, the
	// garbler hard-wires it anyway.
	h := f.Circuit.Hash()
	s, err := e.client.Garble(context.Background(), &ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], Slots: []*ppsv1.SlotInput{
		{Slot: 0, PubId: allowed.dev.id}, {Slot: 1, PubId: elsewhere.dev.id}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if hdr := m.GetHeader(); !slices.Equal(hdr.GetErasedSlots(), []uint32{1}) || hdr.GetValid() != 1 {
		t.Fatalf("header %v: want slot 1 hard-wired by the garbler", hdr)
	}
}

// TestGarblerRevokeRegrants (D14): revoking one of two subscribers starts a new epoch; the
// other's regrant verifies under the garbler's key against its own hello and unmasks the
// next output; the revoked one cannot.
func TestGarblerRevokeRegrants(t *testing.T) {
	e := newGarblerEnv(t)
	ctx := context.Background()
	f := e.register(t, gtSumFn)
	stay, gone := e.subscribe(t, f.ID), e.subscribe(t, f.ID)
	resp, err := e.client.Revoke(ctx, &ppsv1.RevokeRequest{FnId: f.ID, DeviceId: gone.dev.id})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Epoch != 1 || len(resp.Regrants) != 1 || resp.Regrants[0].DeviceId != stay.dev.id {
		t.Fatalf("revoke: %v", resp)
	}
	a := gtAck(t, stay.hello, resp.Regrants[0].Message, e.signer.Public())
	if a.Type != contract.TypeRegrant {
		t.Fatalf("regrant of type %s", a.Type)
	}
	stay.accept(t, a)
	if _, err := e.client.Revoke(ctx, &ppsv1.RevokeRequest{FnId: f.ID, DeviceId: gone.dev.id}); status.Code(err) != codes.NotFound {
		t.Fatalf("revoking twice: %v", err)
	}

	values := []pps.Fixed{7 << 8, -2 << 8}
	feeds := map[int]*gtFeed{}
	for i := range f.Layout.Slots {
		p := e.setupPublisher(t, f.ID)
		feeds[i] = &gtFeed{pub: p, round: 0, labels: p.publish(t, 0, values[i])}
	}
	ex := gtExecute(t, e.client, f, feeds, 0, nil)
	if ex.header.Epoch != 1 {
		t.Fatalf("output of epoch %d after the revocation", ex.header.Epoch)
	}
	got, err := stay.sub.Unmask(ex.header.Epoch, ex.header.Round, ex.masked, f.OutputBits())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.Model(ex.assign.ModelInputs(values))
	if string(got) != string(want) {
		t.Fatalf("the remaining subscriber unmasked %x, want %x", got, want)
	}
	if _, err := gone.sub.Unmask(ex.header.Epoch, ex.header.Round, ex.masked, f.OutputBits()); !errors.Is(err, pps.ErrEpoch) {
		t.Fatalf("the revoked subscriber: %v, want ErrEpoch", err)
	}
}

// TestGarblerRegistersOnlyDeclaredFunctions: with its own domain's pipelines
// (GarblerOptions.Functions), the garbler refuses to register a function no pipeline
// declares, whatever the broker relays, and registers the declared one.
func TestGarblerRegistersOnlyDeclaredFunctions(t *testing.T) {
	e := newGarblerEnv(t)
	declared, err := dsl.Compile(gtSumFn)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGarbler(GarblerOptions{Functions: map[string]bool{declared.ID: true}, Redis: e.redis.Client(), Sealer: e.sealer, Signer: e.signer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = g.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: gtWindowFn, Mode: ppsv1.Mode_MODE_FAITHFUL})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an undeclared function: %v, want PermissionDenied", err)
	}
	got, err := g.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: gtSumFn, Mode: ppsv1.Mode_MODE_FAITHFUL})
	if err != nil || got.FnId != declared.ID {
		t.Fatalf("the declared function: %v %v", got, err)
	}
}
