package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

type siConfig struct {
	base
	natsFlags
	tun, keysFiles, services string
	// netns, tunAddr, tunRoutes place and address the TUN (an SI the operator runs in the
	// server's network namespace, roles.TUNSetup); empty: the device as found or made here.
	netns, tunAddr, tunRoutes string
	// tunMultiQueue: one queue of the service's multi-queue TUN, shared with the other
	// replicas (roles.TUNSetup.MultiQueue).
	tunMultiQueue bool
}

// tunSetup is the TUN's placement and addresses; validate checked them.
func (c *siConfig) tunSetup() roles.TUNSetup {
	s := roles.TUNSetup{Netns: c.netns, MultiQueue: c.tunMultiQueue}
	if c.tunAddr != "" {
		s.Addr = netip.MustParseAddr(c.tunAddr)
		s.MTU = c.mtu
	}
	for _, r := range splitList(c.tunRoutes) {
		s.Routes = append(s.Routes, netip.MustParsePrefix(r))
	}
	return s
}

// parseServices reads "port=sid,…": the local server's port and its service id.
func parseServices(s string) (map[uint16]uint16, error) {
	out := map[uint16]uint16{}
	for _, item := range splitList(s) {
		portS, sidS, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("service %q: want port=sid", item)
		}
		port, err := parsePort(portS)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", item, err)
		}
		sid, err := strconv.ParseUint(sidS, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("service %q: sid: %v", item, err)
		}
		out[port] = uint16(sid)
	}
	return out, nil
}

func (c *siConfig) validate() error {
	errs := append(c.base.validate(), c.natsFlags.validate(true)...)
	errs = append(errs, c.natsFlags.loadRecords(false)...)
	if err := c.base.applyOrdinal(c.name); err != nil {
		errs = append(errs, err)
	}
	if c.tun == "" || len(c.tun) > 15 {
		errs = append(errs, fmt.Errorf("--tun %q: want an interface name of 1 to 15 bytes", c.tun))
	}
	if len(splitList(c.keysFiles)) == 0 && c.url == "" {
		errs = append(errs, fmt.Errorf("--keys-files or --nats-url is required (this replica's keys files, or the registrar's session stream)"))
	}
	if c.tunAddr != "" {
		if a, err := netip.ParseAddr(c.tunAddr); err != nil || !a.Is4() {
			errs = append(errs, fmt.Errorf("--tun-addr %q: want an IPv4 address", c.tunAddr))
		}
	}
	for _, r := range splitList(c.tunRoutes) {
		if p, err := netip.ParsePrefix(r); err != nil || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("--tun-routes %q: want IPv4 prefixes", r))
		}
	}
	if c.tunRoutes != "" && c.tunAddr == "" {
		errs = append(errs, fmt.Errorf("--tun-routes needs --tun-addr (the routes' source, the server's address)"))
	}
	if s, err := parseServices(c.services); err != nil {
		errs = append(errs, fmt.Errorf("--services: %w", err))
	} else if len(s) == 0 {
		errs = append(errs, fmt.Errorf("--services is required"))
	}
	return daemon.JoinConfig(errs)
}

func runSI(args []string) error {
	var c siConfig
	f := daemon.NewFlags("si")
	c.base.bind(f, contract.DefaultServerWirePort)
	f.String(&c.tun, "tun", "lois1", "TUN device towards the real servers (created if absent, in this network namespace)")
	f.String(&c.netns, "netns", "", "network namespace file (/run/netns/<name>) of the server: the TUN is made there (needs CAP_SYS_ADMIN); empty: this process's namespace")
	f.String(&c.tunAddr, "tun-addr", "", "give the TUN this IPv4 address as a /32 (the server's address SIP), the --mtu, and set it up; empty: the device is configured by someone else")
	f.String(&c.tunRoutes, "tun-routes", "", "comma-separated IPv4 prefixes of the devices (DIP) routed into the TUN, so the server's replies reach the SI (with --tun-addr)")
	f.Bool(&c.tunMultiQueue, "tun-multi-queue", false, "attach one queue of a multi-queue TUN: the replicas of one service share the device, its address and routes, the kernel spreads the server's replies over them by flow")
	f.Bool(&c.wireReusePort, "wire-reuse-port", false, "bind --wire-listen with SO_REUSEPORT: the replicas of one service share serverWire (with --ordinal-ports only the metrics port moves)")
	f.String(&c.keysFiles, "keys-files", "", "comma-separated keys files of the device sessions for this replica (secret)")
	f.String(&c.services, "services", "", "comma-separated server-port=sid of the services behind this SI")
	c.natsFlags.bind(f, true)
	c.natsFlags.bindRecords(f, false)
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	keys, err := readKeys(c.keysFiles)
	if err != nil {
		return err
	}
	ports, _ := parseServices(c.services)
	return serve("lois-si", &c.base, func(log *slog.Logger, m *roles.Metrics, health *telemetry.Health) (func(context.Context) error, error) {
		tun, err := roles.OpenTUNWith(c.tun, c.tunSetup())
		if err != nil {
			return nil, err
		}
		wire, err := listenWireShared(c.wireListen, c.wireReusePort)
		if err != nil {
			tun.Close()
			return nil, err
		}
		var lowWater func(string, uint16) error
		if c.url != "" { // download pools announce their low water to the registrar
			lowWater = c.natsFlags.lowWater
		}
		s, err := roles.NewServer(roles.ServerConfig{Core: c.core(), Keys: keys, Ports: ports, TUN: tun, Wire: wire,
			Margin: c.margin, Grace: c.grace, Metrics: m, Log: log, Plain: c.plain, Batch: c.batch, STP: c.stpConfig(), LowWater: lowWater})
		if err != nil {
			tun.Close()
			wire.Close()
			return nil, daemon.ConfigError(err)
		}
		return c.follow(s.Run, s, log, health), nil
	})
}
