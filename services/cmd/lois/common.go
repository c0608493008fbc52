package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// base is what every packet role shares: the observability ports, the cloud's parameters
// (which every role of one cloud must agree on) and the epoch timing.
type base struct {
	metricsAddr, healthAddr, addrFile, logLevel string
	cip                                         string
	unifiedPort, mtu                            int
	paperMode, plain                            bool
	batch                                       int
	margin, grace                               time.Duration
	wireListen                                  string
	stp                                         bool
	stpPeriod, stpTick                          time.Duration
	stpQ                                        float64
	stpRate                                     int
	// ordinalPorts: add the StatefulSet ordinal of --replica-name to the wire and metrics
	// ports (replicas on one host network share its port space); with wireReusePort the
	// replicas share the wire port and only the metrics port moves.
	ordinalPorts, wireReusePort bool
}

func (b *base) bind(f *envflag.Set, wirePort int) {
	f.String(&b.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, "Prometheus /metrics listen address")
	f.String(&b.healthAddr, "health-addr", daemon.DefaultHealthAddr, "/healthz and /readyz listen address")
	f.String(&b.addrFile, "addr-file", "", "write the bound health= and metrics= addresses here (port 0); lois probe reads it")
	f.String(&b.logLevel, "log-level", "info", "debug, info, warn or error")
	f.String(&b.cip, "cip", "198.18.0.1", "the cloud address every service shares (CIP, IPv4)")
	f.Int(&b.unifiedPort, "unified-port", lois.DefaultUnifiedPort, "the unified port U every LOIS packet shows")
	f.Int(&b.mtu, "mtu", 1400, "MTU of the TUN path: a hardened SYN's MSS is clamped to MTU − 52")
	f.Bool(&b.paperMode, "paper-mode", false, "the paper's behaviour: no IP ID/TTL/option normalisation, MASK 0x3F")
	f.Bool(&b.plain, "plain", false, "benchmark baseline only: the same path WITHOUT LOIS (headers in clear, CI a plain L4 NAT)")
	f.Int(&b.batch, "batch", 16, "packets moved per wait — ci: datagrams per recvmmsg/sendmmsg routed together; si: replies read from the TUN and sent in one sendmmsg; di: uploads read from the TUN and sent in one sendmmsg; di, si: wire datagrams per recvmmsg (1: one packet per system call)")
	f.Duration(&b.margin, "safety-margin", 60*time.Second, "senders stop using an epoch this long before its expiry")
	f.Duration(&b.grace, "grace", 120*time.Second, "receivers keep an epoch's entries this long after its expiry")
	f.Bool(&b.stp, "stp", false, "stochastic traffic padding of this sender's packets (di: uploads, si: downloads; spec §4)")
	f.Duration(&b.stpPeriod, "stp-period", 60*time.Second, "STP period T (and window length)")
	f.Float64(&b.stpQ, "stp-q", 0.1, "STP probability that a period gets a random shaping window")
	f.Int(&b.stpRate, "stp-rate", 2000, "STP rate R in bytes per second inside windows")
	f.Duration(&b.stpTick, "stp-tick", 10*time.Millisecond, "STP tick Δ")
	f.String(&b.wireListen, "wire-listen", fmt.Sprintf("0.0.0.0:%d", wirePort), "UDP address of this role on the emulated wire")
	f.Bool(&b.ordinalPorts, "ordinal-ports", false, "ci, si: add this replica's StatefulSet ordinal (the trailing -<n> of --replica-name) to the ports of --wire-listen and --metrics-addr (replicas sharing a host network)")
}

// applyOrdinal adds the ordinal at the end of name ("gw-lois-ci-2": 2) to the ports of
// --wire-listen (unless --wire-reuse-port shares it) and --metrics-addr when --ordinal-ports
// is set.
func (b *base) applyOrdinal(name string) error {
	if !b.ordinalPorts {
		return nil
	}
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil || n < 0 || n > 1000 {
		return fmt.Errorf("--ordinal-ports: --replica-name %q does not end in -<ordinal>", name)
	}
	addrs := []*string{&b.wireListen, &b.metricsAddr}
	if b.wireReusePort {
		addrs = addrs[1:] // the wire is shared (SO_REUSEPORT)
	}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(*a)
		if err != nil {
			return fmt.Errorf("--ordinal-ports: %q: %v", *a, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p == 0 || p+n > 65535 {
			return fmt.Errorf("--ordinal-ports: %q needs a fixed port below %d", *a, 65536-n)
		}
		*a = net.JoinHostPort(host, strconv.Itoa(p+n))
	}
	return nil
}

func (b *base) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, a := range []struct{ name, addr string }{{"--metrics-addr", b.metricsAddr}, {"--health-addr", b.healthAddr}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad("%s %q: %v", a.name, a.addr, err)
		}
	}
	if b.batch < 1 || b.batch > 1024 {
		bad("--batch %d: want 1 to 1024", b.batch)
	}
	switch b.logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q must be debug, info, warn or error", b.logLevel)
	}
	if a, err := netip.ParseAddr(b.cip); err != nil || !a.Is4() {
		bad("--cip %q: want an IPv4 address", b.cip)
	}
	if b.unifiedPort < 1 || b.unifiedPort > 65535 {
		bad("--unified-port %d: want 1 to 65535", b.unifiedPort)
	}
	if b.mtu < 576 || b.mtu > 65535 {
		bad("--mtu %d: want 576 to 65535", b.mtu)
	}
	if b.margin < 0 || b.grace < 0 {
		bad("--safety-margin and --grace must not be negative")
	}
	if b.stp && (b.stpQ < 0 || b.stpQ > 1 || b.stpRate < 1 || b.stpTick <= 0 || b.stpPeriod < b.stpTick) {
		bad("--stp-q in [0,1], --stp-rate ≥ 1, --stp-tick > 0 and --stp-period ≥ --stp-tick")
	}
	if _, err := netip.ParseAddrPort(b.wireListen); err != nil {
		bad("--wire-listen %q: %v", b.wireListen, err)
	}
	return errs
}

func (b *base) core() lois.Config {
	return lois.Config{CIP: netip.MustParseAddr(b.cip).As4(), UnifiedPort: uint16(b.unifiedPort), PaperMode: b.paperMode, MTU: b.mtu}
}

// stpConfig is the padding configuration, nil without --stp.
func (b *base) stpConfig() *lois.STPConfig {
	if !b.stp {
		return nil
	}
	return &lois.STPConfig{Period: b.stpPeriod, Q: b.stpQ, Rate: b.stpRate, Tick: b.stpTick}
}

// readKeys reads keys files; an unreadable or malformed one is a configuration error.
func readKeys(list string) ([]*contract.Keys, error) {
	var out []*contract.Keys
	for _, p := range splitList(list) {
		k, err := contract.ReadKeys(p)
		if err != nil {
			return nil, daemon.ConfigError(err)
		}
		out = append(out, k)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parsePort(s string) (uint16, error) {
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(v), nil
}

// listenWire binds the role's UDP socket with room for bursts.
func listenWire(addr string) (*net.UDPConn, error) { return listenWireShared(addr, false) }

// listenWireShared is listenWire; reusePort binds with SO_REUSEPORT, so that the replicas of
// one server interface share one wire address (the kernel spreads the datagrams over them by
// their addresses, and over the others when one goes).
func listenWireShared(addr string, reusePort bool) (*net.UDPConn, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.MustParseAddrPort(addr).String())
	if err != nil {
		return nil, fmt.Errorf("listen on the wire %s: %w", addr, err)
	}
	c := pc.(*net.UDPConn)
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
	return c, nil
}

// serve runs a packet role: the observability servers, the role's setup (not ready until
// it is done) and its packet loops, until SIGTERM/SIGINT.
func serve(name string, b *base, setup func(log *slog.Logger, m *roles.Metrics, health *telemetry.Health) (func(context.Context) error, error)) error {
	log := telemetry.NewLogger(os.Stderr, name, b.logLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	health.SetReady(false, "starting")
	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	af, err := telemetry.NewAddrFile(b.addrFile)
	if err != nil {
		return err
	}
	m := roles.NewMetrics(reg)
	runRole, err := setup(log, m, health)
	if err != nil {
		return err
	}
	g, gctx := telemetry.NewGroup(ctx)
	names := []string{telemetry.AddrMetrics}
	if b.healthAddr == b.metricsAddr {
		names = append(names, telemetry.AddrHealth)
	} else {
		g.Go("health server", func(ctx context.Context) error {
			return telemetry.Serve(ctx, b.healthAddr, reg, health, log, telemetry.Publish(af, telemetry.AddrHealth))
		})
	}
	g.Go("metrics server", func(ctx context.Context) error {
		return telemetry.Serve(ctx, b.metricsAddr, reg, health, log, telemetry.Publish(af, names...))
	})
	g.Go(name, func(ctx context.Context) error {
		health.SetReady(true, "")
		defer health.SetReady(false, "shutting down")
		return runRole(ctx)
	})
	_ = gctx
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
}
