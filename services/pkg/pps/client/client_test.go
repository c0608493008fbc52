package client

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/testenv"
)

func policyFor(fns ...string) contract.Policy { return contract.Policy{Fns: fns} }

const anyFn = "0123456789abcdef0123456789abcdef"

// TestPublishLandsOnPPSPubWithTheExactBytes: after the setup handshake against the
// garbler's side, a publish over MQTT lands on JetStream stream PPS_PUB, subject
// pps.pub.<id>, as exactly the contract.Publish bytes of the labels the garbler derives
// from its own copy of the ratchet — both ends agree on K_0 and on the labels of round 0.
func TestPublishLandsOnPPSPubWithTheExactBytes(t *testing.T) {
	d := newDevice(t, nil)
	e := startEnv(t, []*Device{d}, nil)
	r := e.startResponder()
	p := e.publisher(d, nil)
	if err := p.Setup(e.ctx(), policyFor(anyFn)); err != nil {
		t.Fatal(err)
	}
	values := []pps.Fixed{pps.FixedFromFloat(21.5), pps.FixedFromInt(-3)}
	k, err := p.Publish(e.ctx(), values)
	if err != nil || k != 0 {
		t.Fatalf("publish: round %d, %v; want round 0", k, err)
	}
	var msgs []*jetstreamMsg
	testenv.Eventually(t, 30*time.Second, "the publish in PPS_PUB", func() error {
		msgs = rawMessages(e, contract.PubStream, contract.PubSubject(d.ID()))
		if len(msgs) != 1 {
			return fmt.Errorf("%d messages", len(msgs))
		}
		return nil
	})
	want, _ := json.Marshal(&contract.Publish{V: contract.Version, Round: 0, Labels: r.labels(t, d.ID(), 0, values)})
	if !bytes.Equal(msgs[0].data, want) {
		t.Fatalf("PPS_PUB holds %.120s…, want the contract.Publish of the garbler's labels %.120s…", msgs[0].data, want)
	}
	if _, err := contract.DecodePublish(msgs[0].data); err != nil {
		t.Fatalf("the broker's decoder refuses it: %v", err)
	}
}

type jetstreamMsg struct {
	subject string
	data    []byte
}

func rawMessages(e *env, stream, subject string) []*jetstreamMsg {
	var out []*jetstreamMsg
	for _, m := range e.streamMessages(stream, subject) {
		out = append(out, &jetstreamMsg{subject: m.Subject, data: m.Data})
	}
	return out
}

// rawMQTT is a device's own MQTT connection, for a device that misbehaves: it can try any
// topic, which the Publisher never would.
func rawMQTT(t *testing.T, e *env, d *Device) mqtt.Client {
	t.Helper()
	pw, err := (&Options{PasswordFile: e.pwFiles[d.ID()]}).password()
	if err != nil {
		t.Fatal(err)
	}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + e.nats.MQTTAddr()).SetClientID(rand.Text()).
		SetUsername(d.ID()).SetPassword(pw).SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// mqttPublish publishes with QoS 1 and waits for the token; a denied publish may end the
// connection, so errors are returned, not fatal.
func mqttPublish(c mqtt.Client, topic string, b []byte) error {
	tok := c.Publish(topic, 1, false, b)
	if !tok.WaitTimeout(10 * time.Second) {
		return errors.New("no PUBACK")
	}
	return tok.Error()
}

// TestDeviceCannotPublishOnAnotherDevicesTopics is spec §10 #10 for devices: device A, with
// its own credentials, publishes on B's pps/pub and pps/dev topics and on topics with a '.'
// (§10 #15); then, as a control, on its own. Only the control reaches the streams.
func TestDeviceCannotPublishOnAnotherDevicesTopics(t *testing.T) {
	a, b := newDevice(t, nil), newDevice(t, nil)
	e := startEnv(t, []*Device{a, b}, nil)
	payload := []byte(`{"v":1,"round":0,"masked":"AAAAAA=="}`)
	forbidden := []string{
		contract.Topic(contract.PubSubject(b.ID())),
		contract.Topic(contract.DevUpSubject(b.ID())),
		contract.Topic(contract.DevDownSubject(b.ID())),
		contract.Topic(contract.PubSubject(a.ID())) + ".x", // NATS maps '.' to "//": pps.pub.<a>//x
		"pps/pub/" + a.ID()[:10] + "." + a.ID()[10:],
		contract.Topic(contract.OutSubject(anyFn)),
	}
	for _, topic := range forbidden {
		c := rawMQTT(t, e, a) // a denied publish may close the connection: one per attempt
		_ = mqttPublish(c, topic, payload)
	}
	c := rawMQTT(t, e, a)
	if err := mqttPublish(c, contract.Topic(contract.PubSubject(a.ID())), payload); err != nil {
		t.Fatal(err)
	}
	if err := mqttPublish(c, contract.Topic(contract.DevUpSubject(a.ID())), payload); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the control messages in the streams", func() error {
		if n := len(rawMessages(e, contract.DevStream, "")); n < 1 {
			return fmt.Errorf("PPS_DEV holds %d", n)
		}
		if n := len(rawMessages(e, contract.PubStream, "")); n < 1 {
			return fmt.Errorf("PPS_PUB holds %d", n)
		}
		return nil
	})
	// Every forbidden publish was answered (PUBACK or a closed connection) before the control
	// went out, and the listener stores a QoS 1 publish before it acknowledges: had one been
	// accepted it would be in a stream by now, ahead of the control.
	for stream, want := range map[string]string{contract.PubStream: contract.PubSubject(a.ID()), contract.DevStream: contract.DevUpSubject(a.ID())} {
		msgs := rawMessages(e, stream, "")
		if len(msgs) != 1 || msgs[0].subject != want {
			var got []string
			for _, m := range msgs {
				got = append(got, m.subject)
			}
			t.Errorf("%s holds %v, want only %s", stream, got, want)
		}
	}
	if n := len(rawMessages(e, contract.OutStream, "")); n != 0 {
		t.Errorf("a device published %d function outputs", n)
	}
}

// TestDeviceCannotReadAnotherDevicesDownTopic: B's setup answers (and a subscriber's
// function outputs it may not read) never reach A.
func TestDeviceCannotReadAnotherDevicesDownTopic(t *testing.T) {
	a, b := newDevice(t, nil), newDevice(t, nil)
	e := startEnv(t, []*Device{a, b}, nil)
	c := rawMQTT(t, e, a)
	got := make(chan string, 16)
	for _, topic := range []string{contract.Topic(contract.DevDownSubject(b.ID())), contract.Topic(contract.OutSubject(anyFn)), contract.Topic(contract.DevDownSubject(a.ID()))} {
		tok := c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { got <- m.Topic() })
		tok.WaitTimeout(10 * time.Second)
	}
	for _, s := range []string{contract.DevDownSubject(b.ID()), contract.OutSubject(anyFn), contract.DevDownSubject(a.ID())} {
		if err := e.nc.Publish(s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case topic := <-got:
		if topic != contract.Topic(contract.DevDownSubject(a.ID())) {
			t.Fatalf("A received a message on %s", topic)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A never received its own down message (the control)")
	}
}

// TestTopicsWithDotsAreRefused is spec §10 #15 on the client side: a level holding '.'
// would become "//" in the NATS subject, so the client refuses it before sending.
func TestTopicsWithDotsAreRefused(t *testing.T) {
	d := newDevice(t, nil)
	e := startEnv(t, []*Device{d}, nil)
	p := e.publisher(d, nil)
	for _, topic := range []string{p.Topic() + ".x", "pps/pub/a.b", "pps/dev/" + d.ID() + "/up.", "pps/fn/+/out", "pps/pub/#"} {
		if err := p.cn.publish(e.ctx(), topic, []byte("{}")); !errors.Is(err, contract.ErrMalformed) {
			t.Errorf("publish on %q: %v, want refused as malformed", topic, err)
		}
		if err := p.cn.subscribe(e.ctx(), topic, func([]byte) {}); !errors.Is(err, contract.ErrMalformed) {
			t.Errorf("subscribe to %q: %v, want refused as malformed", topic, err)
		}
	}
}

// TestTamperedSetupAnswersAreRefused is spec §10 #11: a relay that changes a byte of the
// garbler's answer, or substitutes its own key exchange signed with its own key, fails the
// setup with ErrTampered, and the device derives no ratchet key from it.
func TestTamperedSetupAnswersAreRefused(t *testing.T) {
	f := compile(t, `(begin (define a (val "a")) (start-building) (+ a 1))`)
	_, evil, _ := ed25519.GenerateKey(rand.Reader)
	substitute := func(a *contract.Ack, transcript [32]byte) {
		eph, _ := ecdh.X25519().GenerateKey(rand.Reader)
		a.XEphPK = eph.PublicKey().Bytes()
		a.Sig = ed25519.Sign(evil, a.SigningBytes(transcript))
	}
	cases := []struct {
		name   string
		tamper func(a *contract.Ack, transcript [32]byte)
	}{
		{"flipped key exchange byte", func(a *contract.Ack, _ [32]byte) { a.XEphPK[3] ^= 1 }},
		{"flipped nonce byte", func(a *contract.Ack, _ [32]byte) { a.Nonce[0] ^= 0x80 }},
		{"broker's own key exchange", substitute},
		{"signature over another transcript", func(a *contract.Ack, _ [32]byte) {
			var other [32]byte
			a.Sig = ed25519.Sign(evil, a.SigningBytes(other))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub, sub := newDevice(t, nil), newDevice(t, nil)
			e := startEnv(t, []*Device{pub, sub}, []string{f.ID})
			r := e.startResponder()
			// The garbler signed over the hello it received; the relay rewrites the ack.
			r.tamper = func(a *contract.Ack, h *contract.Hello) { tc.tamper(a, h.Transcript()) }
			p := e.publisher(pub, nil)
			if err := p.Setup(e.ctx(), policyFor(f.ID)); !errors.Is(err, ErrTampered) {
				t.Fatalf("publisher setup: %v, want ErrTampered", err)
			}
			if _, err := p.Publish(e.ctx(), []pps.Fixed{1}); !errors.Is(err, ErrNotSetUp) {
				t.Fatalf("publish after a tampered setup: %v, want ErrNotSetUp", err)
			}
			s := e.subscriber(sub, time.Second)
			if _, err := s.Subscribe(e.ctx(), f); !errors.Is(err, ErrTampered) {
				t.Fatalf("subscribe: %v, want ErrTampered", err)
			}
		})
	}
}

// TestRefusedSetupSurfacesTheReason: a "refused" notice ends the setup with ErrRefused.
func TestRefusedSetupSurfacesTheReason(t *testing.T) {
	d := newDevice(t, nil)
	e := startEnv(t, []*Device{d}, nil)
	r := e.startResponder()
	r.refuse = "policy names an unknown function"
	p := e.publisher(d, nil)
	err := p.Setup(e.ctx(), policyFor(anyFn))
	if !errors.Is(err, ErrRefused) || !bytes.Contains([]byte(err.Error()), []byte("unknown function")) {
		t.Fatalf("setup: %v, want ErrRefused with the reason", err)
	}
}

// TestRatchetRoundsStrictlyIncreaseAcrossPublishAndRestore is D7 and §10 #8 on the device:
// rounds go up by one per message, a restart restored from the persisted state continues
// after the last round used (never repeating one), and the restored ratchet still derives
// the garbler's labels. A state persisted for another device is refused.
func TestRatchetRoundsStrictlyIncreaseAcrossPublishAndRestore(t *testing.T) {
	d, other := newDevice(t, nil), newDevice(t, nil)
	e := startEnv(t, []*Device{d, other}, nil)
	r := e.startResponder()
	var stored []byte
	persist := func(st []byte) error { stored = append(stored[:0], st...); return nil }
	p := e.publisher(d, persist)
	if err := p.Setup(e.ctx(), policyFor(anyFn)); err != nil {
		t.Fatal(err)
	}
	var values [][]pps.Fixed
	for i := range 3 {
		v := []pps.Fixed{pps.FixedFromInt(i)}
		values = append(values, v)
		if k, err := p.Publish(e.ctx(), v); err != nil || k != uint64(i) {
			t.Fatalf("publish %d: round %d, %v", i, k, err)
		}
	}
	p.Close()

	// A failed persist burns the round and sends nothing.
	p2 := e.publisher(d, func([]byte) error { return errors.New("disk full") })
	if err := p2.Restore(stored); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Publish(e.ctx(), []pps.Fixed{7}); err == nil {
		t.Fatal("publish with a failing persist succeeded")
	}
	p2.Close()

	p3 := e.publisher(d, persist)
	if err := p3.Restore(stored); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 5; i++ {
		v := []pps.Fixed{pps.FixedFromInt(i)}
		values = append(values, v)
		k, err := p3.Publish(e.ctx(), v)
		if err != nil || k != uint64(i) {
			t.Fatalf("publish %d after restore: round %d, %v", i, k, err)
		}
	}
	var msgs []*jetstreamMsg
	testenv.Eventually(t, 30*time.Second, "five publishes in PPS_PUB", func() error {
		if msgs = rawMessages(e, contract.PubStream, contract.PubSubject(d.ID())); len(msgs) != 5 {
			return fmt.Errorf("%d messages", len(msgs))
		}
		return nil
	})
	for i, m := range msgs {
		pm, err := contract.DecodePublish(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if pm.Round != uint64(i) {
			t.Fatalf("message %d has round %d: rounds must go up by one and never repeat", i, pm.Round)
		}
		if !bytes.Equal(pm.Labels, r.labels(t, d.ID(), pm.Round, values[i])) {
			t.Fatalf("round %d: labels differ from the garbler's", pm.Round)
		}
	}

	p4 := e.publisher(other, nil)
	if err := p4.Restore(stored); !errors.Is(err, ErrState) {
		t.Fatalf("restoring another device's state: %v, want ErrState", err)
	}
}

// TestHardenedPublishSendsMaskedValues is D21 on the device: a publisher feeding only
// hardened functions sends y = x ⊕ m and no label; one feeding both modes sends both, for
// the same round; the garbler's mask for that round opens y to x.
func TestHardenedPublishSendsMaskedValues(t *testing.T) {
	only, both := newDevice(t, nil), newDevice(t, nil)
	e := startEnv(t, []*Device{only, both}, nil)
	r := e.startResponder()
	values := []pps.Fixed{pps.FixedFromFloat(-2.25), pps.FixedFromInt(1000)}
	for _, tc := range []struct {
		d     *Device
		modes []string
	}{{only, []string{contract.ModeHardened}}, {both, []string{contract.ModeHardened, contract.ModeFaithful}}} {
		p, err := DialPublisher(e.ctx(), *tc.d, PublisherOptions{Options: e.options(tc.d), Modes: tc.modes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.Setup(e.ctx(), policyFor(anyFn)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(e.ctx(), values); err != nil {
			t.Fatal(err)
		}
		var msgs []*jetstreamMsg
		testenv.Eventually(t, 30*time.Second, "the publish in PPS_PUB", func() error {
			if msgs = rawMessages(e, contract.PubStream, contract.PubSubject(tc.d.ID())); len(msgs) != 1 {
				return fmt.Errorf("%d messages", len(msgs))
			}
			return nil
		})
		pm, err := contract.DecodePublish(msgs[0].data)
		if err != nil {
			t.Fatal(err)
		}
		if wantLabels := len(tc.modes) == 2; (len(pm.Labels) > 0) != wantLabels {
			t.Fatalf("modes %v: labels sent = %v", tc.modes, len(pm.Labels) > 0)
		}
		if len(pm.Labels) > 0 && !bytes.Equal(pm.Labels, r.labels(t, tc.d.ID(), 0, values)) {
			t.Fatal("labels differ from the garbler's")
		}
		ys, err := pps.SplitMasked(pm.Masked, len(values))
		if err != nil {
			t.Fatal(err)
		}
		seed := r.seed(t, tc.d.ID(), pm.Round)
		for v, y := range ys {
			if x := pps.Fixed(int32(y ^ pps.InputMask(&seed, v))); x != values[v] {
				t.Fatalf("modes %v value %d: unmasked %v, published %v", tc.modes, v, x, values[v])
			}
			if pps.Fixed(int32(y)) == values[v] {
				t.Fatalf("value %d travelled unmasked", v)
			}
		}
	}
	if _, err := DialPublisher(e.ctx(), *only, PublisherOptions{Options: e.options(only), Modes: []string{"paper"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown mode: %v, want ErrConfig", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, g, _ := ed25519.GenerateKey(rand.Reader)
	d := newDevice(t, g)
	ctx := context.Background()
	cases := map[string]struct {
		d Device
		o Options
	}{
		"no garbler key":        {Device{Key: d.Key}, Options{Addr: "127.0.0.1:1"}},
		"no device key":         {Device{Garbler: d.Garbler}, Options{Addr: "127.0.0.1:1"}},
		"no address":            {*d, Options{}},
		"missing password file": {*d, Options{Addr: "127.0.0.1:1", PasswordFile: "/nonexistent/pw"}},
	}
	for name, tc := range cases {
		if _, err := DialPublisher(ctx, tc.d, PublisherOptions{Options: tc.o}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

func compile(t testing.TB, src string) *dsl.Function {
	t.Helper()
	f, err := dsl.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSubscriberUnmasksOutputs: after the sub handshake, outputs masked with the function
// key at fresh rounds open to the model's result, in schema order (a Q24.8 value and a
// comparison bit); ⊥ arrives as Insufficient; a replayed execution is dropped; and the
// masked bytes on PPS_OUT (what the broker sees) differ from the plaintext.
func TestSubscriberUnmasksOutputs(t *testing.T) {
	f := compile(t, `(begin (define a (val "a")) (define b (val "b")) (start-building) (list (mean (list a b)) (< a b)))`)
	d := newDevice(t, nil)
	e := startEnv(t, []*Device{d}, []string{f.ID})
	r := e.startResponder()
	s := e.subscriber(d, time.Second)
	feed, err := s.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]pps.Fixed{{pps.FixedFromFloat(1.5), pps.FixedFromInt(4)}, {pps.FixedFromInt(9), pps.FixedFromInt(-1)}}
	var sent []*contract.Output
	for _, in := range inputs {
		sent = append(sent, r.output(t, f, in, false))
	}
	r.output(t, f, nil, true)
	// The broker replays the first execution.
	b, _ := json.Marshal(sent[0])
	if err := e.nc.Publish(contract.OutSubject(f.ID), b); err != nil {
		t.Fatal(err)
	}
	last := r.output(t, f, inputs[0], false)

	want := [][]float64{{2.75, 1}, {4, 0}}
	for i, w := range want {
		o, err := feed.Next(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		if o.Insufficient || o.Exec != sent[i].Exec || fmt.Sprint(o.Floats()) != fmt.Sprint(w) {
			t.Fatalf("output %d = %+v %v, want %v", i, o, o.Floats(), w)
		}
		valid := []bool{true, true}
		plain, _ := f.Model(inputs[i], valid)
		if bytes.Equal(plain, sent[i].Masked) {
			t.Fatalf("output %d travelled unmasked", i)
		}
	}
	o, err := feed.Next(e.ctx())
	if err != nil || !o.Insufficient || o.Values != nil {
		t.Fatalf("⊥: %+v, %v", o, err)
	}
	o, err = feed.Next(e.ctx())
	if err != nil || o.Exec != last.Exec {
		t.Fatalf("after the replay: %+v, %v; want the next execution (the replay dropped)", o, err)
	}
	if st := s.Stats(); st.Replayed != 1 {
		t.Fatalf("stats %+v, want one replay", st)
	}
}

// TestRegrantAfterRevocation is D14 through the clients: the garbler revokes one of two
// subscribers and regrants the other a new epoch; the remaining subscriber unmasks outputs
// of the new epoch (even one that arrives before its regrant is processed), the revoked one
// gets pps.ErrEpoch.
func TestRegrantAfterRevocation(t *testing.T) {
	f := compile(t, `(begin (define a (val "a")) (start-building) (* a 2))`)
	keep, gone := newDevice(t, nil), newDevice(t, nil)
	e := startEnv(t, []*Device{keep, gone}, []string{f.ID})
	r := e.startResponder()
	sk, sg := e.subscriber(keep, 30*time.Second), e.subscriber(gone, time.Second)
	fk, err := sk.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	fg, err := sg.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	r.output(t, f, []pps.Fixed{pps.FixedFromInt(3)}, false)
	for _, feed := range []*Feed{fk, fg} {
		if o, err := feed.Next(e.ctx()); err != nil || o.Floats()[0] != 6 {
			t.Fatalf("before revocation: %+v, %v", o, err)
		}
	}
	r.revoke(t, f.ID, gone.ID())
	r.output(t, f, []pps.Fixed{pps.FixedFromInt(5)}, false)
	o, err := fk.Next(e.ctx())
	if err != nil || o.Epoch != 1 || o.Floats()[0] != 10 {
		t.Fatalf("kept subscriber after revocation: %+v, %v; want 10 at epoch 1", o, err)
	}
	if fk.Epoch() != 1 {
		t.Fatalf("kept subscriber holds epoch %d", fk.Epoch())
	}
	if o, err := fg.Next(e.ctx()); !errors.Is(err, pps.ErrEpoch) {
		t.Fatalf("revoked subscriber: %+v, %v; want pps.ErrEpoch", o, err)
	}
}

// TestSubscriberResubscribesAfterRestart: a subscriber persists nothing; after a restart it
// subscribes again with a new handshake and opens the outputs published from then on (its
// grant starts at the next unallocated function round, so what was published while it was
// away stays closed to it).
func TestSubscriberResubscribesAfterRestart(t *testing.T) {
	f := compile(t, `(begin (define a (val "a")) (start-building) (- a 1))`)
	d := newDevice(t, nil)
	e := startEnv(t, []*Device{d}, []string{f.ID})
	r := e.startResponder()
	s := e.subscriber(d, time.Second)
	feed, err := s.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	r.output(t, f, []pps.Fixed{pps.FixedFromInt(5)}, false)
	if o, err := feed.Next(e.ctx()); err != nil || o.Floats()[0] != 4 {
		t.Fatalf("before the restart: %+v, %v", o, err)
	}
	s.Close()
	away := r.output(t, f, []pps.Fixed{pps.FixedFromInt(7)}, false)

	s2 := e.subscriber(d, time.Second)
	feed2, err := s2.Subscribe(e.ctx(), f)
	if err != nil {
		t.Fatal(err)
	}
	after := r.output(t, f, []pps.Fixed{pps.FixedFromInt(9)}, false)
	o, err := feed2.Next(e.ctx())
	if err != nil || o.Exec != after.Exec || o.Floats()[0] != 8 {
		t.Fatalf("after the restart: %+v, %v; want the output published after it (8)", o, err)
	}
	_ = away // masked before the new grant's round: no restarted subscriber can open it
}
