package client

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// ErrConfig is wrapped by every error of a device configuration (a missing key, an
// unreadable password file, a bad address).
var ErrConfig = errors.New("pps client: invalid configuration")

// ErrClosed: the client was closed or its MQTT connection was lost.
var ErrClosed = errors.New("pps client: connection closed")

// Device is what a device is provisioned with: its Ed25519 identity and the garbler's pinned
// public key (D20). Without the pinned key a broker could answer the setup with its own key
// exchange and read every label the device derives.
type Device struct {
	Key     ed25519.PrivateKey
	Garbler ed25519.PublicKey
}

// ID is the device id: lowercase hex of its Ed25519 public key (contract.DeviceID).
func (d *Device) ID() string { return contract.DeviceID(d.Key.Public().(ed25519.PublicKey)) }

func (d *Device) validate() error {
	if len(d.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("device key of %d bytes, want an Ed25519 private key: %w", len(d.Key), ErrConfig)
	}
	if len(d.Garbler) != ed25519.PublicKeySize {
		return fmt.Errorf("pinned garbler key of %d bytes, want an Ed25519 public key: %w", len(d.Garbler), ErrConfig)
	}
	return nil
}

// Options say how a device reaches the MQTT listener.
type Options struct {
	// Addr is the MQTT listener, host:port.
	Addr string
	// TLS, when set, connects with TLS (ssl://); nil connects in the clear, which only a
	// loopback or an already encrypted link should use.
	TLS *tls.Config
	// Username is the device's MQTT user; empty means the device id (the per-device NATS
	// user whose permissions are contract.DevicePermissions). It is not a secret.
	Username string
	// PasswordFile holds the password (trailing newlines ignored). Secrets come from files,
	// never from flags or the environment; empty means no password.
	PasswordFile string
	// ConnectTimeout bounds the MQTT connect; zero means 10 s.
	ConnectTimeout time.Duration
}

func (o *Options) validate() error {
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("mqtt address %q: %v: %w", o.Addr, err, ErrConfig)
	}
	if o.ConnectTimeout < 0 {
		return fmt.Errorf("connect timeout %s: %w", o.ConnectTimeout, ErrConfig)
	}
	return nil
}

func (o *Options) password() (string, error) {
	if o.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("password file: %v: %w", err, ErrConfig)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// ClientID is the MQTT client id of a device in a role ("pub" or "sub"): derived from the
// device id, so a second connection of the same device in the same role replaces the first
// (one session per device, as the broker's replay check expects). It is a hash rather than
// the id itself, so the broker's connection logs do not carry device keys.
func ClientID(deviceID, role string) string {
	h := sha256.Sum256([]byte("pps/v1/mqtt-client-id\x00" + role + "\x00" + deviceID))
	return "pps-" + role + "-" + hex.EncodeToString(h[:8])
}

// conn is one device's MQTT connection. Messages are handed to the handlers in arrival order
// (paho's OrderMatters), so the handlers never block: they queue and return.
type conn struct {
	c    mqtt.Client
	lost chan struct{}
}

func dial(ctx context.Context, d *Device, role string, o Options) (*conn, error) {
	if err := d.validate(); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	pw, err := o.password()
	if err != nil {
		return nil, err
	}
	user := o.Username
	if user == "" {
		user = d.ID()
	}
	timeout := o.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	scheme := "tcp://"
	if o.TLS != nil {
		scheme = "ssl://"
	}
	cn := &conn{lost: make(chan struct{})}
	opts := mqtt.NewClientOptions().AddBroker(scheme + o.Addr).SetClientID(ClientID(d.ID(), role)).
		SetUsername(user).SetPassword(pw).SetCleanSession(true).SetProtocolVersion(4).
		SetConnectTimeout(timeout).SetAutoReconnect(false).SetOrderMatters(true).
		SetConnectionLostHandler(func(mqtt.Client, error) { close(cn.lost) })
	if o.TLS != nil {
		opts.SetTLSConfig(o.TLS)
	}
	cn.c = mqtt.NewClient(opts)
	if err := wait(ctx, cn.c.Connect(), timeout); err != nil {
		return nil, fmt.Errorf("mqtt connect %s as %s: %w", o.Addr, ClientID(d.ID(), role), err)
	}
	return cn, nil
}

// wait waits for an MQTT token, the context or the timeout.
func wait(ctx context.Context, tok mqtt.Token, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no answer from the MQTT listener in %s", timeout)
	}
}

const opTimeout = 30 * time.Second

// publish sends b on topic with QoS 1 (the listener acknowledges once JetStream holds it
// when a stream captures the subject). A topic outside the reserved namespace's rules — a
// '.' in a level, a wildcard — is refused before anything is sent (spec §10 #15).
func (cn *conn) publish(ctx context.Context, topic string, b []byte) error {
	if _, err := contract.Subject(topic); err != nil {
		return err
	}
	return wait(ctx, cn.c.Publish(topic, 1, false, b), opTimeout)
}

func (cn *conn) subscribe(ctx context.Context, topic string, h func([]byte)) error {
	if _, err := contract.Subject(topic); err != nil {
		return err
	}
	return wait(ctx, cn.c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) { h(m.Payload()) }), opTimeout)
}

func (cn *conn) close() { cn.c.Disconnect(250) }
