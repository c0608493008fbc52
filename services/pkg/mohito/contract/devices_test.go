package contract_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// fileNATS is a nats-server (with JetStream and MQTT on 127.0.0.1) running on a configuration
// file, so that rewriting the file and reloading it changes its accounts as the operator's
// reloader does in a cluster.
type fileNATS struct {
	s          *server.Server
	conf, head string
	mqtt       int
}

func startFileNATS(t *testing.T, accounts string) *fileNATS {
	t.Helper()
	dir := t.TempDir()
	ports := make([]int, 2)
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	n := &fileNATS{conf: filepath.Join(dir, "nats.conf"), mqtt: ports[1],
		head: fmt.Sprintf("server_name: devices\nlisten: \"%s:%d\"\njetstream {store_dir: %q}\nmqtt {listen: \"%s:%d\"}\n",
			testenv.Host, ports[0], filepath.Join(dir, "js"), testenv.Host, ports[1])}
	n.write(t, accounts)
	o, err := server.ProcessConfigFile(n.conf)
	if err != nil {
		t.Fatal(err)
	}
	o.NoSigs, o.NoLog = true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready in 10s")
	}
	n.s = s
	return n
}

func (n *fileNATS) write(t *testing.T, accounts string) {
	t.Helper()
	if err := os.WriteFile(n.conf, []byte(n.head+accounts), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload rewrites the accounts and reloads the server, as the NATS reloader's SIGHUP does.
func (n *fileNATS) reload(t *testing.T, accounts string) {
	t.Helper()
	n.write(t, accounts)
	if err := n.s.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

func (n *fileNATS) mqttAddr() string { return fmt.Sprintf("%s:%d", testenv.Host, n.mqtt) }

func (n *fileNATS) connect(user string) (*nats.Conn, error) {
	return nats.Connect(n.s.ClientURL(), nats.UserInfo(user, pw(user)), nats.MaxReconnects(0), nats.Timeout(2*time.Second))
}

// TestDeviceCredentialConfinedToOwnTopics: every device of a vendor logs in with its own
// credential and reaches only its own two subjects. Over NATS and over MQTT, device a may not
// subscribe to its sibling b's command subject (it would see when b is addressed) nor publish
// on b's response subject (it would flood or answer in b's name); the vendor's subscription
// to every device response sees only what a sent on its own subject. With one login shared by
// the vendor's devices and wildcard permissions (before issue 15 #2) both succeed.
func TestDeviceCredentialConfinedToOwnTopics(t *testing.T) {
	n := startFileNATS(t, contract.AccountsConfig([][]string{{"a", "b"}, {"c"}}, pw))
	vendor, err := n.connect(contract.VendorUser(0))
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	spy, err := vendor.SubscribeSync(contract.DeviceResponses)
	if err != nil {
		t.Fatal(err)
	}
	vendor.Flush()
	// seen returns the response subjects the vendor received up to a's marker.
	seen := func(marker string) []string {
		t.Helper()
		var got []string
		for {
			m, err := spy.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("vendor waiting for %q: %v (saw %v)", marker, err, got)
			}
			got = append(got, m.Subject)
			if string(m.Data) == marker {
				return got
			}
		}
	}

	t.Run("NATS", func(t *testing.T) {
		violations := make(chan error, 8)
		a, err := nats.Connect(n.s.ClientURL(), nats.UserInfo(contract.DeviceUser(0, "a"), pw(contract.DeviceUser(0, "a"))),
			nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		violation := func(what string) {
			t.Helper()
			select {
			case err := <-violations:
				if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Fatalf("%s: %v, want a permissions violation", what, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s was allowed", what)
			}
		}
		own, err := a.SubscribeSync(contract.DeviceCommandSubject("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.SubscribeSync(contract.DeviceCommandSubject("b")); err != nil {
			t.Fatal(err)
		}
		a.Flush()
		violation("device a subscribing to device b's commands")
		if _, err := a.SubscribeSync("mohito.dev.*.cmd"); err != nil {
			t.Fatal(err)
		}
		a.Flush()
		violation("device a subscribing to every device's commands")
		_ = a.Publish(contract.DeviceResponseSubject("b"), []byte("forged"))
		a.Flush()
		violation("device a publishing on device b's response subject")
		_ = a.Publish(contract.DeviceResponseSubject("a"), []byte("nats-marker"))
		if got := seen("nats-marker"); len(got) != 1 || got[0] != contract.DeviceResponseSubject("a") {
			t.Fatalf("the vendor received %v, want only device a's own response", got)
		}
		// Its own command reaches it; b's does not (its subscription was refused).
		vendor.Publish(contract.DeviceCommandSubject("b"), []byte("for-b"))
		vendor.Publish(contract.DeviceCommandSubject("a"), []byte("for-a"))
		m, err := own.NextMsg(10 * time.Second)
		if err != nil || string(m.Data) != "for-a" {
			t.Fatalf("device a's own command: %v %v", m, err)
		}
		// Another vendor's device never reaches vendor 0's devices.
		c, err := n.connect(contract.DeviceUser(1, "c"))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if _, err := n.connect(contract.DeviceUser(1, "a")); err == nil {
			t.Fatal("device a of vendor 0 logged in as a device of vendor 1")
		}
	})

	t.Run("MQTT", func(t *testing.T) {
		a, err := client.DialMQTT(n.mqttAddr(), contract.DeviceUser(0, "a"), pw(contract.DeviceUser(0, "a")))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		topic := func(subject string) string { return strings.ReplaceAll(subject, ".", "/") }
		granted := func(filter string) byte {
			t.Helper()
			tok := a.C.Subscribe(filter, 1, func(mqtt.Client, mqtt.Message) {})
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe %s: %v", filter, tok.Error())
			}
			return tok.(*mqtt.SubscribeToken).Result()[filter]
		}
		if q := granted(topic(contract.DeviceCommandSubject("a"))); q != 1 {
			t.Fatalf("device a's own command topic: granted %#x, want QoS 1", q)
		}
		for _, f := range []string{topic(contract.DeviceCommandSubject("b")), "mohito/dev/+/cmd", "mohito/#"} {
			if q := granted(f); q != 0x80 {
				t.Fatalf("device a subscribing to %s: granted %#x, want 0x80 (refused)", f, q)
			}
		}
		for _, s := range []string{contract.DeviceResponseSubject("b"), contract.DeviceResponseSubject("a")} {
			body := "forged"
			if s == contract.DeviceResponseSubject("a") {
				body = "mqtt-marker"
			}
			tok := a.C.Publish(topic(s), 1, false, body)
			tok.WaitTimeout(10 * time.Second)
		}
		if got := seen("mqtt-marker"); len(got) != 1 || got[0] != contract.DeviceResponseSubject("a") {
			t.Fatalf("the vendor received %v, want only device a's own response", got)
		}
	})
}

// TestRevokedDeviceCannotConnect: revoking a device removes its user from the rendered
// accounts; once the server reloads, the revoked device's open connection is closed and it can
// log in neither over NATS nor over MQTT, while its siblings keep theirs.
func TestRevokedDeviceCannotConnect(t *testing.T) {
	n := startFileNATS(t, contract.AccountsConfig([][]string{{"a", "b"}}, pw))
	b, err := n.connect(contract.DeviceUser(0, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := client.DialMQTT(n.mqttAddr(), contract.DeviceUser(0, "b"), pw(contract.DeviceUser(0, "b")))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()

	n.reload(t, contract.AccountsConfig([][]string{{"a"}}, pw))
	testenv.Eventually(t, 10*time.Second, "the revoked device's connection is closed", func() error {
		if !b.IsClosed() {
			return errors.New("still open")
		}
		return nil
	})
	if c, err := n.connect(contract.DeviceUser(0, "b")); err == nil {
		c.Close()
		t.Fatal("the revoked device logged in over NATS")
	}
	if m, err := client.DialMQTT(n.mqttAddr(), contract.DeviceUser(0, "b"), pw(contract.DeviceUser(0, "b"))); err == nil {
		m.Close()
		t.Fatal("the revoked device logged in over MQTT")
	}
	a, err := n.connect(contract.DeviceUser(0, "a"))
	if err != nil {
		t.Fatalf("its sibling lost its login: %v", err)
	}
	a.Close()
}
