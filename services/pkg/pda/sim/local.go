package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
)

// Local runs PDA roles in one process (the demo and the integration tests), each under
// its own context so a test can kill one role mid-window and start it again. Every role
// talks to the others only through NATS and its own store, exactly as in a cluster.
type Local struct {
	Job     *roles.Job
	Proxy   *roles.ProxySecrets
	DB      *roles.DBSecrets
	ProxyJS jetstream.JetStream // PDA_PROXY account
	DBJS    jetstream.JetStream // PDA_DB account
	Log     *slog.Logger
	M       *roles.Metrics

	mu      sync.Mutex
	running map[string]*role
}

type role struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs fn as role name until Stop.
func (l *Local) Start(name string, fn func(ctx context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[string]*role{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &role{cancel: cancel, done: make(chan error, 1)}
	l.running[name] = r
	go func() { r.done <- fn(ctx) }()
}

// Stop cancels role name and waits for it.
func (l *Local) Stop(name string) error {
	l.mu.Lock()
	r := l.running[name]
	delete(l.running, name)
	l.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel()
	return <-r.done
}

// StopAll stops every role.
func (l *Local) StopAll() {
	l.mu.Lock()
	names := make([]string, 0, len(l.running))
	for n := range l.running {
		names = append(names, n)
	}
	l.mu.Unlock()
	for _, n := range names {
		_ = l.Stop(n)
	}
}

// StartIngress listens on 127.0.0.1 (a free port) and returns the base URL.
func (l *Local) StartIngress(ctx context.Context, name string, cfg roles.IngressConfig, store roles.ProxyStore, tlsCfg *tls.Config) (string, error) {
	g, err := roles.NewIngress(ctx, cfg, l.Job, l.Proxy, l.ProxyJS, store, l.Log.With("role", name), l.M)
	if err != nil {
		return "", err
	}
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("ingress listen: %w", err)
	}
	l.Start(name, func(ctx context.Context) error { return g.Serve(ctx, ln, tlsCfg) })
	return "https://" + ln.Addr().String(), nil
}

// StartMixer starts a mixer's seal loop and returns the mixer (for manual seals).
func (l *Local) StartMixer(ctx context.Context, name string, cfg roles.MixerConfig) (*roles.Mixer, error) {
	x, err := roles.NewMixer(ctx, cfg, l.Job, l.Proxy, l.ProxyJS, l.Log.With("role", name), l.M)
	if err != nil {
		return nil, err
	}
	l.Start(name, x.Run)
	return x, nil
}

// StartOracle starts the decryption oracle.
func (l *Local) StartOracle(name string) {
	o := roles.NewOracle(l.Job, l.Proxy, l.ProxyJS, l.Log.With("role", name), l.M)
	l.Start(name, o.Run)
}

// StartFrontend starts a DB front-end.
func (l *Local) StartFrontend(ctx context.Context, name string, cfg roles.FrontendConfig) error {
	f, err := roles.NewFrontend(ctx, cfg, l.Job, l.DB, l.DBJS, l.Log.With("role", name), l.M)
	if err != nil {
		return err
	}
	l.Start(name, f.Run)
	return nil
}

// StartShard starts shard id on its store.
func (l *Local) StartShard(ctx context.Context, id string, cfg roles.ShardConfig, store roles.ShardStore) error {
	cfg.ID = id
	s, err := roles.NewShard(ctx, cfg, l.Job, l.DBJS, store, l.Log.With("role", "db-shard"), l.M)
	if err != nil {
		return err
	}
	l.Start("shard-"+id, s.Run)
	return nil
}
