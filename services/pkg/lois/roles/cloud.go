package roles

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"golang.org/x/sys/unix"
)

// ServerBackend is one SI behind the CI: the address and port its server listens on inside
// the LOIS packets (SIP:P_srv) and the SI's wire address.
type ServerBackend struct {
	SID     uint16
	Backend lois.Backend
	Wire    netip.AddrPort
}

// CloudConfig configures a CI.
type CloudConfig struct {
	Core     lois.Config
	Keys     []*contract.Keys // one per device session
	Backends []ServerBackend
	// FlowKey keys the backend hash; every CI replica must share it (D-16).
	FlowKey [16]byte
	Wire    *net.UDPConn // bound to the CI's wire address
	Grace   time.Duration
	Metrics *Metrics
	Log     *slog.Logger
	// Plain runs the path without LOIS (benchmark baseline, plain.go).
	Plain bool
	// Batch is how many datagrams one recvmmsg reads and one sendmmsg writes, routed
	// together by lois.Cloud.ForwardBatch (their table lookups overlap). 0 is
	// lois.BatchSize; 1 reads one datagram per call and routes it with Forward (the loop
	// before batching, kept as the benchmark's baseline).
	Batch int
}

// Cloud is a running CI.
type Cloud struct {
	cfg   CloudConfig
	core  *lois.Cloud
	table lockedDVT
	wire  map[[4]byte]netip.AddrPort // SIP → SI wire address
	sa    map[[4]byte]*unix.RawSockaddrInet4
	up    counters
	seen  recentIDs
	ex    uint16
	plain plainBackends
	// installed are the session and epoch records in the table (recordKey), sessions how
	// many sessions; guarded by table.mu.
	installed map[string]bool
	sessions  int
}

// InstallSession installs a session's upload streams (Installer); a session installed
// before is left as it is.
func (c *Cloud) InstallSession(k *contract.Keys) error {
	c.table.mu.Lock()
	defer c.table.mu.Unlock()
	key := recordKey(k)
	if c.installed[key] || k.Ready { // READY concerns the SIs' downloads only
		return nil
	}
	if _, err := install(c.table.t, []*contract.Keys{k}, "up", nil); err != nil {
		return err
	}
	c.installed[key] = true
	if !k.Grant {
		c.sessions++
		c.cfg.Metrics.Sessions.WithLabelValues("ci").Set(float64(c.sessions))
	}
	return nil
}

// NewCloud installs the upload streams of every session and the backends' Maglev tables.
func NewCloud(cfg CloudConfig) (*Cloud, error) {
	if len(cfg.Backends) == 0 || cfg.Wire == nil {
		return nil, errors.New("lois cloud: backends and a wire socket are required")
	}
	if cfg.Batch < 0 || cfg.Batch > maxBatch {
		return nil, fmt.Errorf("lois cloud: batch %d: want 0 to %d", cfg.Batch, maxBatch)
	}
	t, err := newTable(cfg.Keys, "up", int64(cfg.Grace/time.Second))
	if err != nil {
		return nil, err
	}
	n, err := install(t, cfg.Keys, "up", nil)
	if err != nil {
		return nil, err
	}
	c := &Cloud{cfg: cfg, core: lois.NewCloud(cfg.Core, t, cfg.FlowKey), wire: map[[4]byte]netip.AddrPort{}, ex: exID(cfg.Core),
		sa:        map[[4]byte]*unix.RawSockaddrInet4{},
		installed: map[string]bool{}}
	for _, k := range cfg.Keys {
		c.installed[recordKey(k)] = true
	}
	c.sessions = len(c.installed)
	c.table.t = t
	bySID := plainBackends{}
	c.plain = bySID
	for _, b := range cfg.Backends {
		bySID[b.SID] = append(bySID[b.SID], b.Backend)
		if w, ok := c.wire[b.Backend.IP]; ok && w != b.Wire {
			return nil, errors.New("lois cloud: one server address with two wire addresses")
		}
		c.wire[b.Backend.IP] = b.Wire
		if !b.Wire.Addr().Unmap().Is4() {
			return nil, errors.New("lois cloud: a server's wire address must be IPv4")
		}
		c.sa[b.Backend.IP] = sockaddr4(b.Wire)
	}
	for sid, bs := range bySID {
		mg, err := lois.NewMaglev(bs)
		if err != nil {
			return nil, err
		}
		c.core.SetBackends(sid, mg)
	}
	c.up = cfg.Metrics.counters("ci", "up")
	cfg.Metrics.Sessions.WithLabelValues("ci").Set(float64(c.sessions))
	cfg.Log.Info("cloud interface installed", "sessions", len(cfg.Keys), "entries", n, "services", len(bySID))
	return c, nil
}

// Run forwards packets until ctx ends.
func (c *Cloud) Run(ctx context.Context) error {
	loop := c.forward
	if c.cfg.Batch != 1 {
		b, err := newWireBatch(c.cfg.Wire, cmp.Or(c.cfg.Batch, lois.BatchSize), contract.MaxDatagram)
		if err != nil {
			c.cfg.Log.Warn("wire read one datagram at a time", "err", err)
		} else {
			loop = func() error { return c.forwardBatch(b) }
		}
	}
	return run(ctx, c.cfg.Log, []io.Closer{c.cfg.Wire}, c.tick, loop)
}

func (c *Cloud) tick(now time.Time) { c.table.gc(now.Unix(), c.cfg.Metrics, "up") }

// forward is CI upload (spec §3.9 Step 2): lookup, source recovered in locals only, the
// destination rewritten, the packet sent on to the SI that serves the chosen backend.
func (c *Cloud) forward() error {
	buf := make([]byte, contract.MaxDatagram)
	for {
		n, _, err := c.cfg.Wire.ReadFromUDPAddrPort(buf)
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		pkt := buf[:n]
		if c.cfg.Plain {
			c.forwardPlain(pkt)
			continue
		}
		id, _ := lois.ParseID(pkt, c.ex)
		c.table.mu.Lock()
		be, err := c.core.Forward(pkt)
		c.table.mu.Unlock()
		if err != nil {
			c.up.inc(rejection(err, id, &c.seen))
			continue
		}
		c.seen.add(id)
		to, ok := c.wire[be.IP]
		if !ok {
			c.up.inc(contract.ResultUnknownSID)
			continue
		}
		if _, err := c.cfg.Wire.WriteToUDPAddrPort(pkt, to); err != nil {
			c.up.inc(contract.ResultIOError)
			continue
		}
		c.up.inc(contract.ResultOK)
	}
}

// forwardBatch is forward over bursts: one recvmmsg reads up to a batch of datagrams, one
// lois.Cloud.ForwardBatch routes them (their lookups' cache misses overlap), one sendmmsg
// sends them on to their SIs. Results are counted per packet as forward counts them.
func (c *Cloud) forwardBatch(b *wireBatch) error {
	n := len(b.bufs)
	pkts, ids := make([][]byte, n), make([]uint64, n)
	out, errs := make([]lois.Backend, n), make([]error, n)
	for {
		k, err := b.read()
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		for i := range k {
			pkts[i] = b.bufs[i][:b.size(i)]
		}
		if c.cfg.Plain {
			for i := range k {
				if be, ok := c.routePlain(pkts[i]); ok {
					b.queue(pkts[i], c.sa[be.IP])
				}
			}
		} else {
			for i := range k {
				ids[i], _ = lois.ParseID(pkts[i], c.ex)
			}
			c.table.mu.Lock()
			c.core.ForwardBatch(pkts[:k], out, errs)
			c.table.mu.Unlock()
			for i := range k {
				if errs[i] != nil {
					c.up.inc(rejection(errs[i], ids[i], &c.seen))
					continue
				}
				c.seen.add(ids[i])
				sa, ok := c.sa[out[i].IP]
				if !ok {
					c.up.inc(contract.ResultUnknownSID)
					continue
				}
				b.queue(pkts[i], sa)
			}
		}
		sent, failed, err := b.flush()
		c.up[contract.ResultOK].Add(float64(sent))
		if failed > 0 {
			c.up[contract.ResultIOError].Add(float64(failed))
		}
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
	}
}

// forwardPlain is the baseline's L4 NAT (plain.go).
func (c *Cloud) forwardPlain(pkt []byte) {
	be, ok := c.routePlain(pkt)
	if !ok {
		return
	}
	if _, err := c.cfg.Wire.WriteToUDPAddrPort(pkt, c.wire[be.IP]); err != nil {
		c.up.inc(contract.ResultIOError)
		return
	}
	c.up.inc(contract.ResultOK)
}

// routePlain picks the plain path's backend and rewrites the destination (counting a packet
// it cannot route).
func (c *Cloud) routePlain(pkt []byte) (lois.Backend, bool) {
	ihl, ok := plainParse(pkt)
	if !ok || [4]byte(pkt[16:20]) != c.cfg.Core.CIP {
		c.up.inc(contract.ResultNotLOIS)
		return lois.Backend{}, false
	}
	be, ok := c.plain.pick(pkt, ihl)
	if !ok {
		c.up.inc(contract.ResultUnknownSID)
		return lois.Backend{}, false
	}
	plainRewrite(pkt, ihl, 16, 2, be.IP, be.Port)
	return be, true
}
