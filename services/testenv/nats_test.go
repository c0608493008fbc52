package testenv

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNATSCoreRequestReply(t *testing.T) {
	t.Parallel()
	n := StartNATS(t)
	if !strings.HasPrefix(n.URL(), "nats://"+Host+":") {
		t.Fatalf("URL() = %q; want nats://%s:<port>", n.URL(), Host)
	}
	responder, requester := n.Connect(t), n.Connect(t)
	if _, err := responder.Subscribe("mohito.round.info", func(m *nats.Msg) {
		_ = m.Respond(append([]byte("round "), m.Data...))
	}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := responder.Flush(); err != nil { // the subscription is known to the server
		t.Fatalf("flush: %v", err)
	}
	resp, err := requester.Request("mohito.round.info", []byte("42"), 5*time.Second)
	if err != nil || string(resp.Data) != "round 42" {
		t.Fatalf("request = %v, %v; want \"round 42\"", resp, err)
	}
}

func TestNATSJetStreamPullConsume(t *testing.T) {
	t.Parallel()
	n := StartNATS(t)
	js := n.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "COMMANDS", Subjects: []string{"commands.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	want := []string{"c0", "c1", "c2"}
	for _, body := range want {
		if _, err := js.Publish(ctx, "commands.round1", []byte(body), jetstream.WithMsgID(body)); err != nil {
			t.Fatalf("publish %s: %v", body, err)
		}
	}
	// Nats-Msg-Id de-duplication is on: a re-sent message is acknowledged, not stored again.
	if ack, err := js.Publish(ctx, "commands.round1", []byte("c0"), jetstream.WithMsgID("c0")); err != nil || !ack.Duplicate {
		t.Fatalf("republish c0 = %+v, %v; want a duplicate ack", ack, err)
	}

	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "decrypt", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	batch, err := cons.Fetch(len(want), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.DoubleAck(ctx); err != nil { // the server confirms the ack
			t.Fatalf("ack %s: %v", m.Data(), err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatalf("fetch batch: %v", err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("consumed %v; want %v", got, want)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != 3 {
		t.Fatalf("consumer after acks: ack pending %d, pending %d, ack floor %d; want 0, 0, 3",
			info.NumAckPending, info.NumPending, info.AckFloor.Stream)
	}
}

func TestNATSKeyValueCompareAndSet(t *testing.T) {
	t.Parallel()
	n := StartNATS(t)
	js := n.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "rounds"})
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	rev, err := kv.Put(ctx, "current", []byte("1"))
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	e, err := kv.Get(ctx, "current")
	if err != nil || string(e.Value()) != "1" || e.Revision() != rev {
		t.Fatalf("get = %v, %v; want value 1 at revision %d", e, err, rev)
	}
	_, err = kv.Update(ctx, "current", []byte("2"), rev+7)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("update at a wrong revision: err = %v; want wrong last sequence", err)
	}
	rev2, err := kv.Update(ctx, "current", []byte("2"), rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("update at revision %d = %d, %v; want a newer revision", rev, rev2, err)
	}
	if _, err := kv.Create(ctx, "current", []byte("3")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("create of an existing key: err = %v; want ErrKeyExists", err)
	}
	if e, err := kv.Get(ctx, "current"); err != nil || string(e.Value()) != "2" {
		t.Fatalf("get after updates = %v, %v; want 2", e, err)
	}
}

func TestNATSMQTTConnect(t *testing.T) {
	t.Parallel()
	n := StartNATS(t, WithMQTT(), WithServerName("mqtt-edge"))
	host, _, err := net.SplitHostPort(n.MQTTAddr())
	if err != nil || host != Host {
		t.Fatalf("MQTTAddr() = %q; want %s:<port>", n.MQTTAddr(), Host)
	}
	conn, err := net.DialTimeout("tcp", n.MQTTAddr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial MQTT: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))

	// MQTT 3.1.1 CONNECT: clean session, keep-alive 60 s, client id "device-1".
	clientID := "device-1"
	variable := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	payload := append([]byte{0, byte(len(clientID))}, clientID...)
	connect := append([]byte{0x10, byte(len(variable) + len(payload))}, variable...)
	connect = append(connect, payload...)
	if _, err := conn.Write(connect); err != nil {
		t.Fatalf("write CONNECT: %v", err)
	}
	connack := make([]byte, 4)
	if _, err := io.ReadFull(conn, connack); err != nil {
		t.Fatalf("read CONNACK: %v", err)
	}
	// CONNACK, remaining length 2, no session present, return code 0 (accepted).
	if want := []byte{0x20, 0x02, 0x00, 0x00}; !bytes.Equal(connack, want) {
		t.Fatalf("CONNACK = % x; want % x", connack, want)
	}
	if got := n.Server.Name(); got != "mqtt-edge" {
		t.Errorf("server name = %q; want mqtt-edge", got)
	}
}

// Two trust domains as two accounts: the vendor exports round announcements, the integrator
// imports them, and nothing else crosses.
const twoDomains = `
accounts {
  VENDOR: {
    jetstream: enabled
    users: [{user: vendor, password: vendor-pw}]
    exports: [{stream: "round.>"}]
  }
  INTEGRATOR: {
    jetstream: enabled
    users: [{user: integrator, password: integrator-pw}]
    imports: [{stream: {account: VENDOR, subject: "round.>"}}]
  }
}
`

func TestNATSAccounts(t *testing.T) {
	t.Parallel()
	n := StartNATS(t, WithNATSConfig(twoDomains))
	vendor := n.Connect(t, nats.UserInfo("vendor", "vendor-pw"))
	integrator := n.Connect(t, nats.UserInfo("integrator", "integrator-pw"))

	sub, err := integrator.SubscribeSync(">")
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := integrator.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	// One publisher, one subscriber: order is kept, so if the private message crossed the
	// account boundary it would arrive before the exported one.
	if err := vendor.Publish("private.keys", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	if err := vendor.Publish("round.9", []byte("announce")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Subject != "round.9" || string(m.Data) != "announce" {
		t.Fatalf("integrator received %v, %v; want the exported round.9 only", m, err)
	}

	if nc, err := nats.Connect(n.URL(), nats.UserInfo("vendor", "wrong")); err == nil {
		nc.Close()
		t.Fatal("connect with a wrong password succeeded")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	js := n.JetStream(t, nats.UserInfo("integrator", "integrator-pw"))
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream in the INTEGRATOR account: %v", err)
	}
}

func TestNATSRefusesOtherAddresses(t *testing.T) {
	t.Parallel()
	// Refused before the server starts: nothing is bound.
	msg := startFailure(t, func(tb testing.TB) {
		StartNATS(tb, WithNATSOptions(func(o *server.Options) { o.HTTPHost, o.HTTPPort = "0.0.0.0", -1 }))
	})
	requireContains(t, msg, "NATS monitoring listener must listen on 127.0.0.1 only", `"0.0.0.0"`)
}
