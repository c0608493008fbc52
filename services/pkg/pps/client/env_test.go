package client

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/testenv"
)

const brokerPassword = "broker-pw"

// env is a NATS server with its MQTT listener, one account holding the three PPS streams,
// the broker's user and one user per device with contract.DevicePermissions.
type env struct {
	t       *testing.T
	nats    *testenv.NATS
	nc      *nats.Conn
	js      jetstream.JetStream
	devices map[string]*Device
	pwFiles map[string]string
	garbler ed25519.PrivateKey
}

// newDevice is a device provisioned with the garbler's key.
func newDevice(t testing.TB, garbler ed25519.PrivateKey) *Device {
	_, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d := &Device{Key: sk}
	if garbler != nil {
		d.Garbler = garbler.Public().(ed25519.PublicKey)
	}
	return d
}

// startEnv starts NATS for the given devices, each allowed to subscribe to the outputs of fns,
// and creates the three streams as the broker would.
func startEnv(t *testing.T, devices []*Device, fns []string) *env {
	t.Helper()
	e := startNATS(t, devices, fns)
	ctx := e.ctx()
	for _, sc := range []jetstream.StreamConfig{
		{Name: contract.PubStream, Subjects: []string{contract.PubSubjects}, MaxAge: 26 * time.Hour},
		{Name: contract.DevStream, Subjects: []string{contract.DevSubjects}, Retention: jetstream.WorkQueuePolicy},
		{Name: contract.OutStream, Subjects: []string{contract.OutSubjects}, MaxAge: 7 * 24 * time.Hour},
	} {
		if _, err := e.js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("create stream %s: %v", sc.Name, err)
		}
	}
	return e
}

// startNATS starts NATS with the PPS account, the broker's user and the devices' users.
func startNATS(t *testing.T, devices []*Device, fns []string) *env {
	t.Helper()
	_, gsk, _ := ed25519.GenerateKey(rand.Reader)
	e := &env{t: t, devices: map[string]*Device{}, pwFiles: map[string]string{}, garbler: gsk}
	users := []natsx.User{{Name: contract.BrokerUser, Password: brokerPassword}}
	dir := t.TempDir()
	for i, d := range devices {
		d.Garbler = gsk.Public().(ed25519.PublicKey)
		id := d.ID()
		pw := fmt.Sprintf("device-%d-pw", i)
		path := filepath.Join(dir, id[:8]+".password")
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.devices[id], e.pwFiles[id] = d, path
		pub, sub := contract.DevicePermissions(id, fns)
		users = append(users, natsx.User{Name: id, Password: pw, Permissions: &natsx.Permissions{PublishAllow: pub, SubscribeAllow: sub}})
	}
	layout := natsx.Layout{Accounts: []natsx.Account{{Name: "PPS", JetStream: true, Users: users}}}
	e.nats = testenv.StartNATS(t, testenv.WithNATSConfig(layout.Render()), testenv.WithMQTT())
	e.nc = e.nats.Connect(t, nats.UserInfo(contract.BrokerUser, brokerPassword))
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) options(d *Device) Options {
	return Options{Addr: e.nats.MQTTAddr(), PasswordFile: e.pwFiles[d.ID()]}
}

func (e *env) publisher(d *Device, persist func([]byte) error) *Publisher {
	e.t.Helper()
	p, err := DialPublisher(e.ctx(), *d, PublisherOptions{Options: e.options(d), Persist: persist})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}

func (e *env) subscriber(d *Device, regrantWait time.Duration) *Subscriber {
	e.t.Helper()
	s, err := DialSubscriber(e.ctx(), *d, SubscriberOptions{Options: e.options(d), RegrantWait: regrantWait})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Close)
	return s
}

// streamMessages returns every message of stream on subject, oldest first.
func (e *env) streamMessages(stream, subject string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	ctx := e.ctx()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (a work queue's acknowledged message)
		}
		if subject == "" || m.Subject == subject {
			out = append(out, m)
		}
	}
	return out
}

// responder plays the garbler and the broker's relay for the setup handshakes, with the
// real pps code: it consumes PPS_DEV as the broker does, answers as the garbler would
// (ServerSessionKeys, PublisherRatchetKey, FunctionKeys) and relays on the device's down
// subject. It keeps the garbler's side of every ratchet so tests can check what devices sent.
type responder struct {
	e *env

	mu         sync.Mutex
	publishers map[string]*pps.Ratchet               // device id → the garbler's copy of its ratchet
	functions  map[string]*pps.FunctionKeys          // fnid → keys
	hellos     map[string]map[string]*contract.Hello // fnid → device id → its sub hello
	// tamper, when set, rewrites each ack before it is relayed (a malicious broker).
	tamper func(*contract.Ack, *contract.Hello)
	// refuse, when set, answers every hello with a "refused" notice.
	refuse string
}

func (e *env) startResponder() *responder {
	r := &responder{e: e, publishers: map[string]*pps.Ratchet{}, functions: map[string]*pps.FunctionKeys{},
		hellos: map[string]map[string]*contract.Hello{}}
	ctx, cancel := context.WithCancel(context.Background())
	cons, err := e.js.CreateOrUpdateConsumer(ctx, contract.DevStream, jetstream.ConsumerConfig{
		Durable: contract.BrokerDurable + "-dev", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		e.t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := r.answer(m.Subject(), m.Data()); err != nil {
			e.t.Logf("responder: %v", err)
		}
		_ = m.Ack()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cc.Stop(); cancel() })
	return r
}

func (r *responder) function(fn string) *pps.FunctionKeys {
	r.mu.Lock()
	defer r.mu.Unlock()
	fk := r.functions[fn]
	if fk == nil {
		var err error
		if fk, err = pps.NewFunctionKeys(nil); err != nil {
			panic(err)
		}
		r.functions[fn] = fk
		r.hellos[fn] = map[string]*contract.Hello{}
	}
	return fk
}

func (r *responder) send(id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.e.nc.Publish(contract.DevDownSubject(id), b)
}

func (r *responder) answer(subject string, b []byte) error {
	id, err := contract.ParseDevUpSubject(subject)
	if err != nil {
		return err
	}
	h, err := contract.DecodeHello(b)
	if err != nil {
		return err
	}
	if h.DeviceID() != id {
		return fmt.Errorf("hello from %s on %s's topic", h.DeviceID(), id)
	}
	if r.refuse != "" {
		return r.send(id, &contract.Notice{V: contract.Version, Type: contract.TypeRefused, Fn: h.Fn, Reason: r.refuse})
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	keys, err := pps.ServerSessionKeys(eph, h.XEphPK)
	if err != nil {
		return err
	}
	ack := &contract.Ack{V: contract.Version, Fn: h.Fn, XEphPK: eph.PublicKey().Bytes(), Nonce: make([]byte, contract.NonceSize)}
	rand.Read(ack.Nonce)
	switch h.Type {
	case contract.TypeHello:
		ack.Type = contract.TypeHelloAck
		k0 := pps.PublisherRatchetKey(&keys)
		r.mu.Lock()
		r.publishers[id] = pps.NewRatchet(&k0, 0, pps.RatchetOptions{Retain: 1 << 10})
		r.mu.Unlock()
	case contract.TypeSub:
		ack.Type = contract.TypeSubAck
		fk := r.function(h.Fn)
		r.mu.Lock()
		ack.Grant, err = fk.Subscribe(id, &keys, contract.GrantAD(h.Fn, h.EdPK, h.Transcript()))
		r.hellos[h.Fn][id] = h
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	keys.Zero()
	ack.Sig = ed25519.Sign(r.e.garbler, ack.SigningBytes(h.Transcript()))
	if r.tamper != nil {
		r.tamper(ack, h)
	}
	if err := r.send(id, ack); err != nil {
		return err
	}
	if h.Type == contract.TypeHello {
		return r.send(id, &contract.Notice{V: contract.Version, Type: contract.TypeRegistered, PubID: id, Topic: contract.Topic(contract.PubSubject(id))})
	}
	return nil
}

// seed is the garbler's round seed s_k of device id.
func (r *responder) seed(t testing.TB, id string, k uint64) pps.Seed {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := r.publishers[id]
	if rt == nil {
		t.Fatalf("no ratchet for %s", id)
	}
	seed, err := rt.AdvanceTo(k)
	if err != nil {
		t.Fatal(err)
	}
	return seed
}

// labels are the labels the garbler derives for device id's values at round k: what an
// honest publisher must have sent.
func (r *responder) labels(t testing.TB, id string, k uint64, values []pps.Fixed) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := r.publishers[id]
	if rt == nil {
		t.Fatalf("no ratchet for %s", id)
	}
	seed, err := rt.AdvanceTo(k)
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Zero()
	return pps.PublishLabels(&seed, values)
}

// revoke revokes a subscriber of fn and relays the regrants to the others.
func (r *responder) revoke(t testing.TB, fn, id string) {
	t.Helper()
	fk := r.function(fn)
	r.mu.Lock()
	grants, err := fk.Revoke(id)
	hellos := r.hellos[fn]
	delete(hellos, id)
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for sid, g := range grants {
		h := hellos[sid]
		a := &contract.Ack{V: contract.Version, Type: contract.TypeRegrant, Fn: fn, Grant: g}
		a.Sig = ed25519.Sign(r.e.garbler, a.SigningBytes(h.Transcript()))
		if err := r.send(sid, a); err != nil {
			t.Fatal(err)
		}
	}
}

// output publishes one execution's output of f as the broker would: the model's result
// masked with r from the function ratchet's fresh round (status "ok"), or ⊥.
func (r *responder) output(t testing.TB, f *dsl.Function, values []pps.Fixed, insufficient bool) *contract.Output {
	t.Helper()
	fk := r.function(f.ID)
	var exec [16]byte
	rand.Read(exec[:])
	o := &contract.Output{V: contract.Version, Fn: f.ID, Exec: contract.ExecIDString(exec), Valid: len(values)}
	if insufficient {
		o.Status, o.Valid = contract.StatusInsufficient, 0
	} else {
		valid := make([]bool, len(values))
		for i := range valid {
			valid[i] = true
		}
		plain, err := f.Model(values, valid)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		epoch, round, seed := fk.AllocateRound()
		r.mu.Unlock()
		mask := pps.OutputMask(&seed, f.OutputBits())
		seed.Zero()
		for i := range plain {
			plain[i] ^= mask[i]
		}
		o.Status, o.Round, o.Epoch, o.Bits, o.Masked = contract.StatusOK, round, epoch, f.OutputBits(), plain
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.js.Publish(r.e.ctx(), contract.OutSubject(f.ID), b); err != nil {
		t.Fatal(err)
	}
	return o
}
