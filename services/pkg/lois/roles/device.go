package roles

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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
	// Batch is how many download datagrams one recvmmsg reads (recovered under one hold of
	// the table's lock), and how many uploads one wait reads from the TUN and one sendmmsg
	// sends to the CI. 0 is lois.BatchSize; 1 moves one packet per system call.
	Batch int
	// STP, if set, pads the uploads (spec §4).
	STP *lois.STPConfig
	// Control, if set, replenishes the upload pools (spec §3.12): EPOCH_REQ when a pool
	// falls below its low-water mark, and a packet that finds its pool empty is held up to
	// ExhaustQueue for the grant, then dropped and counted exhausted. Without it an empty
	// pool drops the packet at once (pre-provisioned keys).
	Control EpochClient
	// ExhaustQueue is exhaust_queue_ms (default 50 ms, spec §3.10).
	ExhaustQueue time.Duration
	// LowWaterMin is the floor of the low-water mark (default 64, spec §3.12).
	LowWaterMin int
}

// epochRequestTimeout bounds one EPOCH_REQ (the registrar waits for every replica's ack).
const epochRequestTimeout = 5 * time.Second

// DefaultExhaustQueue is the spec's exhaust_queue_ms (§3.10).
const DefaultExhaustQueue = 50 * time.Millisecond

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
	// mu guards the pools (with STP the pad's mutex does: lock); pending are the SIDs with
	// an EPOCH_REQ outstanding, guarded by the same lock.
	mu      sync.Mutex
	session atomic.Pointer[string] // the current session (a full rekey replaces it)
	pending map[uint16]bool
	reqc    chan uint16
	park    *parker
}

// lock is the pools' mutex: the pad's when the pad loop shares them.
func (d *Device) lock() *sync.Mutex {
	if d.pad != nil {
		return &d.pad.mu
	}
	return &d.mu
}

// NewDevice builds the DI's pools (upload) and table (download) from its keys.
func NewDevice(cfg DeviceConfig) (*Device, error) {
	if cfg.Keys == nil || cfg.TUN == nil || cfg.Wire == nil || !cfg.Cloud.IsValid() {
		return nil, errors.New("lois device: keys, tun, wire and cloud address are required")
	}
	if cfg.Batch < 0 || cfg.Batch > maxBatch {
		return nil, fmt.Errorf("lois device: batch %d: want 0 to %d", cfg.Batch, maxBatch)
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
	cfg.Metrics.Cover.WithLabelValues("di") // at 0 from the start: no cover sent without STP
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
	d.session.Store(&cfg.Keys.Session)
	if d.cfg.LowWaterMin <= 0 {
		d.cfg.LowWaterMin = lois.LowWaterMark(0)
	}
	if d.cfg.ExhaustQueue <= 0 {
		d.cfg.ExhaustQueue = DefaultExhaustQueue
	}
	for _, p := range d.pool {
		p.LowWater = max(p.LowWater, d.cfg.LowWaterMin)
	}
	if cfg.Control != nil && !cfg.Plain {
		d.pending = map[uint16]bool{}
		d.reqc = make(chan uint16, 64)
		d.park = newParker(d.cfg.ExhaustQueue, cfg.Metrics.ExhaustQueued.WithLabelValues("di"), d.sendParked,
			func(*parked) { d.up.inc(contract.ResultExhausted) })
	}
	return d, nil
}

// Session is the DI's session id (hex).
func (d *Device) Session() string { return *d.session.Load() }

// InstallGrant installs an epoch of the DI's session (DeviceLink): a download stream into
// the download table — the DI's ack, after which the registrar activates it at the SIs — and
// an upload stream into its pool (EPOCH_GRANT, spec §3.12).
func (d *Device) InstallGrant(k *contract.Keys) error {
	if !k.Grant && len(k.Streams) > 0 { // a new session (full rekey): its streams, then switch
		if err := d.installStreams(k); err != nil {
			return err
		}
		d.session.Store(&k.Session)
		return nil
	}
	if k.Session != d.Session() {
		return errors.New("lois device: grant for another session")
	}
	return d.installStreams(k)
}

// installStreams adds a record's download streams to the table and its upload streams to the
// pools.
func (d *Device) installStreams(k *contract.Keys) error {
	d.down.mu.Lock()
	_, err := install(d.down.t, []*contract.Keys{k}, "down", nil)
	d.down.mu.Unlock()
	if err != nil {
		return err
	}
	mu := d.lock()
	for i := range k.Streams {
		rec := &k.Streams[i]
		if rec.Dir == "down" {
			d.cfg.Metrics.EpochsGranted.WithLabelValues("di", "down").Inc()
			continue
		}
		s, err := rec.Core()
		if err != nil {
			return err
		}
		mu.Lock()
		p := d.pool[s.SID]
		if p == nil {
			mu.Unlock()
			clear(s.Key[:])
			return fmt.Errorf("lois device: grant for service %d the session does not use", s.SID)
		}
		p.Add(&s, 1, 0, s.Expiry-int64(d.cfg.Margin/time.Second))
		delete(d.pending, s.SID)
		mu.Unlock()
		clear(s.Key[:])
		d.cfg.Metrics.EpochsGranted.WithLabelValues("di", "up").Inc()
		if d.park != nil {
			d.park.granted()
		}
	}
	return nil
}

// checkLow queues an EPOCH_REQ for the pool of sid when it fell below its low-water mark
// and none is outstanding (the caller holds lock).
func (d *Device) checkLow(sid uint16) {
	p := d.core.Up.Get(sid) // two array indexings, not the map: this runs per packet
	if p == nil || !p.NeedsReplenish() || d.pending[sid] {
		return
	}
	select {
	case d.reqc <- sid:
		d.pending[sid] = true
	default:
	}
}

// replenishLoop sends the EPOCH_REQs off the packet path and installs the grants; a failed
// request may be repeated after a second.
func (d *Device) replenishLoop() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-d.stop; cancel() }()
	for {
		select {
		case <-d.stop:
			return nil
		case sid := <-d.reqc:
			d.cfg.Metrics.EpochsRequested.WithLabelValues("di", "up").Inc()
			rctx, rcancel := context.WithTimeout(ctx, epochRequestTimeout)
			k, err := d.cfg.Control.RequestEpoch(rctx, d.Session(), sid)
			rcancel()
			if errors.Is(err, ErrRekeyDue) { // the seed is due: a new HELLO, a new session
				d.cfg.Metrics.RekeysDue.WithLabelValues("di").Inc()
				rctx, rcancel := context.WithTimeout(ctx, epochRequestTimeout)
				k, err = d.cfg.Control.Rehello(rctx, d.Session())
				rcancel()
				if err == nil {
					d.cfg.Log.Info("re-handshake done: new session")
				}
			}
			if err == nil {
				err = d.InstallGrant(k)
			}
			if err == nil && !k.Grant {
				d.ready(ctx, k.Session)
			}
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			d.cfg.Log.Warn("upload epoch not granted", "err", err)
			go func() { // ask again a second later if the pool is still low
				select {
				case <-d.stop:
					return
				case <-time.After(time.Second):
				}
				mu := d.lock()
				mu.Lock()
				delete(d.pending, sid)
				// Not only on the next packet: a packet held for an empty pool may be the last
				// one for a while (a registrar restarting under a lock-step exchange).
				d.checkLow(sid)
				mu.Unlock()
			}()
		}
	}
}

// Readier is an EpochClient that takes the DI's READY (spec §3.2): the registrar daemon's
// sessions send downloads only after it.
type Readier interface {
	Ready(ctx context.Context, session string) error
}

// ready sends READY for a session the DI installed, if its Control takes one; a failure is
// retried a few times (without it the SIs keep the device's previous session, or none).
func (d *Device) ready(ctx context.Context, session string) {
	r, ok := d.cfg.Control.(Readier)
	if !ok {
		return
	}
	for attempt := range 5 {
		rctx, cancel := context.WithTimeout(ctx, epochRequestTimeout)
		err := r.Ready(rctx, session)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		d.cfg.Log.Warn("READY not recorded", "attempt", attempt+1, "err", err)
		select {
		case <-d.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// SendReady sends READY for the DI's current session (after NewDevice installed the keys of
// its HELLO), if its Control takes one.
func (d *Device) SendReady(ctx context.Context) { d.ready(ctx, d.Session()) }

// sendParked hides and sends a held packet; false if its pool is still empty.
func (d *Device) sendParked(pk *parked) bool {
	mu := d.lock()
	mu.Lock()
	off, err := d.core.HideUpload(pk.buf[:lois.Headroom+pk.n], lois.Headroom, d.clk.now())
	mu.Unlock()
	if errors.Is(err, lois.ErrExhausted) {
		return false
	}
	if err != nil {
		d.up.inc(contract.Result(err))
		return true
	}
	if _, err := d.cfg.Wire.WriteToUDPAddrPort(pk.buf[off:lois.Headroom+pk.n], d.cfg.Cloud); err != nil {
		d.up.inc(contract.ResultIOError)
		return true
	}
	d.up.inc(contract.ResultOK)
	return true
}

// Run moves packets until ctx ends.
func (d *Device) Run(ctx context.Context) error {
	d.cfg.Log.Info("device interface running", "cloud", d.cfg.Cloud.String(), "services", len(d.pool))
	loops := []func() error{d.upload, d.download}
	if d.reqc != nil {
		loops = append(loops, d.replenishLoop, func() error { return d.park.loop(d.stop) })
	}
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
				sid := binary.BigEndian.Uint16(buf[lois.Headroom+22:]) // the flow's service (BuildPad copies it)
				off, err := d.core.HideUpload(buf[:lois.Headroom+n], lois.Headroom, d.clk.now())
				// Cover packets use the pools as real ones do, so they ask for epochs too:
				// otherwise padding empties a pool after the last real packet, the pads stop
				// (a visible change of pattern) and the next real packet waits for a grant.
				if d.reqc != nil {
					d.checkLow(sid) // the pad loop holds the pools' lock (d.lock() is the padder's)
				}
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
	mu := d.lock() // measured rates set the low-water marks (spec §3.12)
	mu.Lock()
	for _, p := range d.pool {
		p.Measure(now.Unix(), d.cfg.LowWaterMin)
	}
	mu.Unlock()
}

// poolGauge reports the unused upload keystreams of every service summed (a service id is
// what LOIS hides from the network: never a label); the upload loop, which owns the pools,
// calls it (holding the pad lock when the pad loop shares them).
func (d *Device) poolGauge() {
	mu := d.lock()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, p := range d.pool {
		total += p.Len()
	}
	d.cfg.Metrics.Pool.WithLabelValues("up").Set(float64(total))
}

// upload hides every packet the device sends to the cloud (spec §3.9 DI upload). A pool
// below its low-water mark asks for an epoch (with Control); a packet that finds its pool
// empty is held for the grant (park), or without Control dropped at once (counted
// "exhausted"); a keystream is never reused (D-20).
//
// The loop moves bursts: it reads as many packets as the TUN has queued (up to Batch, one
// wait for all of them), hides each, and sends them to the CI with one sendmmsg, as the SI's
// download loop does. Batch 1 (or a TUN that is not a file: a test's in-memory device) reads
// and sends one packet per system call.
func (d *Device) upload() error {
	batch := cmp.Or(d.cfg.Batch, lois.BatchSize)
	in, err := newTUNReader(d.cfg.TUN, batch, lois.Headroom+contract.MaxDatagram)
	if err != nil {
		return err
	}
	var out *wireBatch
	var cloud *unix.RawSockaddrInet4
	if in.batched() && batch > 1 && d.cfg.Cloud.Addr().Unmap().Is4() {
		if out, err = newWireBatch(d.cfg.Wire, batch, 0); err != nil {
			d.cfg.Log.Warn("uploads sent one datagram at a time", "err", err)
			out = nil
		}
		cloud = sockaddr4(d.cfg.Cloud)
	}
	var last int64
	for {
		k, err := in.read()
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		for i := range k {
			pkt, ok := d.hideUpload(in.bufs[i], in.size(i))
			if !ok {
				continue
			}
			if out != nil {
				out.queue(pkt, cloud)
				continue
			}
			if _, err := d.cfg.Wire.WriteToUDPAddrPort(pkt, d.cfg.Cloud); err != nil {
				d.up.inc(contract.ResultIOError)
				continue
			}
			d.up.inc(contract.ResultOK)
		}
		if out != nil && out.nw > 0 {
			sent, failed, err := out.flush()
			d.up[contract.ResultOK].Add(float64(sent))
			if failed > 0 {
				d.up[contract.ResultIOError].Add(float64(failed))
			}
			if err != nil {
				if closed(err) {
					return nil
				}
				return err
			}
		}
		if now := d.clk.now(); now != last { // pools belong to this loop
			last = now
			d.poolGauge()
		}
	}
}

// hideUpload is DI upload for the n-byte packet read into buf[lois.Headroom:]: the datagram
// to send to the CI, or false when the packet was held (parked) or refused (counted).
func (d *Device) hideUpload(buf []byte, n int) ([]byte, bool) {
	off, err := lois.Headroom, error(nil)
	if d.cfg.Plain {
		if _, ok := plainParse(buf[off : off+n]); !ok || [4]byte(buf[off+16:off+20]) != d.cfg.Core.CIP {
			err = lois.ErrNotLOIS
		}
	} else {
		sid := uint16(0)
		if n >= 40 {
			sid = binary.BigEndian.Uint16(buf[off+20+2:]) // dst port; HideUpload refuses IHL ≠ 5
		}
		mu := d.lock()
		mu.Lock()
		if d.pad != nil && n >= 40 && [4]byte(buf[off+16:off+20]) == d.cfg.Core.CIP {
			d.pad.real(buf[off:off+n], time.Now().UnixNano())
		}
		off, err = d.core.HideUpload(buf[:lois.Headroom+n], lois.Headroom, d.clk.now())
		if d.reqc != nil && n >= 40 {
			d.checkLow(sid)
		}
		mu.Unlock()
		if errors.Is(err, lois.ErrExhausted) && d.reqc != nil && d.park.park(buf[lois.Headroom:lois.Headroom+n], nil) {
			return nil, false
		}
	}
	if err != nil {
		d.up.inc(contract.Result(err))
		return nil, false
	}
	return buf[off : lois.Headroom+n], true
}

// download recovers the SIs' packets and writes them to the TUN (spec §3.9 DI download).
func (d *Device) download() error {
	r := receiver{wire: d.cfg.Wire, tun: d.cfg.TUN, plain: d.cfg.Plain, ex: d.ex, table: &d.down, c: d.dn, seen: &d.seen,
		batch: cmp.Or(d.cfg.Batch, lois.BatchSize)}
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
