package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS is an embedded nats-server with JetStream, started by StartNATS.
type NATS struct {
	// Server is the running server, for what the helpers here do not cover (Varz, Accountz…).
	Server *server.Server
	// MQTTPort is the MQTT listener's port on 127.0.0.1, or 0 without WithMQTT.
	MQTTPort int
	// LogPath is the server's log, under the test's temporary directory.
	LogPath string

	stop     func()
	stopOnce sync.Once
	cfg      natsConfig // how it was started, for Reload
	dir      string
	port     int // the client port, kept across Down, Restart and Reload
}

// URL returns the client URL, "nats://127.0.0.1:<port>".
func (n *NATS) URL() string { return n.Server.ClientURL() }

// MQTTAddr returns "127.0.0.1:<port>" of the MQTT listener, or "" without WithMQTT.
func (n *NATS) MQTTAddr() string {
	if n.MQTTPort == 0 {
		return ""
	}
	return net.JoinHostPort(Host, strconv.Itoa(n.MQTTPort))
}

// Connect opens a client connection (pass nats.UserInfo etc. when accounts are configured)
// and closes it at cleanup, before the server shuts down.
func (n *NATS) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.Name(t.Name()), nats.MaxReconnects(0)}, opts...)
	nc, err := nats.Connect(n.URL(), opts...)
	if err != nil {
		t.Fatalf("testenv: connect to NATS %s: %v", n.URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection with Connect and returns its JetStream context.
func (n *NATS) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(n.Connect(t, opts...))
	if err != nil {
		t.Fatalf("testenv: JetStream on %s: %v", n.URL(), err)
	}
	return js
}

// NATSOption configures StartNATS.
type NATSOption func(*natsConfig)

type natsConfig struct {
	conf     string
	mutators []func(*server.Options)
	mqtt     bool
	name     string
}

// WithNATSConfig applies a nats-server configuration text before the harness's own settings,
// typically the accounts block: one account per trust domain with its users, exports and
// imports. An account that uses JetStream needs `jetstream: enabled` in it. Listen
// addresses in conf are overridden: the harness picks 127.0.0.1 and free ports.
func WithNATSConfig(conf string) NATSOption {
	return func(c *natsConfig) { c.conf = conf }
}

// WithNATSOptions edits the server options after the harness's own settings; the last word,
// except that every listener must stay on 127.0.0.1.
func WithNATSOptions(mutate func(*server.Options)) NATSOption {
	return func(c *natsConfig) { c.mutators = append(c.mutators, mutate) }
}

// WithMQTT enables the MQTT listener (on JetStream) on 127.0.0.1 and a free port; see
// NATS.MQTTAddr.
func WithMQTT() NATSOption {
	return func(c *natsConfig) { c.mqtt = true }
}

// WithServerName sets the server name (default "testenv"); MQTT and JetStream use it to name
// their state.
func WithServerName(name string) NATSOption {
	return func(c *natsConfig) { c.name = name }
}

// StartNATS starts an in-process nats-server with JetStream stored under t.TempDir(),
// listening on 127.0.0.1 and a random port, and shuts it down at cleanup.
func StartNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	n, err := StartNATSServer(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// StartNATSServer is StartNATS for callers without a testing.TB (a TestMain that serves a
// whole package): JetStream is stored under dir, and the caller calls Stop.
func StartNATSServer(dir string, opts ...NATSOption) (*NATS, error) {
	var cfg natsConfig
	for _, o := range opts {
		o(&cfg)
	}
	sopts, err := cfg.options(dir)
	if err != nil {
		return nil, fmt.Errorf("testenv: start NATS: %w", err)
	}

	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("testenv: start NATS: %w", err)
	}
	logPath := filepath.Join(dir, "nats.log")
	logger, err := newFileLogger(logPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: start NATS: %w", err)
	}
	s.SetLogger(logger, false, false)
	s.Start()
	n := &NATS{Server: s, LogPath: logPath, cfg: cfg, dir: dir, stop: func() {
		s.Shutdown()
		s.WaitForShutdown()
		logger.close()
	}}
	if !s.ReadyForConnections(10 * time.Second) {
		n.Stop()
		return nil, fmt.Errorf("testenv: embedded NATS (server %q on %s, MQTT %v, store %s) not ready for connections in 10s\n%s",
			sopts.ServerName, Host, sopts.MQTT.Port != 0, sopts.StoreDir, logTail(logPath, 30))
	}
	n.port = s.Addr().(*net.TCPAddr).Port
	if sopts.MQTT.Port != 0 {
		vz, err := s.Varz(nil)
		if err != nil {
			n.Stop()
			return nil, fmt.Errorf("testenv: NATS MQTT port: %w", err)
		}
		n.MQTTPort = vz.MQTT.Port
	}
	return n, nil
}

// Down shuts the server down, keeping its port and store for Restart: an outage of NATS for
// as long as the test wants.
func (n *NATS) Down() {
	n.stop()
	n.stop = func() {}
}

// Restart shuts the server down and starts it again with the same options, ports and store,
// as a nats-server container restarts (the NATS reloader restarts it for a changed account):
// file-stored streams come back, memory-stored ones do not, and clients reconnect.
func (n *NATS) Restart() error {
	o, err := n.cfg.options(n.dir)
	if err != nil {
		return fmt.Errorf("testenv: restart NATS: %w", err)
	}
	o.Port = n.port
	if o.MQTT.Port != 0 {
		o.MQTT.Port = n.MQTTPort
	}
	n.stop() // the old server and its log file
	logger, err := newFileLogger(n.LogPath)
	if err != nil {
		return fmt.Errorf("testenv: restart NATS: %w", err)
	}
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("testenv: restart NATS: %w", err)
	}
	s.SetLogger(logger, false, false)
	s.Start()
	n.Server = s
	n.stop = func() {
		s.Shutdown()
		s.WaitForShutdown()
		logger.close()
	}
	if !s.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("testenv: restarted NATS not ready for connections in 10s\n%s", logTail(n.LogPath, 30))
	}
	return nil
}

// Reload replaces the configuration text given with WithNATSConfig by conf and reloads the
// running server, as nats-server does on SIGHUP after the operator re-renders the accounts
// (the NATS reloader): the same ports, store and other options.
func (n *NATS) Reload(conf string) error {
	cfg := n.cfg
	cfg.conf = conf
	o, err := cfg.options(n.dir)
	if err != nil {
		return fmt.Errorf("testenv: reload NATS: %w", err)
	}
	o.Port = n.port
	if o.MQTT.Port != 0 {
		o.MQTT.Port = n.MQTTPort
	}
	if err := n.Server.ReloadOptions(o); err != nil {
		return fmt.Errorf("testenv: reload NATS: %w", err)
	}
	n.cfg = cfg
	return nil
}

// options are the server options of cfg, JetStream stored under dir, every listener on
// 127.0.0.1 (random ports).
func (cfg *natsConfig) options(dir string) (*server.Options, error) {
	sopts := &server.Options{}
	if cfg.conf != "" {
		if err := sopts.ProcessConfigString(cfg.conf); err != nil {
			return nil, fmt.Errorf("parse config: %w", err)
		}
	}
	if cfg.name != "" {
		sopts.ServerName = cfg.name
	} else if sopts.ServerName == "" {
		sopts.ServerName = "testenv"
	}
	sopts.Host = Host
	sopts.Port = server.RANDOM_PORT
	sopts.JetStream = true
	sopts.StoreDir = filepath.Join(dir, "jetstream")
	sopts.NoSigs = true // the test binary owns its signals
	if cfg.mqtt || sopts.MQTT.Port != 0 {
		sopts.MQTT.Host = Host
		sopts.MQTT.Port = server.RANDOM_PORT
	}
	for _, m := range cfg.mutators {
		m(sopts)
	}
	if err := natsLoopbackOnly(sopts); err != nil {
		return nil, err
	}
	return sopts, nil
}

// Stop shuts the server down and waits for it; calling it again does nothing.
func (n *NATS) Stop() { n.stopOnce.Do(n.stop) }

// natsLoopbackOnly fills empty hosts of enabled listeners with 127.0.0.1 and refuses any
// other address.
func natsLoopbackOnly(o *server.Options) error {
	listeners := []struct {
		name string
		host *string
		on   bool
	}{
		{"client listener", &o.Host, true},
		{"MQTT listener", &o.MQTT.Host, o.MQTT.Port != 0},
		{"websocket listener", &o.Websocket.Host, o.Websocket.Port != 0},
		{"monitoring listener", &o.HTTPHost, o.HTTPPort != 0 || o.HTTPSPort != 0},
		{"cluster listener", &o.Cluster.Host, o.Cluster.Port != 0},
		{"leafnode listener", &o.LeafNode.Host, o.LeafNode.Port != 0},
		{"gateway listener", &o.Gateway.Host, o.Gateway.Port != 0},
	}
	for _, l := range listeners {
		if !l.on {
			continue
		}
		if *l.host == "" {
			*l.host = Host
		}
		if err := checkLoopback("NATS "+l.name, *l.host); err != nil {
			return err
		}
	}
	return nil
}

// fileLogger is a server.Logger writing to a file. Unlike the server's default logger, its
// Fatalf does not exit the test binary.
type fileLogger struct {
	mu sync.Mutex
	f  *os.File
}

func newFileLogger(path string) (*fileLogger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // appended to by a restart
	if err != nil {
		return nil, fmt.Errorf("create NATS log: %w", err)
	}
	return &fileLogger{f: f}, nil
}

func (l *fileLogger) logf(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		fmt.Fprintf(l.f, "%s [%s] %s\n", time.Now().Format("15:04:05.000"), level, fmt.Sprintf(format, v...))
	}
}

func (l *fileLogger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
	l.f = nil
}

func (l *fileLogger) Noticef(format string, v ...any) { l.logf("INF", format, v...) }
func (l *fileLogger) Warnf(format string, v ...any)   { l.logf("WRN", format, v...) }
func (l *fileLogger) Fatalf(format string, v ...any)  { l.logf("FTL", format, v...) }
func (l *fileLogger) Errorf(format string, v ...any)  { l.logf("ERR", format, v...) }
func (l *fileLogger) Debugf(format string, v ...any)  { l.logf("DBG", format, v...) }
func (l *fileLogger) Tracef(format string, v ...any)  { l.logf("TRC", format, v...) }
