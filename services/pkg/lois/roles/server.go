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

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"golang.org/x/sys/unix"
)

// ServerConfig configures an SI.
type ServerConfig struct {
	Core lois.Config
	Keys []*contract.Keys // one per device session; each names this replica's partition
	// Ports maps the port a local server listens on (P_srv) to its service id.
	Ports map[uint16]uint16
	// TUN leads to the real servers: recovered uploads are written to it, and the routes
	// to device addresses point into it, so the servers' replies are read from it.
	TUN     io.ReadWriteCloser
	Wire    *net.UDPConn // bound to the SI's wire address (uploads from CI arrive here)
	Margin  time.Duration
	Grace   time.Duration
	Metrics *Metrics
	Log     *slog.Logger
	// Plain runs the path without LOIS (benchmark baseline, plain.go).
	Plain bool
	// Batch is how many replies the download loop reads from the TUN per wait (one read
	// each: as many as are queued) and sends in one sendmmsg, and how many upload datagrams
	// one recvmmsg reads. 0 is lois.BatchSize; 1 moves one packet per system call (the loops
	// before batching). An in-memory TUN is read one packet at a time.
	Batch int
	// STP, if set, pads each session's downloads (spec §4).
	STP *lois.STPConfig
	// LowWater, if set, announces that a session's download pool of a service fell below
	// its low-water mark (spec §3.12; the daemon publishes contract.SubjectLowWater). Once
	// per pool until an epoch is installed, again after LowWaterRetry.
	LowWater      func(session string, sid uint16) error
	LowWaterRetry time.Duration // default 5 s
	// LowWaterMin is the floor of the low-water mark (default 64, spec §3.12).
	LowWaterMin int
	// ExhaustQueue is exhaust_queue_ms (default 50 ms, spec §3.10): with LowWater set, a
	// reply that finds its pool empty is held that long for the download grant, then dropped
	// and counted exhausted.
	ExhaustQueue time.Duration
}

// serverSession is one device session at this SI: its download pools (this replica's
// partition) and the DI's wire address.
type serverSession struct {
	session string
	pools   lois.Pools
	byID    map[uint16]*lois.Pool
	wire    netip.AddrPort
	sa      *unix.RawSockaddrInet4 // wire for sendmmsg; nil if not IPv4
	pad     *padder                // nil without STP; its mu then guards the pools (lock)
	mu      sync.Mutex
	low     map[uint16]int64 // unix second a low-water event went out, by SID; guarded by lock
	list    []sidPool        // the pools again, for the per-packet low-water check (no map)
	dip     [4]byte
	// waiting: an AwaitReady session whose downloads wait for the DI's READY record (it is
	// not yet the device's session in s.sessions); guarded by s.up.mu.
	waiting bool
}

type sidPool struct {
	sid uint16
	p   *lois.Pool
}

// lock is the mutex of the session's pools: the pad's when the pad loop shares them.
func (ss *serverSession) lock() *sync.Mutex {
	if ss.pad != nil {
		return &ss.pad.mu
	}
	return &ss.mu
}

// lowEvent is one low-water announcement for the low-water loop.
type lowEvent struct {
	session string
	sid     uint16
}

// Server is a running SI.
type Server struct {
	cfg       ServerConfig
	core      *lois.Server
	up        lockedDVT
	sessions  atomic.Pointer[map[[4]byte]*serverSession] // by DIP (D-22: one session per device address here)
	mine      map[uint16]bool
	installed map[string]bool // session and epoch records (recordKey), guarded by up.mu
	bySession map[string]*serverSession
	// awaiting counts, by device address, sessions installed and waiting for their DI's
	// READY, guarded by up.mu: a reply to such a device is held, not dropped.
	awaiting  map[[4]byte]int
	nSessions int
	lowc      chan lowEvent
	park      *parker // with LowWater: replies held while their pool is empty
	upC, dnC  counters
	seen      recentIDs
	clk       clock
	ex        uint16
	stop      stopper
}

// NewServer installs the upload streams of the SI's services and its download partition
// of each session in keys (none: sessions come later through InstallSession).
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Ports) == 0 || cfg.TUN == nil || cfg.Wire == nil {
		return nil, errors.New("lois server: service ports, tun and a wire socket are required")
	}
	if cfg.Batch < 0 || cfg.Batch > maxBatch {
		return nil, fmt.Errorf("lois server: batch %d: want 0 to %d", cfg.Batch, maxBatch)
	}
	mine := map[uint16]bool{}
	for _, sid := range cfg.Ports {
		mine[sid] = true
	}
	t, err := newTable(cfg.Keys, "up", int64(cfg.Grace/time.Second))
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, core: lois.NewServer(cfg.Core, t, cfg.Ports), mine: mine, installed: map[string]bool{},
		bySession: map[string]*serverSession{}, awaiting: map[[4]byte]int{}, lowc: make(chan lowEvent, 64), ex: exID(cfg.Core)}
	if s.cfg.LowWaterRetry <= 0 {
		s.cfg.LowWaterRetry = 5 * time.Second
	}
	if s.cfg.LowWaterMin <= 0 {
		s.cfg.LowWaterMin = lois.LowWaterMark(0)
	}
	if s.cfg.ExhaustQueue <= 0 {
		s.cfg.ExhaustQueue = DefaultExhaustQueue
	}
	s.up.t = t
	s.sessions.Store(&map[[4]byte]*serverSession{})
	s.stop = make(stopper)
	for _, k := range cfg.Keys {
		if err := s.InstallSession(k); err != nil {
			return nil, err
		}
	}
	cfg.Metrics.Sessions.WithLabelValues("si").Set(float64(s.nSessions))
	s.upC = cfg.Metrics.counters("si", "up")
	s.dnC = cfg.Metrics.counters("si", "down")
	cfg.Metrics.Cover.WithLabelValues("si") // at 0 from the start: no cover sent without STP
	if cfg.LowWater != nil && !cfg.Plain {
		s.park = newParker(s.cfg.ExhaustQueue, cfg.Metrics.ExhaustQueued.WithLabelValues("si"), s.sendParked,
			func(*parked) { s.dnC.inc(contract.ResultExhausted) })
	}
	s.clk.set(time.Now())
	return s, nil
}

// InstallSession installs a session's upload streams for this SI's services and its
// download partition (Installer); with k.Replica negative (a replica outside the record's
// partition) the session's download pools start empty and fill from the first epoch granted
// with this replica in its partition. A session installed before is left as it is.
func (s *Server) InstallSession(k *contract.Keys) error {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	key := recordKey(k)
	if s.installed[key] {
		return nil
	}
	if k.Grant {
		return s.installGrant(k, key)
	}
	if k.Ready {
		s.installed[key] = true
		if ss := s.bySession[k.Session]; ss != nil && ss.waiting {
			ss.waiting = false
			if s.awaiting[ss.dip]--; s.awaiting[ss.dip] <= 0 {
				delete(s.awaiting, ss.dip)
			}
			s.activate(ss)
		}
		return nil
	}
	dip, err := netip.ParseAddr(k.DeviceIP)
	wire, werr := netip.ParseAddrPort(k.DeviceWire)
	if err != nil || werr != nil || !dip.Is4() {
		return fmt.Errorf("lois server: session %s needs an IPv4 device address and its wire address", k.Session)
	}
	if _, err := install(s.up.t, []*contract.Keys{k}, "up", func(sid uint16) bool { return s.mine[sid] }); err != nil {
		return err
	}
	s.installed[key] = true
	s.nSessions++
	s.cfg.Metrics.Sessions.WithLabelValues("si").Set(float64(s.nSessions))
	ss := &serverSession{session: k.Session, wire: wire, byID: map[uint16]*lois.Pool{}, low: map[uint16]int64{}, dip: dip.As4(),
		waiting: k.AwaitReady}
	if wire.Addr().Unmap().Is4() {
		ss.sa = sockaddr4(wire)
	}
	if s.cfg.STP != nil && !s.cfg.Plain {
		if ss.pad, err = newPadder(*s.cfg.STP); err != nil {
			return err
		}
	}
	for i := range k.Streams {
		if k.Streams[i].Dir != "down" || !s.mine[k.Streams[i].SID] {
			continue
		}
		if k.Replica < 0 {
			// Outside the record's partition (a replica added since the session opened): an
			// empty pool, below its low-water mark, so this replica's first reply to the
			// device asks for an epoch, which the registrar partitions over the replicas of
			// now (§3.11: a change of R takes effect at the next epoch).
			ss.emptyPool(k.Streams[i].SID, s.cfg.LowWaterMin)
			continue
		}
		st, err := k.Streams[i].Core()
		if err != nil {
			return err
		}
		ss.add(&st, k.Replicas, k.Replica, s.cfg.Margin, s.cfg.LowWaterMin)
		clear(st.Key[:])
	}
	s.bySession[k.Session] = ss
	if ss.waiting {
		s.awaiting[ss.dip]++
	} else {
		s.activate(ss)
	}
	return nil
}

// awaitingReady reports whether a session of device dip waits for its READY.
func (s *Server) awaitingReady(dip [4]byte) bool {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	return s.awaiting[dip] > 0
}

// activate makes ss the device's session for downloads (the caller holds s.up.mu): copy on
// write, as the download loop reads the map without a lock; a session's pools belong to the
// download loop once published. Replies held for the device's previous session (a full rekey)
// go out with the new one's keystreams.
func (s *Server) activate(ss *serverSession) {
	old := *s.sessions.Load()
	next := make(map[[4]byte]*serverSession, len(old)+1)
	for a, v := range old {
		next[a] = v
	}
	next[ss.dip] = ss
	s.sessions.Store(&next)
	if s.park != nil {
		s.park.granted()
	}
}

// Run moves packets until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.cfg.Log.Info("server interface running", "sessions", len(*s.sessions.Load()), "services", len(s.cfg.Ports))
	loops := []func() error{s.upload, s.download}
	if s.park != nil {
		loops = append(loops, s.lowWaterLoop, func() error { return s.park.loop(s.stop) })
	}
	if s.cfg.STP != nil && !s.cfg.Plain {
		loops = append(loops, s.padLoop)
	}
	return run(ctx, s.cfg.Log, []io.Closer{s.cfg.TUN, s.cfg.Wire, s.stop}, s.tick, loops...)
}

// padLoop sends every session's download cover packets each Δ (spec §4: STP runs on the
// server for download).
func (s *Server) padLoop() error {
	t := time.NewTicker(s.cfg.STP.Tick)
	defer t.Stop()
	buf := make([]byte, lois.Headroom+1500)
	for {
		select {
		case <-s.stop:
			return nil
		case now := <-t.C:
			for _, ss := range *s.sessions.Load() {
				n := ss.pad.tick(now, buf, func(n int) bool {
					cnow := s.clk.now()
					off, err := s.core.HideDownload(buf[:lois.Headroom+n], lois.Headroom, &ss.pools, cnow)
					// Cover packets draw on the session's pools too, so they announce low
					// water as replies do (the DI's pad loop likewise asks for epochs).
					if s.cfg.LowWater != nil {
						s.checkLow(ss, cnow) // tick holds the pools' lock (ss.lock() is the padder's)
					}
					if err != nil {
						s.dnC.inc(contract.Result(err))
						return false
					}
					if _, err := s.cfg.Wire.WriteToUDPAddrPort(buf[off:lois.Headroom+n], ss.wire); err != nil {
						s.dnC.inc(contract.ResultIOError)
						return false
					}
					s.dnC.inc(contract.ResultPadSent)
					return true
				})
				s.cfg.Metrics.Cover.WithLabelValues("si").Add(float64(n))
			}
		}
	}
}

func (s *Server) tick(now time.Time) {
	s.clk.set(now)
	s.up.gc(now.Unix(), s.cfg.Metrics, "up")
	// Measured rates set the low-water marks; the pool gauge sums every session and service
	// (a service id is never a label).
	total := 0
	for _, ss := range *s.sessions.Load() {
		mu := ss.lock()
		mu.Lock()
		for _, p := range ss.byID {
			p.Measure(now.Unix(), s.cfg.LowWaterMin)
			total += p.Len()
		}
		mu.Unlock()
	}
	// On the maintenance tick, not only when replies flow: an idle SI's pools are reported
	// too (the operator reads them into status.server.downloadKeystreams).
	s.cfg.Metrics.Pool.WithLabelValues("down").Set(float64(total))
}

// upload is SI upload (spec §3.9 Step 2b): recover and deliver to the local stack.
func (s *Server) upload() error {
	r := receiver{wire: s.cfg.Wire, tun: s.cfg.TUN, plain: s.cfg.Plain, ex: s.ex, table: &s.up, c: s.upC, seen: &s.seen,
		batch: cmp.Or(s.cfg.Batch, lois.BatchSize)}
	return r.run(func(p []byte) (int, error) {
		off, _, err := s.core.RecoverUpload(p, 0)
		return off, err
	})
}

// download is SI download (spec §3.9 Step 3): a server's reply is hidden with this
// replica's partition of the device session's pairs and sent straight to the DI.
func (s *Server) download() error {
	batch := cmp.Or(s.cfg.Batch, lois.BatchSize)
	in, err := newTUNReader(s.cfg.TUN, batch, lois.Headroom+contract.MaxDatagram)
	if err != nil {
		return err
	}
	var out *wireBatch
	if in.batched() && batch > 1 {
		if out, err = newWireBatch(s.cfg.Wire, batch, 0); err != nil {
			s.cfg.Log.Warn("downloads sent one datagram at a time", "err", err)
			out = nil
		}
	}
	for {
		k, err := in.read()
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		for i := range k {
			pkt, ss, ok := s.hideReply(in.bufs[i], in.size(i))
			if !ok {
				continue
			}
			if out != nil && ss.sa != nil {
				out.queue(pkt, ss.sa)
				continue
			}
			if _, err := s.cfg.Wire.WriteToUDPAddrPort(pkt, ss.wire); err != nil {
				s.dnC.inc(contract.ResultIOError)
				continue
			}
			s.dnC.inc(contract.ResultOK)
		}
		if out != nil && out.nw > 0 {
			sent, failed, err := out.flush()
			s.dnC[contract.ResultOK].Add(float64(sent))
			if failed > 0 {
				s.dnC[contract.ResultIOError].Add(float64(failed))
			}
			if err != nil {
				if closed(err) {
					return nil
				}
				return err
			}
		}
	}
}

// hideReply is SI download for the n-byte packet read into buf[lois.Headroom:]: the
// packet to send and the session whose device gets it, or false when the packet was held
// (parked) or refused (counted).
func (s *Server) hideReply(buf []byte, n int) ([]byte, *serverSession, bool) {
	pkt := buf[lois.Headroom : lois.Headroom+n]
	if n < 20 || pkt[0]>>4 != 4 {
		s.dnC.inc(contract.ResultMalformed)
		return nil, nil, false
	}
	ss := (*s.sessions.Load())[[4]byte(pkt[16:20])]
	if ss == nil {
		// A device whose session waits for its READY: held until it comes (or dropped
		// as exhausted at the deadline), not lost. Off the per-packet path: misses only.
		if s.park != nil && s.awaitingReady([4]byte(pkt[16:20])) && s.park.park(pkt, nil) {
			return nil, nil, false
		}
		s.dnC.inc(contract.ResultUnknownPeer)
		return nil, nil, false
	}
	off, err := lois.Headroom, error(nil)
	if s.cfg.Plain {
		if ihl, ok := plainParse(pkt); !ok {
			err = lois.ErrMalformed
		} else if sid, ok := s.cfg.Ports[binary.BigEndian.Uint16(pkt[ihl:])]; !ok {
			err = lois.ErrUnknownSID
		} else {
			plainRewrite(pkt, ihl, 12, 0, s.cfg.Core.CIP, sid)
		}
	} else {
		mu := ss.lock()
		mu.Lock()
		srvPort := binary.BigEndian.Uint16(pkt[20:])
		if ss.pad != nil && n >= 40 {
			if _, ok := s.cfg.Ports[srvPort]; ok {
				ss.pad.real(pkt, time.Now().UnixNano())
			}
		}
		now := s.clk.now()
		off, err = s.core.HideDownload(buf[:lois.Headroom+n], lois.Headroom, &ss.pools, now)
		if s.cfg.LowWater != nil {
			s.checkLow(ss, now)
		}
		mu.Unlock()
		if errors.Is(err, lois.ErrExhausted) && s.park != nil && s.park.park(pkt, ss) {
			return nil, nil, false
		}
	}
	if err != nil {
		s.dnC.inc(contract.Result(err))
		return nil, nil, false
	}
	return buf[off : lois.Headroom+n], ss, true
}

// emptyPool gives the session a pool for sid with no pairs (the caller holds the pools'
// lock once the session is published).
func (ss *serverSession) emptyPool(sid uint16, lowMin int) {
	if ss.byID[sid] != nil {
		return
	}
	p := &lois.Pool{LowWater: lowMin}
	ss.byID[sid] = p
	ss.pools.Set(sid, p)
	ss.list = append(ss.list, sidPool{sid, p})
}

// add puts this replica's partition of a download stream into the session's pool of its
// service (the caller holds the pools' lock once the session is published).
func (ss *serverSession) add(st *lois.Stream, replicas, replica int, margin time.Duration, lowMin int) {
	p := ss.byID[st.SID]
	if p == nil {
		p = &lois.Pool{}
		ss.byID[st.SID] = p
		ss.pools.Set(st.SID, p)
		ss.list = append(ss.list, sidPool{st.SID, p})
	}
	// Only this replica's indices: two replicas never hold one keystream (§3.11).
	p.Add(st, replicas, replica, st.Expiry-int64(margin/time.Second))
	p.LowWater = max(p.LowWater, lowMin)
	delete(ss.low, st.SID) // a new epoch: the next low-water event may go out
}

// installGrant installs an epoch record of an open session (spec §3.12; the caller holds
// up.mu): upload streams of this SI's services go into its table; a download stream goes into
// the session's pool — the activation, which the registrar publishes only after the DI
// acknowledged the grant.
func (s *Server) installGrant(k *contract.Keys, key string) error {
	if _, err := install(s.up.t, []*contract.Keys{k}, "up", func(sid uint16) bool { return s.mine[sid] }); err != nil {
		return err
	}
	s.installed[key] = true
	ss := s.bySession[k.Session]
	if ss == nil || k.Replica < 0 {
		return nil // outside the partition, or a session this SI never held
	}
	for i := range k.Streams {
		if k.Streams[i].Dir != "down" || !s.mine[k.Streams[i].SID] {
			continue
		}
		st, err := k.Streams[i].Core()
		if err != nil {
			return err
		}
		mu := ss.lock()
		mu.Lock()
		ss.add(&st, k.Replicas, k.Replica, s.cfg.Margin, s.cfg.LowWaterMin)
		mu.Unlock()
		clear(st.Key[:])
		s.cfg.Metrics.EpochsGranted.WithLabelValues("si", "down").Inc()
		if s.park != nil {
			s.park.granted()
		}
	}
	return nil
}

// lowWaterLoop sends the download loop's low-water events (spec §3.12) off the packet path.
func (s *Server) lowWaterLoop() error {
	for {
		select {
		case <-s.stop:
			return nil
		case e := <-s.lowc:
			if err := s.cfg.LowWater(e.session, e.sid); err != nil {
				s.cfg.Log.Warn("low-water event not sent", "err", err)
				continue
			}
			s.cfg.Metrics.EpochsRequested.WithLabelValues("si", "down").Inc()
		}
	}
}

// checkLow queues a low-water event for each of the session's pools that fell below its
// mark with no event outstanding (the caller holds the session's pools lock). A session has
// a few services: the walk is a few comparisons, no map unless a pool is low.
func (s *Server) checkLow(ss *serverSession, now int64) {
	for _, sp := range ss.list {
		if !sp.p.NeedsReplenish() {
			continue
		}
		if at, ok := ss.low[sp.sid]; ok && now-at < int64(s.cfg.LowWaterRetry/time.Second) {
			continue
		}
		select {
		case s.lowc <- lowEvent{ss.session, sp.sid}:
			ss.low[sp.sid] = now
		default:
		}
	}
}

// sendParked hides and sends a held reply; false if its pool is still empty.
func (s *Server) sendParked(pk *parked) bool {
	// The device's session now: a full rekey may have replaced the one the reply was held for,
	// and a reply held for a session awaiting its READY has none yet.
	ss := (*s.sessions.Load())[[4]byte(pk.buf[lois.Headroom+16:lois.Headroom+20])]
	if ss == nil {
		return false
	}
	mu := ss.lock()
	mu.Lock()
	off, err := s.core.HideDownload(pk.buf[:lois.Headroom+pk.n], lois.Headroom, &ss.pools, s.clk.now())
	mu.Unlock()
	if errors.Is(err, lois.ErrExhausted) {
		return false
	}
	if err != nil {
		s.dnC.inc(contract.Result(err))
		return true
	}
	if _, err := s.cfg.Wire.WriteToUDPAddrPort(pk.buf[off:lois.Headroom+pk.n], ss.wire); err != nil {
		s.dnC.inc(contract.ResultIOError)
		return true
	}
	s.dnC.inc(contract.ResultOK)
	return true
}
