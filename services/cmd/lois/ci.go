package main

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

type ciConfig struct {
	base
	natsFlags
	keysFiles, backends, flowKeyFile string
}

// parseBackends reads "sid=ip:port@wireip:wireport,…".
func parseBackends(s string) ([]roles.ServerBackend, error) {
	var out []roles.ServerBackend
	for _, item := range splitList(s) {
		sidS, rest, ok1 := strings.Cut(item, "=")
		be, wire, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("backend %q: want sid=ip:port@wire-ip:wire-port", item)
		}
		sid, err := strconv.ParseUint(sidS, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("backend %q: sid: %v", item, err)
		}
		ap, err := netip.ParseAddrPort(be)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("backend %q: want an IPv4 server address", item)
		}
		w, err := netip.ParseAddrPort(wire)
		if err != nil {
			return nil, fmt.Errorf("backend %q: wire: %v", item, err)
		}
		out = append(out, roles.ServerBackend{SID: uint16(sid), Backend: lois.Backend{IP: ap.Addr().As4(), Port: ap.Port()}, Wire: w})
	}
	return out, nil
}

func (c *ciConfig) validate() error {
	errs := append(c.base.validate(), c.natsFlags.validate(true)...)
	errs = append(errs, c.natsFlags.loadRecords(false)...)
	if err := c.base.applyOrdinal(c.name); err != nil {
		errs = append(errs, err)
	}
	if len(splitList(c.keysFiles)) == 0 && c.url == "" {
		errs = append(errs, fmt.Errorf("--keys-files or --nats-url is required (the sessions' keys files, or the registrar's session stream)"))
	}
	if bs, err := parseBackends(c.backends); err != nil {
		errs = append(errs, fmt.Errorf("--backends: %w", err))
	} else if len(bs) == 0 {
		errs = append(errs, fmt.Errorf("--backends is required"))
	}
	return daemon.JoinConfig(errs)
}

func runCI(args []string) error {
	var c ciConfig
	f := daemon.NewFlags("ci")
	c.base.bind(f, contract.DefaultCloudWirePort)
	f.String(&c.keysFiles, "keys-files", "", "comma-separated keys files of the device sessions (secret)")
	f.String(&c.backends, "backends", "", "comma-separated sid=server-ip:port@si-wire-ip:port")
	f.String(&c.flowKeyFile, "flow-key-file", "", "16-byte backend-hash key shared by every CI replica (hex file); none: random, one replica only")
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
	var flowKey [16]byte
	if c.flowKeyFile != "" {
		b, err := os.ReadFile(c.flowKeyFile)
		if err != nil {
			return daemon.ConfigError(fmt.Errorf("--flow-key-file: %w", err))
		}
		k, err := hexKey(string(b), 16)
		if err != nil {
			return daemon.ConfigError(fmt.Errorf("--flow-key-file: %w", err))
		}
		copy(flowKey[:], k)
	} else {
		crand.Read(flowKey[:])
	}
	backends, _ := parseBackends(c.backends)
	return serve("lois-ci", &c.base, func(log *slog.Logger, m *roles.Metrics, health *telemetry.Health) (func(context.Context) error, error) {
		wire, err := listenWire(c.wireListen)
		if err != nil {
			return nil, err
		}
		cl, err := roles.NewCloud(roles.CloudConfig{Core: c.core(), Keys: keys, Backends: backends, FlowKey: flowKey,
			Wire: wire, Grace: c.grace, Metrics: m, Log: log, Plain: c.plain, Batch: c.batch})
		if err != nil {
			wire.Close()
			return nil, daemon.ConfigError(err)
		}
		return c.follow(cl.Run, cl, log, health), nil
	})
}
