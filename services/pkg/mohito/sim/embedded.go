package sim

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// EmbeddedNATS starts an in-process nats-server with JetStream under dir, the
// trust-domain accounts for len(devices) vendors with a user per device id of
// devices[v] (DeviceIDs) and an MQTT listener, on 127.0.0.1 and random ports only.
func EmbeddedNATS(dir string, devices [][]string, password func(string) string) (*server.Server, error) {
	o := &server.Options{}
	if err := o.ProcessConfigString(contract.AccountsConfig(devices, password)); err != nil {
		return nil, fmt.Errorf("nats accounts: %w", err)
	}
	o.ServerName = "obscura-demo"
	o.Host = "127.0.0.1"
	o.Port = server.RANDOM_PORT
	o.JetStream = true
	o.StoreDir = dir
	o.NoSigs = true
	o.NoLog = true
	o.MQTT.Host = "127.0.0.1"
	o.MQTT.Port = server.RANDOM_PORT
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS not ready in 10s")
	}
	return s, nil
}
