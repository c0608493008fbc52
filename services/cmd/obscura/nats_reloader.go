package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// NATSReloaderConfig is the configuration of `mohito nats-reloader`, the nats-server sidecar
// that makes the server reload its configuration when a mounted file changes. The kubelet
// updates a Secret volume by swapping a symlink, so the reloader polls the content's hash
// rather than watching inotify events on a path that is replaced under it.
type NATSReloaderConfig struct {
	Watch    string
	PIDFile  string
	Interval time.Duration
	Addr     string
	LogLevel string

	// In a JetStream cluster the restarts take turns (restartTurn): Peers are every node's
	// monitoring URL by ordinal, Ordinal is this node's, Slot the length of one node's turn and
	// MaxWait how long a restart waits for unhealthy peers before it goes ahead anyway.
	Peers   []string
	Ordinal int
	Slot    time.Duration
	MaxWait time.Duration
}

func parseNATSReloader(args []string) (*NATSReloaderConfig, error) {
	f := daemon.NewFlags("nats-reloader")
	var c NATSReloaderConfig
	f.String(&c.Watch, "watch", "", "configuration file to watch (the rendered accounts, accounts.conf)", "OBSCURA_NATS_RELOADER_WATCH")
	f.String(&c.PIDFile, "pid-file", "", "nats-server's pid file (nats-server --pid); the pid gets SIGHUP", "OBSCURA_NATS_RELOADER_PID_FILE")
	f.Duration(&c.Interval, "interval", 2*time.Second, "how often to hash the file", "OBSCURA_NATS_RELOADER_INTERVAL")
	f.String(&c.Addr, "metrics-addr", ":9090", "/metrics, /healthz and /readyz listen address (empty: off)")
	f.String(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	var peers string
	f.String(&peers, "peers", "", "in a NATS cluster: every node's monitoring URL (http://host:port), comma-separated in ordinal order; restarts then take turns", "OBSCURA_NATS_RELOADER_PEERS")
	f.Int(&c.Ordinal, "ordinal", -1, "this node's ordinal in --peers (the StatefulSet pod index)", "OBSCURA_NATS_RELOADER_ORDINAL")
	f.Duration(&c.Slot, "slot", 10*time.Second, "with --peers: the length of each node's restart turn (node k restarts only in turn k of every len(peers) turns)", "OBSCURA_NATS_RELOADER_SLOT")
	f.Duration(&c.MaxWait, "max-wait", 5*time.Minute, "with --peers: how long a restart waits for every peer to be healthy before it goes ahead anyway", "OBSCURA_NATS_RELOADER_MAX_WAIT")
	if err := daemon.ParseFlags(f, args); err != nil {
		return nil, err
	}
	var errs []error
	if peers != "" {
		c.Peers = strings.Split(peers, ",")
		for _, p := range c.Peers {
			if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("--peers: %q is not an http(s)://host:port monitoring URL", p))
			}
		}
		if c.Ordinal < 0 || c.Ordinal >= len(c.Peers) {
			errs = append(errs, fmt.Errorf("--ordinal %d must name one of the %d --peers (0 to %d)", c.Ordinal, len(c.Peers), len(c.Peers)-1))
		}
		if c.Slot < time.Second || c.Slot > 10*time.Minute {
			errs = append(errs, fmt.Errorf("--slot %s must be between 1s and 10m", c.Slot))
		}
		if c.MaxWait < time.Duration(len(c.Peers))*c.Slot {
			errs = append(errs, fmt.Errorf("--max-wait %s must be at least one round of turns (%d × --slot %s)", c.MaxWait, len(c.Peers), c.Slot))
		}
		if c.Interval > c.Slot/4 {
			errs = append(errs, fmt.Errorf("--interval %s must be at most a quarter of --slot %s, or a turn can pass unseen", c.Interval, c.Slot))
		}
	}
	if c.Watch == "" {
		errs = append(errs, errors.New("--watch is required"))
	}
	if c.PIDFile == "" {
		errs = append(errs, errors.New("--pid-file is required"))
	}
	if c.Interval < 10*time.Millisecond || c.Interval > time.Hour {
		errs = append(errs, fmt.Errorf("--interval %s must be between 10ms and 1h", c.Interval))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q must be debug, info, warn or error", c.LogLevel))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errConfig, errors.Join(errs...))
	}
	return &c, nil
}

func runNATSReloader(args []string) error {
	c, err := parseNATSReloader(args)
	if err != nil {
		return err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	log := telemetry.NewLogger(os.Stderr, "nats-reloader", c.LogLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	health.SetReady(false, "configuration not read yet")
	if err := health.Register(reg); err != nil {
		return err
	}
	g, gctx := telemetry.NewGroup(ctx)
	g.Go("observability", func(ctx context.Context) error { return telemetry.Serve(ctx, c.Addr, reg, health, log) })
	g.Go("reloader", func(ctx context.Context) error { return newNATSReloader(c, log, reg, health).run(ctx) })
	<-gctx.Done()
	log.Info("shutting down")
	return g.Wait()
}

// natsReloader signals nats-server each time the watched file's content changes.
type natsReloader struct {
	cfg    *NATSReloaderConfig
	log    *slog.Logger
	health *telemetry.Health
	// applied is the hash the server was last signalled for ("" before the first signal);
	// appliedShape is the hash of its accounts without their user lines, appliedAccounts the
	// accounts' names (nil when the file could not be parsed).
	applied, appliedShape string
	appliedAccounts       map[string]bool

	signals    *prometheus.CounterVec // by signal: hup (reload), term (restart)
	failures   prometheus.Counter
	lastSignal prometheus.Gauge
	pending    prometheus.Gauge

	// A restart waiting for its turn: the hash it is for and since when it waits.
	pendingHash  string
	pendingSince time.Time
	now          func() time.Time
	http         *http.Client
}

func newNATSReloader(c *NATSReloaderConfig, log *slog.Logger, reg prometheus.Registerer, h *telemetry.Health) *natsReloader {
	r := &natsReloader{cfg: c, log: log, health: h,
		signals:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obscura_nats_reloader_signals_total", Help: "Signals sent to nats-server after a configuration change (hup: reload users; term: restart on new accounts, imports or exports)."}, []string{"signal"}),
		failures:   prometheus.NewCounter(prometheus.CounterOpts{Name: "obscura_nats_reloader_failures_total", Help: "Changes not signalled yet: file or pid unreadable, process gone (retried every interval)."}),
		lastSignal: prometheus.NewGauge(prometheus.GaugeOpts{Name: "obscura_nats_reloader_last_signal_timestamp_seconds", Help: "When nats-server was last signalled."}),
		pending:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "obscura_nats_reloader_restart_pending", Help: "1 while a restart for changed accounts waits for this node's turn and healthy peers (a NATS cluster), else 0."}),
		now:        time.Now,
		http:       &http.Client{Timeout: 2 * time.Second},
	}
	reg.MustRegister(r.signals, r.failures, r.lastSignal, r.pending)
	return r
}

// run polls until ctx ends. The first hash it sees is signalled too: a change made between
// the server's start and the reloader's would otherwise never be loaded, and a reload of an
// unchanged configuration is a no-op for nats-server.
func (r *natsReloader) run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.check(); err != nil {
			r.failures.Inc()
			r.health.SetReady(false, err.Error())
			r.log.Warn("configuration not reloaded yet", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check hashes the file and signals the server when the hash differs from the one applied.
func (r *natsReloader) check() error {
	data, err := os.ReadFile(r.cfg.Watch)
	if err != nil {
		return fmt.Errorf("read watched file: %w", err)
	}
	hash := contentHash(data)
	if hash == r.applied {
		r.health.SetReady(true, "")
		return nil
	}
	pid, err := readPID(r.cfg.PIDFile)
	if err != nil {
		return err
	}
	// nats-server reloads users on SIGHUP, but a reload does not rewire the service imports
	// and exports of accounts that already exist (observed with 2.15.2: a vendor added later
	// timed out publishing into the integrator's imported inbox until the server restarted).
	// So a change of the accounts' shape — an account, an import or an export — restarts the
	// server (SIGTERM: it closes its clients, which reconnect; the container restarts with its
	// JetStream store intact); a change of users only is a reload.
	shape := contentHash(accountShape(data))
	accounts := accountNames(data)
	sig, what, label := syscall.SIGHUP, "reload", "hup"
	if r.appliedShape != "" && shape != r.appliedShape {
		sig, what, label = syscall.SIGTERM, "restart", "term"
		if !r.restartTurn(hash, r.incoming(accounts)) {
			return nil
		}
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal nats-server (pid %d): %w", pid, err)
	}
	r.log.Info("configuration changed: nats-server signalled to "+what, "hash", hash, "previous", r.applied, "pid", pid)
	r.applied, r.appliedShape, r.appliedAccounts = hash, shape, accounts
	r.pendingHash = ""
	r.pending.Set(0)
	r.signals.WithLabelValues(label).Inc()
	r.lastSignal.SetToCurrentTime()
	r.health.SetReady(true, "")
	return nil
}

// restartTurn reports whether a restart for hash may happen now. A single server restarts at
// once. In a JetStream cluster every node sees the accounts change within the same kubelet
// sync, and restarting them together loses the quorum and every memory stream (observed in the
// cluster e2e: all three nodes restarted within 2 s, the round-info bucket vanished and the
// gateways' watches never resumed). So the nodes take turns: time is cut into slots of
// cfg.Slot, node k restarts only in the first half of slots ≡ k (mod nodes) — two nodes never
// share a slot, whatever the skew between their syncs — and only when every other node holds
// its stream and consumer replicas current (peerHealthy: the node restarted in the previous
// turn is back and has caught up). After cfg.MaxWait of unhealthy peers it restarts anyway in
// its turn: accounts that are never loaded are worse than one more node down.
//
// incoming are the accounts the restart brings in (in the new file, not in the server's):
// a peer's stream and consumer replicas in them do not count (replicasCurrent). A peer that
// loaded such an account before this node runs its replicas of the account's streams without
// this node's, which does not know the account: they are not current until this restart, so
// waiting for them waits for itself. That is what an account removed and created again does —
// the meta layer keeps the removed account's streams, and the first node restarted with the
// account back reports them not current (the full cluster e2e, a vendor deleted and re-created:
// the other two nodes skipped their turns for 4 minutes while the vendor's pods timed out
// ensuring their inbox stream, which the meta leader, without the account, could not serve).
// Restarting ignores nothing that the restart could harm: this node holds no replica of an
// account it does not know.
func (r *natsReloader) restartTurn(hash string, incoming map[string]bool) bool {
	c := r.cfg
	if len(c.Peers) < 2 {
		return true
	}
	now := r.now()
	if r.pendingHash != hash {
		r.pendingHash, r.pendingSince = hash, now
		r.pending.Set(1)
		r.log.Info("accounts changed shape: restart waits for this node's turn", "hash", hash, "ordinal", c.Ordinal, "nodes", len(c.Peers), "slot", c.Slot,
			"incoming", slices.Sorted(maps.Keys(incoming)))
	}
	slot := now.UnixNano() / int64(c.Slot)
	inSlot := time.Duration(now.UnixNano() % int64(c.Slot))
	if int(slot%int64(len(c.Peers))) != c.Ordinal || inSlot >= c.Slot/2 {
		return false
	}
	var sick []string
	for i, p := range c.Peers {
		if i == c.Ordinal {
			continue
		}
		if err := r.peerHealthy(p, incoming); err != nil {
			sick = append(sick, fmt.Sprintf("node %d: %v", i, err))
		}
	}
	if len(sick) == 0 {
		return true
	}
	if waited := now.Sub(r.pendingSince); waited >= c.MaxWait {
		r.log.Warn("restarting without every peer healthy: the accounts have waited too long", "waited", waited.Round(time.Second), "peers", strings.Join(sick, "; "))
		return true
	}
	r.log.Info("restart turn skipped: a peer is not healthy", "peers", strings.Join(sick, "; "))
	return false
}

// peerHealthy asks a peer whether it runs, is current with the JetStream meta leader and holds
// every stream and consumer replica assigned to it current: /healthz?details=true, whose errors
// are typed. The 3-node cluster e2e showed why "current" matters: with only the meta layer
// checked (js-server-only), a node restarted while its peer's memory-stream replicas were still
// catching up, and the round-info bucket lost its quorum for good ("catchup aborted, no leader").
// ACCOUNT errors are ignored: an account removed with JetStream data in it stays "could not be
// resolved" forever and says nothing about the peer's replicas. So are the errors of replicas in
// the accounts of incoming (see restartTurn).
func (r *natsReloader) peerHealthy(base string, incoming map[string]bool) error {
	resp, err := r.http.Get(strings.TrimSuffix(base, "/") + "/healthz?details=true")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	return replicasCurrent(resp.StatusCode, body, incoming)
}

// replicasCurrent reads a /healthz?details=true answer: nil when every error it lists (if any)
// is about an account, or about a stream or consumer in one of the accounts of incoming.
func replicasCurrent(code int, body []byte, incoming map[string]bool) error {
	var st struct {
		Errors []struct {
			Type    string `json:"type"`
			Account string `json:"account"`
			Error   string `json:"error"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		if code == http.StatusOK {
			return nil
		}
		return fmt.Errorf("/healthz %d", code)
	}
	var bad []string
	for _, e := range st.Errors {
		switch {
		case e.Type == "ACCOUNT":
		case (e.Type == "STREAM" || e.Type == "CONSUMER") && incoming[e.Account]:
		default:
			bad = append(bad, e.Error)
		}
	}
	switch {
	case len(bad) > 0:
		return fmt.Errorf("/healthz %d: %s", code, strings.Join(bad[:min(len(bad), 3)], "; "))
	case code != http.StatusOK && len(st.Errors) == 0:
		return fmt.Errorf("/healthz %d", code)
	}
	return nil
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid < 1 {
		return 0, fmt.Errorf("pid file %s holds no process id", path)
	}
	return pid, nil
}

// incoming returns the accounts of next that the server has not loaded (not in the file last
// signalled); none when either file could not be parsed.
func (r *natsReloader) incoming(next map[string]bool) map[string]bool {
	if r.appliedAccounts == nil {
		return nil
	}
	var in map[string]bool
	for a := range next {
		if !r.appliedAccounts[a] {
			if in == nil {
				in = map[string]bool{}
			}
			in[a] = true
		}
	}
	return in
}

// accountNames is the set of accounts an accounts file defines (`accounts { NAME: {…} }`, as
// nats-server parses it), or nil when it does not parse.
func accountNames(data []byte) map[string]bool {
	m, err := conf.Parse(string(data))
	if err != nil {
		return nil
	}
	names := map[string]bool{}
	if accts, ok := m["accounts"].(map[string]any); ok {
		for a := range accts {
			names[a] = true
		}
	}
	return names
}

// accountShape is the configuration without its user lines (`{user: …}`, one per line as the
// operator renders them): what changes when accounts, imports or exports do.
func accountShape(data []byte) []byte {
	var out []byte
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "{user:") {
			out = append(out, l...)
		}
	}
	return out
}

// contentHash names a configuration in logs without revealing it.
func contentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
