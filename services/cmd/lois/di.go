package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

type diConfig struct {
	base
	natsFlags
	tun, cloudWire, keysFile string
	replenish                bool
}

func (c *diConfig) validate() error {
	errs := c.base.validate()
	if c.replenish {
		errs = append(errs, c.natsFlags.validate(false)...)
		if c.url == "" {
			errs = append(errs, fmt.Errorf("--replenish needs --nats-url (the registrar daemon's NATS)"))
		}
	}
	if c.tun == "" || len(c.tun) > 15 {
		errs = append(errs, fmt.Errorf("--tun %q: want an interface name of 1 to 15 bytes", c.tun))
	}
	if _, err := netip.ParseAddrPort(c.cloudWire); err != nil {
		errs = append(errs, fmt.Errorf("--cloud-wire %q: %v", c.cloudWire, err))
	}
	if c.keysFile == "" {
		errs = append(errs, fmt.Errorf("--keys-file is required (written by lois provision)"))
	}
	return daemon.JoinConfig(errs)
}

func runDI(args []string) error {
	var c diConfig
	f := daemon.NewFlags("di")
	c.base.bind(f, contract.DefaultDeviceWirePort)
	c.natsFlags.bind(f, false)
	f.Bool(&c.replenish, "replenish", false, "replenish through the registrar daemon over --nats-url: EPOCH_REQ, download grants, full rekeys (keys from lois hello)")
	f.String(&c.tun, "tun", "lois0", "TUN device carrying the device's packets (created if absent, in this network namespace)")
	f.String(&c.cloudWire, "cloud-wire", fmt.Sprintf("127.0.0.1:%d", contract.DefaultCloudWirePort), "the CI's wire address (UDP)")
	f.String(&c.keysFile, "keys-file", "/var/run/secrets/lois/keys.json", "this device's keys file (secret)")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	keys, err := readKeys(c.keysFile)
	if err != nil {
		return err
	}
	if c.replenish && keys[0].ControlKey() == nil {
		return daemon.ConfigError(fmt.Errorf("--replenish: keys file %s has no control key (write it with lois hello)", c.keysFile))
	}
	return serve("lois-di", &c.base, func(log *slog.Logger, m *roles.Metrics, _ *telemetry.Health) (func(context.Context) error, error) {
		// With --replenish the DI replenishes through the registrar daemon (EPOCH_REQ, download
		// grants, full rekeys); without, its keys are all it has.
		var ctl *roles.NATSControl
		var closeNC func()
		if c.replenish {
			js, cl, err := c.connect()
			if err != nil {
				return nil, err
			}
			if ctl, err = roles.NewNATSControl(js.Conn(), c.cloud, keys[0]); err != nil {
				cl()
				return nil, daemon.ConfigError(err)
			}
			closeNC = cl
		}
		tun, err := roles.OpenTUN(c.tun)
		if err != nil {
			return nil, err
		}
		wire, err := listenWire(c.wireListen)
		if err != nil {
			tun.Close()
			return nil, err
		}
		dc := roles.DeviceConfig{Core: c.core(), Keys: keys[0], TUN: tun, Wire: wire,
			Cloud: netip.MustParseAddrPort(c.cloudWire), Margin: c.margin, Grace: c.grace, Metrics: m, Log: log, Plain: c.plain, Batch: c.batch, STP: c.stpConfig()}
		if ctl != nil {
			dc.Control = ctl
		}
		d, err := roles.NewDevice(dc)
		if err == nil && ctl != nil {
			err = ctl.ServeGrants(d)
		}
		if err != nil {
			tun.Close()
			wire.Close()
			if closeNC != nil {
				closeNC()
			}
			return nil, daemon.ConfigError(err)
		}
		if ctl == nil {
			return d.Run, nil
		}
		return func(ctx context.Context) error {
			defer closeNC()
			defer ctl.Close()
			d.SendReady(ctx) // the SIs reply with the session only after it (spec §3.2)
			return d.Run(ctx)
		}, nil
	})
}
