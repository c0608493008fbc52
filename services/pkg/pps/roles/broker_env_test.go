package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// brokerEnv is the broker's world in a test: a NATS server with JetStream and its MQTT
// listener, one account with the broker's user and one user per device holding exactly
// contract.DevicePermissions, and the broker's own redis-server.
type brokerEnv struct {
	t       *testing.T
	nats    *testenv.NATS
	redis   *testenv.Redis
	devices []*btDevice
	fns     []string
}

const btBrokerPassword = "broker-pw"

// btDevice is a test device: its Ed25519 identity and NATS/MQTT password.
type btDevice struct {
	key ed25519.PrivateKey
	id  string
	pw  string
}

func newBTDevice(t testing.TB, i int) *btDevice {
	_, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &btDevice{key: sk, id: contract.DeviceID(sk.Public().(ed25519.PublicKey)), pw: fmt.Sprintf("device-%d-pw", i)}
}

// brokerUserPermissions are the broker's NATS permissions: the JetStream API, its acks, the
// devices' down topics and the function outputs. It cannot publish as a device.
var brokerUserPermissions = natsx.Permissions{
	PublishAllow:   []string{"$JS.API.>", "$JS.ACK.>", contract.DownSubjects, contract.OutSubjects},
	SubscribeAllow: []string{"_INBOX.>"},
}

// startBrokerEnv starts NATS and Redis for n devices, which may subscribe to the outputs of fns.
func startBrokerEnv(t *testing.T, n int, fns []string) *brokerEnv {
	t.Helper()
	return startBrokerEnvFor(t, newBTDevices(t, n), fns)
}

func newBTDevices(t testing.TB, n int) []*btDevice {
	var devs []*btDevice
	for i := range n {
		devs = append(devs, newBTDevice(t, i))
	}
	return devs
}

// startBrokerEnvFor starts NATS and Redis for the given devices.
func startBrokerEnvFor(t *testing.T, devs []*btDevice, fns []string) *brokerEnv {
	t.Helper()
	e := &brokerEnv{t: t, fns: fns, devices: devs}
	perms := brokerUserPermissions
	users := []natsx.User{{Name: contract.BrokerUser, Password: btBrokerPassword, Permissions: &perms},
		{Name: "observer", Password: "observer-pw"}}
	for _, d := range devs {
		pub, sub := contract.DevicePermissions(d.id, fns)
		users = append(users, natsx.User{Name: d.id, Password: d.pw, Permissions: &natsx.Permissions{PublishAllow: pub, SubscribeAllow: sub}})
	}
	layout := natsx.Layout{Accounts: []natsx.Account{{Name: "PPS", JetStream: true, Users: users}}}
	e.nats = testenv.StartNATS(t, testenv.WithNATSConfig(layout.Render()), testenv.WithMQTT())
	e.redis = testenv.StartRedis(t)
	return e
}

func (e *brokerEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// brokerConn is a connection as the broker's NATS user.
func (e *brokerEnv) brokerConn() (*nats.Conn, jetstream.JetStream) {
	nc := e.nats.Connect(e.t, nats.UserInfo(contract.BrokerUser, btBrokerPassword))
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return nc, js
}

// observer is an unrestricted connection of the test itself (it reads the streams).
func (e *brokerEnv) observer() jetstream.JetStream {
	js, err := jetstream.New(e.nats.Connect(e.t, nats.UserInfo("observer", "observer-pw")))
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

// unreachableGarbler is a client of a garbler that is not there: every call fails with
// Unavailable. Tests of paths that must never reach the garbler use it.
func unreachableGarbler(t testing.TB) ppsv1.GarblerClient {
	cc, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ppsv1.NewGarblerClient(cc)
}

// runningBroker is a broker started by startBroker.
type runningBroker struct {
	*Broker
	reg  *prometheus.Registry
	log  *btLog
	stop func()
}

// startBroker builds a broker on the env with opt's pipelines and garbler, runs it, and
// stops it at cleanup (or with stop).
func (e *brokerEnv) startBroker(opt BrokerOptions, before func(*Broker)) *runningBroker {
	e.t.Helper()
	nc, js := e.brokerConn()
	opt.NC, opt.JS = nc, js
	if opt.Redis == nil {
		rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
		e.t.Cleanup(func() { rdb.Close() })
		opt.Redis = rdb
	}
	reg := prometheus.NewRegistry()
	opt.Registerer = reg
	lg := &btLog{t: e.t}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(lg, nil))
	}
	b, err := NewBroker(opt)
	if err != nil {
		e.t.Fatal(err)
	}
	if before != nil {
		before(b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("broker run: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return &runningBroker{Broker: b, reg: reg, log: lg, stop: stop}
}

// btLog sends a broker's log to the test log, and keeps it for the scrubbing checks.
type btLog struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (l *btLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	return len(p), nil
}

func (l *btLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mqttClient connects device d over MQTT 3.1.1.
func (e *brokerEnv) mqttClient(d *btDevice) mqtt.Client {
	e.t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + e.nats.MQTTAddr()).SetClientID("dev-" + d.id[:20]).
		SetUsername(d.id).SetPassword(d.pw).SetCleanSession(true).SetAutoReconnect(false).
		SetProtocolVersion(4).SetConnectTimeout(30 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		e.t.Fatalf("MQTT connect as %s: %v", d.id[:8], tok.Error())
	}
	e.t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// downs subscribes device d to its down topic and returns its messages.
func (e *brokerEnv) downs(c mqtt.Client, d *btDevice) <-chan []byte {
	e.t.Helper()
	ch := make(chan []byte, 64)
	tok := c.Subscribe(contract.Topic(contract.DevDownSubject(d.id)), 1, func(_ mqtt.Client, m mqtt.Message) {
		ch <- append([]byte(nil), m.Payload()...)
	})
	if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		e.t.Fatalf("subscribe to the down topic: %v", tok.Error())
	}
	return ch
}

// mqttPublish publishes with QoS 1 and waits for the PUBACK.
func mqttPublish(t testing.TB, c mqtt.Client, topic string, payload []byte) {
	t.Helper()
	tok := c.Publish(topic, 1, false, payload)
	if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
		t.Fatalf("MQTT publish on %s: %v", topic, tok.Error())
	}
}

// nextDown waits for the next message on a down topic.
func nextDown(t testing.TB, ch <-chan []byte) *contract.Down {
	t.Helper()
	select {
	case b := <-ch:
		d, err := contract.DecodeDown(b)
		if err != nil {
			t.Fatalf("down message %s: %v", b, err)
		}
		return d
	case <-time.After(2 * time.Minute):
		t.Fatal("no message on the down topic")
	}
	return nil
}

// btHello is a signed setup message of device d: a publisher hello with policy fns, or
// (fn != "") a subscription to fn.
func btHello(d *btDevice, fn string, fns []string) (*contract.Hello, []byte) {
	h := &contract.Hello{V: contract.Version, EdPK: d.key.Public().(ed25519.PublicKey), XEphPK: make([]byte, 32), Nonce: make([]byte, 32)}
	rand.Read(h.XEphPK)
	rand.Read(h.Nonce)
	if fn != "" {
		h.Type, h.Fn = contract.TypeSub, fn
	} else {
		h.Type, h.Role, h.Policy = contract.TypeHello, contract.RolePublisher, &contract.Policy{Fns: fns}
	}
	h.Sign(d.key)
	b, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	return h, b
}

// btPipeline is a pipeline over the given devices, one topic each ("t/<i>"), computing op
// over their latest values.
func btPipeline(name, op string, devs []*btDevice, subs []*btDevice, minInputs int, window, schedule time.Duration) contract.Pipeline {
	var src strings.Builder
	src.WriteString("(begin ")
	if minInputs > 0 {
		fmt.Fprintf(&src, "(min-inputs %d) ", minInputs)
	}
	src.WriteString("(define xs (list")
	p := contract.Pipeline{Name: name, Mode: contract.ModeFaithful, Window: contract.Duration{Duration: window},
		Schedule: contract.Duration{Duration: schedule}}
	for i, d := range devs {
		topic := fmt.Sprintf("%s/t/%d", name, i)
		fmt.Fprintf(&src, " (val %q)", topic)
		p.Publishers = append(p.Publishers, contract.PipelinePublisher{Topic: topic, DeviceID: d.id})
	}
	if !strings.Contains(op, "xs") {
		op += " xs"
	}
	fmt.Fprintf(&src, ")) (start-building) (%s))", op)
	p.Source = src.String()
	for _, s := range subs {
		p.Subscribers = append(p.Subscribers, s.id)
	}
	return p
}

// streamMsgs returns the messages of a stream (all subjects), oldest first.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ms, err := tryStreamMsgs(js, stream)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func tryStreamMsgs(js jetstream.JetStream, stream string) ([]*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		if m, err := s.GetMsg(ctx, seq); err == nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// btPublish is a publish message of round r carrying labels.
func btPublish(r uint64, labels []byte) []byte {
	b, err := json.Marshal(&contract.Publish{V: contract.Version, Round: r, Labels: labels})
	if err != nil {
		panic(err)
	}
	return b
}
