package client

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
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
type MQTTTransport struct{ C mqtt.Client }

// DialMQTT connects a device to addr ("127.0.0.1:port") as user/password. The MQTT client id
// is random per connection (the session is clean, so nothing needs it stable): the broker logs
// client ids, and a device id there would tell who is connected (the cluster e2e's log scan
// found one in nats-server's log after a restart).
func DialMQTT(addr, user, password string) (*MQTTTransport, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("d-" + hex.EncodeToString(id[:])).
		SetUsername(user).SetPassword(password).SetCleanSession(true).
		SetConnectTimeout(5 * time.Second).SetAutoReconnect(false).SetOrderMatters(false)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("mqtt connect %s: %v", addr, tok.Error())
	}
	return &MQTTTransport{C: c}, nil
}

func topic(subject string) string { return strings.ReplaceAll(subject, ".", "/") }

// Subscribe implements Transport (QoS 1).
func (m *MQTTTransport) Subscribe(subject string, h func([]byte)) error {
	tok := m.C.Subscribe(topic(subject), 1, func(_ mqtt.Client, msg mqtt.Message) { h(msg.Payload()) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("mqtt subscribe: %v", tok.Error())
	}
	return nil
}

// Publish implements Transport (QoS 1).
func (m *MQTTTransport) Publish(subject string, b []byte) error {
	tok := m.C.Publish(topic(subject), 1, false, b)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("mqtt publish: %v", tok.Error())
	}
	return nil
}

// Close implements Transport.
func (m *MQTTTransport) Close() { m.C.Disconnect(100) }
