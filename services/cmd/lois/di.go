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
	tun, cloudWire, keysFile string
}

func (c *diConfig) validate() error {
	errs := c.base.validate()
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
	return serve("lois-di", &c.base, func(log *slog.Logger, m *roles.Metrics, _ *telemetry.Health) (func(context.Context) error, error) {
		tun, err := roles.OpenTUN(c.tun)
		if err != nil {
			return nil, err
		}
		wire, err := listenWire(c.wireListen)
		if err != nil {
			tun.Close()
			return nil, err
		}
		d, err := roles.NewDevice(roles.DeviceConfig{Core: c.core(), Keys: keys[0], TUN: tun, Wire: wire,
			Cloud: netip.MustParseAddrPort(c.cloudWire), Margin: c.margin, Grace: c.grace, Metrics: m, Log: log, Plain: c.plain, STP: c.stpConfig()})
		if err != nil {
			tun.Close()
			wire.Close()
			return nil, daemon.ConfigError(err)
		}
		return d.Run, nil
	})
}
