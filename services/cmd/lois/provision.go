package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
)

type provisionConfig struct {
	outDir, services, deviceIP, deviceWire string
	n, replicas                            int
	lifetime                               time.Duration
}

func (c *provisionConfig) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.outDir == "" {
		bad("--out-dir is required")
	}
	if _, err := parseSIDs(c.services); err != nil {
		bad("--services: %v", err)
	}
	if a, err := netip.ParseAddr(c.deviceIP); err != nil || !a.Is4() {
		bad("--device-ip %q: want the device's IPv4 address inside the LOIS packets", c.deviceIP)
	}
	if _, err := netip.ParseAddrPort(c.deviceWire); err != nil {
		bad("--device-wire %q: %v", c.deviceWire, err)
	}
	if c.n < 1 || c.n > 1<<24 {
		bad("--n %d: want 1 to 2^24 keystreams per service and direction", c.n)
	}
	if c.replicas < 1 || c.replicas > 1024 {
		bad("--replicas %d: want 1 to 1024", c.replicas)
	}
	if c.lifetime < time.Minute {
		bad("--lifetime %s: want at least 1m", c.lifetime)
	}
	return daemon.JoinConfig(errs)
}

func parseSIDs(s string) ([]uint16, error) {
	var out []uint16
	for _, p := range splitList(s) {
		v, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("sid %q: %v", p, err)
		}
		out = append(out, uint16(v))
	}
	if len(out) == 0 {
		return nil, errors.New("at least one sid")
	}
	return out, nil
}

// runProvision writes di.json, ci.json and si-<r>.json into --out-dir (mode 0600).
func runProvision(args []string) error {
	var c provisionConfig
	f := daemon.NewFlags("provision")
	f.String(&c.outDir, "out-dir", "", "directory the keys files are written to")
	f.String(&c.services, "services", "", "comma-separated service ids (the ports the device dials on the cloud address)")
	f.String(&c.deviceIP, "device-ip", "", "the device's address inside the LOIS packets (its TUN address)")
	f.String(&c.deviceWire, "device-wire", "", "the DI's wire address (ip:port) SIs send downloads to")
	f.Int(&c.n, "n", 1024, "keystreams per service and direction (one epoch)")
	f.Int(&c.replicas, "replicas", 1, "SI replicas per service: the download partition (spec §3.11)")
	f.Duration(&c.lifetime, "lifetime", time.Hour, "epoch lifetime")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	sids, _ := parseSIDs(c.services)
	p := roles.Provision{Services: sids, N: uint32(c.n), Lifetime: c.lifetime, Epoch: 1,
		DeviceIP: netip.MustParseAddr(c.deviceIP), DeviceWire: netip.MustParseAddrPort(c.deviceWire), Replicas: c.replicas}
	out, err := p.Run(time.Now())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.outDir, 0o700); err != nil {
		return err
	}
	files := map[string]*contract.Keys{"di.json": out.Device, "ci.json": out.Cloud}
	for r, k := range out.Server {
		files[fmt.Sprintf("si-%d.json", r)] = k
	}
	for name, k := range files {
		if err := contract.WriteKeys(filepath.Join(c.outDir, name), k); err != nil {
			return err
		}
	}
	fmt.Printf("session %s: %d keys files in %s\n", out.Device.Session, len(files), c.outDir)
	return nil
}

// hexKey decodes a hex key of n bytes (surrounding white space allowed).
func hexKey(s string, n int) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("want %d hex bytes", n)
	}
	return b, nil
}
