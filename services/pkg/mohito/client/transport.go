package client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
)

// NATSTransport speaks core NATS on a device user's connection.
type NATSTransport struct{ NC *nats.Conn }

// Subscribe implements Transport.
func (n NATSTransport) Subscribe(topic string, h func([]byte)) error {
	sub, err := n.NC.Subscribe(topic, func(m *nats.Msg) { h(m.Data) })
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	return n.NC.Flush()
}

// Publish implements Transport.
func (n NATSTransport) Publish(topic string, b []byte) error { return n.NC.Publish(topic, b) }

// Close implements Transport.
func (n NATSTransport) Close() { n.NC.Close() }

// MQTTTransport speaks MQTT 3.1.1 to NATS's MQTT listener on the vendor's
// account; NATS subjects a.b.c are MQTT topics a/b/c.
//
// It keeps its device reachable as long as it is open: a connection lost (its NATS node
// restarted, killed or drained) is re-established with backoff, and every subscription is
// taken again on the new connection — the session is clean, so the broker forgets them with
// the connection. A subscription counts only once the broker granted it in its SUBACK: NATS
// refuses one with return code 0x80 (e.g. when it cannot write the session to JetStream in
// time), which the MQTT client reports as success.
type MQTTTransport struct {
	// C is the MQTT client (it reconnects by itself; see the type's comment).
	C mqtt.Client

	mu   sync.Mutex
	subs map[string]mqtt.MessageHandler // topic → handler, taken again on every reconnect
	// reconnects counts the connections re-established after a loss with every subscription
	// granted again.
	reconnects int
	connects   int // connections made, the first included
	closed     bool
}

// MQTT reconnection backoff of a device: a NATS node restarting refuses connections for a few
// seconds; a device keeps trying every few seconds at most.
const (
	mqttMaxReconnectInterval = 4 * time.Second
	mqttResubscribeWait      = 500 * time.Millisecond
)

// DialMQTT connects a device to addr ("127.0.0.1:port") as user/password. The MQTT client id
// is random per connection (the session is clean, so nothing needs it stable): the broker logs
// client ids, and a device id there would tell who is connected (the cluster e2e's log scan
// found one in nats-server's log after a restart). The connection reconnects by itself until
// Close (see MQTTTransport).
func DialMQTT(addr, user, password string) (*MQTTTransport, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	m := &MQTTTransport{subs: map[string]mqtt.MessageHandler{}}
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("d-" + hex.EncodeToString(id[:])).
		SetUsername(user).SetPassword(password).SetCleanSession(true).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(false).
		SetAutoReconnect(true).SetMaxReconnectInterval(mqttMaxReconnectInterval).
		SetOnConnectHandler(m.resubscribe)
	c := mqtt.NewClient(o)
	m.C = c
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("mqtt connect %s: %v", addr, tok.Error())
	}
	return m, nil
}

func topic(subject string) string { return strings.ReplaceAll(subject, ".", "/") }

// Subscribe implements Transport. The subscription is QoS 0: commands are published by the
// vendor's agent over core NATS, which NATS delivers at QoS 0 whatever the subscription asks
// (only MQTT publishers' QoS 1 messages go through JetStream), and a QoS 1 subscription costs a
// JetStream durable consumer per device — created within 5 s or refused, which under load left
// devices deaf (issue 14). It returns an error unless the broker granted the subscription.
func (m *MQTTTransport) Subscribe(subject string, h func([]byte)) error {
	t := topic(subject)
	cb := func(_ mqtt.Client, msg mqtt.Message) { h(msg.Payload()) }
	m.mu.Lock()
	m.subs[t] = cb
	m.mu.Unlock()
	return subscribe(m.C, t, cb)
}

// subscribe takes one subscription on c and checks the broker granted it.
func subscribe(c mqtt.Client, t string, cb mqtt.MessageHandler) error {
	tok := c.Subscribe(t, 0, cb)
	if !tok.WaitTimeout(10 * time.Second) {
		return fmt.Errorf("mqtt subscribe %s: no SUBACK within 10s", t)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("mqtt subscribe %s: %w", t, err)
	}
	st, ok := tok.(*mqtt.SubscribeToken)
	if !ok {
		return nil
	}
	if code, ok := st.Result()[t]; !ok || code == mqttSubAckFailure {
		return fmt.Errorf("mqtt subscribe %s: %w", t, ErrSubscriptionRefused)
	}
	return nil
}

// mqttSubAckFailure is the SUBACK return code of a refused subscription (MQTT 3.1.1 §3.9.3).
const mqttSubAckFailure = 0x80

// ErrSubscriptionRefused means the broker answered a subscription with the failure code.
var ErrSubscriptionRefused = errors.New("subscription refused by the broker")

// resubscribe runs on every connection (paho's OnConnect, in its own goroutine): on a
// reconnection it takes every subscription again, retrying a refused one while the connection
// lasts (a lost connection runs it again).
func (m *MQTTTransport) resubscribe(c mqtt.Client) {
	m.mu.Lock()
	m.connects++
	first := m.connects == 1
	subs := maps.Clone(m.subs)
	m.mu.Unlock()
	if first {
		return // the first connection: Subscribe takes them (this may run after it did)
	}
	for t, cb := range subs {
		for subscribe(c, t, cb) != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed || !c.IsConnectionOpen() {
				return
			}
			time.Sleep(mqttResubscribeWait)
		}
	}
	m.mu.Lock()
	m.reconnects++
	m.mu.Unlock()
}

// Reconnects returns how many times the connection was re-established after a loss with
// every subscription granted again.
func (m *MQTTTransport) Reconnects() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reconnects
}

// Publish implements Transport (QoS 1).
func (m *MQTTTransport) Publish(subject string, b []byte) error {
	tok := m.C.Publish(topic(subject), 1, false, b)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("mqtt publish: %v", tok.Error())
	}
	return nil
}

// Close implements Transport: it disconnects and stops reconnecting.
func (m *MQTTTransport) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.C.Disconnect(100)
}
