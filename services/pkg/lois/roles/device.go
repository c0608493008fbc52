package roles

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
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
	// STP, if set, pads the uploads (spec §4).
	STP *lois.STPConfig
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
	pad  *padder
	stop stopper
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
	if cfg.STP != nil && !cfg.Plain {
		if d.pad, err = newPadder(*cfg.STP); err != nil {
			return nil, err
		}
	}
	d.stop = make(stopper)
	d.clk.set(time.Now())
	return d, nil
}

// Run moves packets until ctx ends.
func (d *Device) Run(ctx context.Context) error {
	d.cfg.Log.Info("device interface running", "cloud", d.cfg.Cloud.String(), "services", len(d.pool))
	loops := []func() error{d.upload, d.download}
	if d.pad != nil {
		loops = append(loops, d.padLoop)
	}
	return run(ctx, d.cfg.Log, []io.Closer{d.cfg.TUN, d.cfg.Wire, d.stop}, d.tick, loops...)
}

// padLoop sends the upload cover packets every Δ (spec §4: STP runs on the device for upload).
func (d *Device) padLoop() error {
	t := time.NewTicker(d.cfg.STP.Tick)
	defer t.Stop()
	buf := make([]byte, lois.Headroom+1500)
	for {
		select {
		case <-d.stop:
			return nil
		case now := <-t.C:
			n := d.pad.tick(now, buf, func(n int) bool {
				off, err := d.core.HideUpload(buf[:lois.Headroom+n], lois.Headroom, d.clk.now())
				if err != nil {
					d.up.inc(contract.Result(err))
					return false
				}
				if _, err := d.cfg.Wire.WriteToUDPAddrPort(buf[off:lois.Headroom+n], d.cfg.Cloud); err != nil {
					d.up.inc(contract.ResultIOError)
					return false
				}
				d.up.inc(contract.ResultPadSent)
				return true
			})
			d.cfg.Metrics.Cover.WithLabelValues("di").Add(float64(n))
		}
	}
}

func (d *Device) tick(now time.Time) {
	d.clk.set(now)
	d.down.gc(now.Unix(), d.cfg.Metrics, "down")
}

// poolGauge reports the unused upload keystreams of every service summed (a service id is
// what LOIS hides from the network: never a label); the upload loop, which owns the pools,
// calls it (holding the pad lock when the pad loop shares them).
func (d *Device) poolGauge() {
	if d.pad != nil {
		d.pad.mu.Lock()
		defer d.pad.mu.Unlock()
	}
	total := 0
	for _, p := range d.pool {
		total += p.Len()
	}
	d.cfg.Metrics.Pool.WithLabelValues("up").Set(float64(total))
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
		} else if d.pad != nil {
			d.pad.mu.Lock()
			if n >= 40 && [4]byte(buf[off+16:off+20]) == d.cfg.Core.CIP {
				d.pad.real(buf[off:off+n], time.Now().UnixNano())
			}
			off, err = d.core.HideUpload(buf[:lois.Headroom+n], lois.Headroom, d.clk.now())
			d.pad.mu.Unlock()
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
	r := receiver{wire: d.cfg.Wire, tun: d.cfg.TUN, plain: d.cfg.Plain, ex: d.ex, table: &d.down, c: d.dn, seen: &d.seen}
	return r.run(func(p []byte) (int, error) {
		off, _, err := d.core.RecoverDownload(p, 0)
		return off, err
	})
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
