package roles

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
)

// DeviceConfig configures a DI.
type DeviceConfig struct {
	Core lois.Config
	Keys *contract.Keys
	// TUN carries the device's own packets: those to Core.CIP are hidden and sent to Cloud,
	// recovered downloads are written back to it.
	TUN  io.ReadWriteCloser
	Wire *net.UDPConn // bound to the DI's wire address (downloads arrive here)
	// Cloud is the CI's wire address.
	Cloud netip.AddrPort
	// Margin is how long before expiry a sender stops using an epoch (spec §3.12).
	Margin time.Duration
	// Grace is how long after expiry a receiver keeps an epoch's entries.
	Grace   time.Duration
	Metrics *Metrics
	Log     *slog.Logger
	// Plain runs the path without LOIS (benchmark baseline, plain.go).
	Plain bool
}

// Device is a running DI.
type Device struct {
	cfg  DeviceConfig
	core *lois.Device
	down lockedDVT
	clk  clock
	up   counters
	dn   counters
	pool map[uint16]*lois.Pool
	seen recentIDs
	ex   uint16
}

// NewDevice builds the DI's pools (upload) and table (download) from its keys.
func NewDevice(cfg DeviceConfig) (*Device, error) {
	if cfg.Keys == nil || cfg.TUN == nil || cfg.Wire == nil || !cfg.Cloud.IsValid() {
		return nil, errors.New("lois device: keys, tun, wire and cloud address are required")
	}
	down, err := newTable([]*contract.Keys{cfg.Keys}, "down", int64(cfg.Grace/time.Second))
	if err != nil {
		return nil, err
	}
	if _, err := install(down, []*contract.Keys{cfg.Keys}, "down", nil); err != nil {
		return nil, err
	}
	d := &Device{cfg: cfg, core: lois.NewDevice(cfg.Core, down), pool: map[uint16]*lois.Pool{}, ex: exID(cfg.Core)}
	d.down.t = down
	d.up = cfg.Metrics.counters("di", "up")
	d.dn = cfg.Metrics.counters("di", "down")
	for i := range cfg.Keys.Streams {
		rec := &cfg.Keys.Streams[i]
		if rec.Dir != "up" {
			continue
		}
		s, err := rec.Core()
		if err != nil {
			return nil, err
		}
		p := d.pool[s.SID]
		if p == nil {
			p = &lois.Pool{}
			d.pool[s.SID] = p
			d.core.Up.Set(s.SID, p)
		}
		p.Add(&s, 1, 0, s.Expiry-int64(cfg.Margin/time.Second))
		clear(s.Key[:])
	}
	d.clk.set(time.Now())
	return d, nil
}

// Run moves packets until ctx ends.
func (d *Device) Run(ctx context.Context) error {
	d.cfg.Log.Info("device interface running", "cloud", d.cfg.Cloud.String(), "services", len(d.pool))
	return run(ctx, d.cfg.Log, []io.Closer{d.cfg.TUN, d.cfg.Wire}, d.tick, d.upload, d.download)
}

func (d *Device) tick(now time.Time) {
	d.clk.set(now)
	d.down.gc(now.Unix(), d.cfg.Metrics, "down")
}

// poolGauge reports the unused upload pairs per service; only the upload loop, which owns
// the pools, calls it.
func (d *Device) poolGauge() {
	for sid, p := range d.pool {
		d.cfg.Metrics.PoolSize.WithLabelValues(strconv.Itoa(int(sid)), "up").Set(float64(p.Len()))
	}
}

// upload hides every packet the device sends to the cloud (spec §3.9 DI upload). An empty
// pool drops the packet (counted "exhausted"): pre-provisioned keys have no EPOCH_REQ to
// wait for, and a keystream is never reused (D-20).
func (d *Device) upload() error {
	buf := make([]byte, lois.Headroom+contract.MaxDatagram)
	var last int64
	for {
		n, err := d.cfg.TUN.Read(buf[lois.Headroom:])
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		off, err := lois.Headroom, error(nil)
		if d.cfg.Plain {
			if _, ok := plainParse(buf[off : off+n]); !ok || [4]byte(buf[off+16:off+20]) != d.cfg.Core.CIP {
				err = lois.ErrNotLOIS
			}
		} else {
			off, err = d.core.HideUpload(buf[:lois.Headroom+n], lois.Headroom, d.clk.now())
		}
		if err != nil {
			d.up.inc(contract.Result(err))
			continue
		}
		if _, err := d.cfg.Wire.WriteToUDPAddrPort(buf[off:lois.Headroom+n], d.cfg.Cloud); err != nil {
			d.up.inc(contract.ResultIOError)
			continue
		}
		d.up.inc(contract.ResultOK)
		if now := d.clk.now(); now != last { // pools belong to this loop
			last = now
			d.poolGauge()
		}
	}
}

// download recovers the SIs' packets and writes them to the TUN (spec §3.9 DI download).
func (d *Device) download() error {
	buf := make([]byte, contract.MaxDatagram)
	for {
		n, _, err := d.cfg.Wire.ReadFromUDPAddrPort(buf)
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		id, _ := lois.ParseID(buf[:n], d.ex)
		off := 0
		if !d.cfg.Plain {
			d.down.mu.Lock()
			off, _, err = d.core.RecoverDownload(buf[:n], 0)
			d.down.mu.Unlock()
		}
		if err != nil {
			d.dn.inc(rejection(err, id, &d.seen))
			continue
		}
		d.seen.add(id)
		if _, err := d.cfg.TUN.Write(buf[off:n]); err != nil {
			d.dn.inc(contract.ResultIOError)
			continue
		}
		d.dn.inc(contract.ResultOK)
	}
}

// rejection names the reason of a receiver's error, telling a replay of a recently consumed
// id from an unknown one. A recovered cover packet also consumed its id.
func rejection(err error, id uint64, seen *recentIDs) string {
	r := contract.Result(err)
	switch {
	case r == contract.ResultUnknownID && seen.has(id):
		return contract.ResultReplay
	case r == contract.ResultPad:
		seen.add(id)
	}
	return r
}
