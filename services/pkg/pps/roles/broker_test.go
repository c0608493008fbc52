package roles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

func rejected(b *runningBroker, stage, reason string) float64 {
	return testutil.ToFloat64(b.m.Rejected.WithLabelValues(stage, reason))
}

func waitRejected(t *testing.T, b *runningBroker, stage, reason string, n float64) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%s rejections for %s", stage, reason), func() error {
		if got := rejected(b, stage, reason); got != n {
			return fmt.Errorf("%v counted, want %v", got, n)
		}
		return nil
	})
}

func TestBrokerRefusesInvalidPipelines(t *testing.T) {
	devs := []*btDevice{newBTDevice(t, 0), newBTDevice(t, 1)}
	ok := btPipeline("ns/sum", "sum", devs, nil, 0, time.Second, time.Second)
	hardened := ok
	hardened.Mode = contract.ModeHardened
	unbound := ok
	unbound.Publishers = unbound.Publishers[:1]
	extra := ok
	extra.Publishers = append(append([]contract.PipelinePublisher(nil), ok.Publishers...), contract.PipelinePublisher{Topic: "not/read", DeviceID: devs[0].id})
	twice := ok
	twice.Name = "ns/again"
	for _, tc := range []struct {
		name string
		ps   []contract.Pipeline
		want string
	}{
		{"topic without publisher", []contract.Pipeline{unbound}, "has no publisher"},
		{"publisher not read", []contract.Pipeline{extra}, "not read by the program"},
		{"same function twice", []contract.Pipeline{ok, twice}, "are the same function"},
		{"does not compile", []contract.Pipeline{{Name: "x", Source: "(begin (", Mode: contract.ModeFaithful,
			Window: ok.Window, Schedule: ok.Schedule}}, "compile"},
	} {
		err := ValidateBrokerPipelines(tc.ps)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if err := ValidateBrokerPipelines([]contract.Pipeline{ok}); err != nil {
		t.Errorf("valid pipeline: %v", err)
	}
	if err := ValidateBrokerPipelines([]contract.Pipeline{hardened}); err != nil {
		t.Errorf("hardened pipeline (H1, D21): %v", err)
	}
}

// The setup relay refuses, without reaching the garbler, a message that does not decode, one
// signed by another device than its topic's, and a subscription the pipeline does not list
// (D14); each is counted by reason and the device is told.
func TestBrokerSetupRefusalsNeverReachTheGarbler(t *testing.T) {
	e := startBrokerEnv(t, 3, nil)
	pub, outsider, other := e.devices[0], e.devices[1], e.devices[2]
	p := btPipeline("ns/sum", "sum", []*btDevice{pub}, []*btDevice{other}, 0, time.Second, time.Hour)
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t), Pipelines: []contract.Pipeline{p}}, func(b *Broker) {
		b.current().fns[0].status = FunctionRegistered
	})
	c := e.mqttClient(outsider)
	downs := e.downs(c, outsider)
	up := contract.Topic(contract.DevUpSubject(outsider.id))
	fn := b.current().fns[0].f.ID

	refused := func(what string) *contract.Notice {
		t.Helper()
		d := nextDown(t, downs)
		if d.Notice == nil || d.Notice.Type != contract.TypeRefused {
			t.Fatalf("%s: answer %+v, want a refusal", what, d)
		}
		return d.Notice
	}
	mqttPublish(t, c, up, []byte(`{"v":1,"type":"hello"`))
	refused("undecodable")
	waitRejected(t, b, stageSetup, reasonUndecodable, 1)

	_, forged := btHello(other, "", []string{fn}) // validly signed, but by another device
	mqttPublish(t, c, up, forged)
	refused("another device's hello")
	waitRejected(t, b, stageSetup, reasonDeviceMismatch, 1)

	_, sub := btHello(outsider, fn, nil)
	n := refused2(t, c, up, sub, downs)
	if n.Fn != fn {
		t.Errorf("ACL refusal names function %q, want %s", n.Fn, fn)
	}
	waitRejected(t, b, stageSetup, reasonACL, 1)

	_, unknown := btHello(outsider, strings.Repeat("ab", 16), nil)
	refused2(t, c, up, unknown, downs)
	waitRejected(t, b, stageSetup, reasonACL, 2)

	for _, typ := range []string{contract.TypeHello, contract.TypeSub} {
		for _, outcome := range []string{"accepted", "retry", "refused"} {
			if v := testutil.ToFloat64(b.m.Setups.WithLabelValues(typ, outcome)); v != 0 {
				t.Errorf("%s relayed to the garbler (%s %v times)", typ, outcome, v)
			}
		}
	}
}

func refused2(t *testing.T, c mqtt.Client, topic string, msg []byte, downs <-chan []byte) *contract.Notice {
	t.Helper()
	mqttPublish(t, c, topic, msg)
	d := nextDown(t, downs)
	if d.Notice == nil || d.Notice.Type != contract.TypeRefused {
		t.Fatalf("answer %+v, want a refusal", d)
	}
	return d.Notice
}

// The publish ingest stores the labels of a registered publisher's new round, and rejects,
// counted by reason, an unknown publisher, a replayed round (§10 #8), a wrong value count and
// a malformed message.
func TestBrokerIngestRejectsReplaysAndUnknownPublishers(t *testing.T) {
	e := startBrokerEnv(t, 3, nil)
	pub, stranger := e.devices[0], e.devices[1]
	p := btPipeline("ns/sum", "sum", []*btDevice{pub, stranger}, nil, 0, time.Second, time.Hour)
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t), Pipelines: []contract.Pipeline{p}}, nil)
	ctx := e.ctx()
	if err := b.Store().RegisterPublisher(ctx, pub.id, contract.Policy{Fns: []string{b.current().fns[0].f.ID}}); err != nil {
		t.Fatal(err)
	}
	c := e.mqttClient(pub)
	topic := contract.Topic(contract.PubSubject(pub.id))
	var seed pps.Seed
	msg := func(round uint64, values int) []byte {
		xs := make([]pps.Fixed, values)
		return btPublish(round, pps.PublishLabels(&seed, xs))
	}
	mqttPublish(t, c, topic, msg(3, 1))
	testenv.Eventually(t, 2*time.Minute, "round 3 stored", func() error {
		if l, err := b.Store().Labels(ctx, pub.id, 3); err != nil || l == nil {
			return fmt.Errorf("labels of round 3: %v %v", l, err)
		}
		return nil
	})
	mqttPublish(t, c, topic, msg(3, 1))
	waitRejected(t, b, stagePublish, reasonReplay, 1)
	mqttPublish(t, c, topic, msg(2, 1))
	waitRejected(t, b, stagePublish, reasonReplay, 2)
	mqttPublish(t, c, topic, msg(4, 2))
	waitRejected(t, b, stagePublish, reasonValueCount, 1)
	mqttPublish(t, c, topic, []byte(`{"v":1,"round":5}`))
	waitRejected(t, b, stagePublish, reasonUndecodable, 1)
	// A device bound to the pipeline but never registered with the garbler.
	mqttPublish(t, e.mqttClient(stranger), contract.Topic(contract.PubSubject(stranger.id)), msg(0, 1))
	waitRejected(t, b, stagePublish, reasonUnknownPub, 1)
	// The rejected rounds left nothing behind; the next fresh round is accepted.
	for _, r := range []uint64{2, 4, 5} {
		if l, _ := b.Store().Labels(ctx, pub.id, r); l != nil {
			t.Errorf("round %d stored after its rejection", r)
		}
	}
	mqttPublish(t, c, topic, msg(4, 1))
	testenv.Eventually(t, 2*time.Minute, "round 4 stored", func() error {
		if got := testutil.ToFloat64(b.m.Published); got != 2 {
			return fmt.Errorf("%v publishes stored, want 2", got)
		}
		return nil
	})
}

// Devices reach only their own setup inbox and publishing subject (§10 #10, spec §5.3): the
// NATS configuration of this test gives each device user exactly contract.DevicePermissions,
// and a device publishing or subscribing under another's id is refused by the server, over
// NATS and over MQTT, so the broker never sees it.
func TestBrokerDeviceACL(t *testing.T) {
	e := startBrokerEnv(t, 2, []string{strings.Repeat("0f", 16)})
	a, victim := e.devices[0], e.devices[1]
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t),
		Pipelines: []contract.Pipeline{btPipeline("ns/sum", "sum", []*btDevice{a, victim}, nil, 0, time.Second, time.Hour)}}, nil)
	ctx := e.ctx()
	for _, d := range e.devices {
		if err := b.Store().RegisterPublisher(ctx, d.id, contract.Policy{}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 16)
	nc := e.nats.Connect(t, nats.UserInfo(a.id, a.pw), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	var seed pps.Seed
	forged := btPublish(7, pps.PublishLabels(&seed, []pps.Fixed{1}))
	for _, subj := range []string{contract.PubSubject(victim.id), contract.DevUpSubject(victim.id), contract.OutSubject(strings.Repeat("0f", 16))} {
		if err := nc.Publish(subj, forged); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("publish to %s: %v, want a permissions violation", subj, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("publish to %s as another device was not refused", subj)
		}
	}
	if _, err := nc.SubscribeSync(contract.DevDownSubject(victim.id)); err == nil {
		_ = nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("subscribe to another device's down topic: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("subscription to another device's down topic was not refused")
		}
	}
	// Over MQTT: the forged publish is dropped; the device's own publish then arrives, and is
	// the only one the broker stored.
	mc := e.mqttClient(a)
	mc.Publish(contract.Topic(contract.PubSubject(victim.id)), 1, false, forged).WaitTimeout(10 * time.Second)
	mc2 := e.mqttClient(a)
	mqttPublish(t, mc2, contract.Topic(contract.PubSubject(a.id)), forged)
	testenv.Eventually(t, 2*time.Minute, "own publish stored", func() error {
		if l, _ := b.Store().Labels(ctx, a.id, 7); l == nil {
			return errors.New("not yet")
		}
		return nil
	})
	for _, m := range streamMsgs(t, e.observer(), contract.PubStream) {
		if m.Subject != contract.PubSubject(a.id) {
			t.Errorf("stream holds a message on %s, published by another device", m.Subject)
		}
	}
	if l, _ := b.Store().Labels(context.Background(), victim.id, 7); l != nil {
		t.Error("the broker stored labels forged under another device's id")
	}
}

// The broker creates the contract's streams: PPS_PUB kept for the longest window plus
// schedule of any pipeline (at least 26 h), PPS_DEV a work queue, PPS_OUT 7 days; and its
// durable pull consumers; the labels' Redis TTL follows the same retention.
func TestBrokerStreamsAndConsumers(t *testing.T) {
	e := startBrokerEnv(t, 2, nil)
	daily := btPipeline("ns/daily", "sum", e.devices[:1], nil, 0, 30*time.Hour, 24*time.Hour)
	short := btPipeline("ns/short", "max", e.devices[1:], nil, 0, time.Second, time.Minute)
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t), Pipelines: []contract.Pipeline{daily, short}}, nil)
	js := e.observer()
	ctx := e.ctx()
	testenv.Eventually(t, time.Minute, "consumers", func() error {
		for _, c := range b.Checks()[:5] {
			if err := c(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tc := range []struct {
		name      string
		maxAge    time.Duration
		retention jetstream.RetentionPolicy
	}{
		{contract.PubStream, 54 * time.Hour, jetstream.LimitsPolicy},
		{contract.DevStream, 24 * time.Hour, jetstream.WorkQueuePolicy},
		{contract.OutStream, OutRetention, jetstream.LimitsPolicy},
	} {
		s, err := js.Stream(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if cfg.MaxAge != tc.maxAge || cfg.Retention != tc.retention || cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s: max age %s, retention %v, storage %v; want %s, %v, file", tc.name, cfg.MaxAge, cfg.Retention, cfg.Storage, tc.maxAge, tc.retention)
		}
	}
	for _, c := range []struct{ stream, durable string }{{contract.PubStream, BrokerPubDurable}, {contract.DevStream, BrokerDevDurable}} {
		info, err := js.Consumer(ctx, c.stream, c.durable)
		if err != nil {
			t.Fatal(err)
		}
		if ci := info.CachedInfo(); ci.Config.Durable != c.durable || ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
			t.Errorf("consumer %s: %+v", c.durable, ci.Config)
		}
	}
	if got := time.Duration(b.Store().ttl.Load()); got != 54*time.Hour {
		t.Errorf("label TTL %s, want 54h", got)
	}
}
