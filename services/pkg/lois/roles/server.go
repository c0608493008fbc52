package roles

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
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
	// STP, if set, pads each session's downloads (spec §4).
	STP *lois.STPConfig
}

// serverSession is one device session at this SI: its download pools (this replica's
// partition) and the DI's wire address.
type serverSession struct {
	pools lois.Pools
	byID  map[uint16]*lois.Pool
	wire  netip.AddrPort
	pad   *padder // nil without STP; its mu guards pools against the pad loop
}

// Server is a running SI.
type Server struct {
	cfg       ServerConfig
	core      *lois.Server
	up        lockedDVT
	sessions  atomic.Pointer[map[[4]byte]*serverSession] // by DIP (D-22: one session per device address here)
	mine      map[uint16]bool
	installed map[string]bool // sessions, guarded by up.mu
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
	mine := map[uint16]bool{}
	for _, sid := range cfg.Ports {
		mine[sid] = true
	}
	t, err := newTable(cfg.Keys, "up", int64(cfg.Grace/time.Second))
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, core: lois.NewServer(cfg.Core, t, cfg.Ports), mine: mine, installed: map[string]bool{}, ex: exID(cfg.Core)}
	s.up.t = t
	s.sessions.Store(&map[[4]byte]*serverSession{})
	s.stop = make(stopper)
	for _, k := range cfg.Keys {
		if err := s.InstallSession(k); err != nil {
			return nil, err
		}
	}
	cfg.Metrics.Sessions.WithLabelValues("si").Set(float64(len(s.installed)))
	s.upC = cfg.Metrics.counters("si", "up")
	s.dnC = cfg.Metrics.counters("si", "down")
	s.clk.set(time.Now())
	return s, nil
}

// InstallSession installs a session's upload streams for this SI's services and, unless
// k.Replica is negative (a replica outside the record's partition), its download partition
// (Installer). A session installed before is left as it is.
func (s *Server) InstallSession(k *contract.Keys) error {
	s.up.mu.Lock()
	defer s.up.mu.Unlock()
	if s.installed[k.Session] {
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
	s.installed[k.Session] = true
	s.cfg.Metrics.Sessions.WithLabelValues("si").Set(float64(len(s.installed)))
	if k.Replica < 0 {
		return nil
	}
	ss := &serverSession{wire: wire, byID: map[uint16]*lois.Pool{}}
	if s.cfg.STP != nil && !s.cfg.Plain {
		if ss.pad, err = newPadder(*s.cfg.STP); err != nil {
			return err
		}
	}
	for i := range k.Streams {
		if k.Streams[i].Dir != "down" || !s.mine[k.Streams[i].SID] {
			continue
		}
		st, err := k.Streams[i].Core()
		if err != nil {
			return err
		}
		p := ss.byID[st.SID]
		if p == nil {
			p = &lois.Pool{}
			ss.byID[st.SID] = p
			ss.pools.Set(st.SID, p)
		}
		// Only this replica's indices: two replicas never hold one keystream (§3.11).
		p.Add(&st, k.Replicas, k.Replica, st.Expiry-int64(s.cfg.Margin/time.Second))
		clear(st.Key[:])
	}
	// Copy on write: the download loop reads the map without a lock. A session's pools
	// belong to the download loop once published.
	old := *s.sessions.Load()
	next := make(map[[4]byte]*serverSession, len(old)+1)
	for a, v := range old {
		next[a] = v
	}
	next[dip.As4()] = ss
	s.sessions.Store(&next)
	return nil
}

// Run moves packets until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.cfg.Log.Info("server interface running", "sessions", len(*s.sessions.Load()), "services", len(s.cfg.Ports))
	loops := []func() error{s.upload, s.download}
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
					off, err := s.core.HideDownload(buf[:lois.Headroom+n], lois.Headroom, &ss.pools, s.clk.now())
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
}

// upload is SI upload (spec §3.9 Step 2b): recover and deliver to the local stack.
func (s *Server) upload() error {
	r := receiver{wire: s.cfg.Wire, tun: s.cfg.TUN, plain: s.cfg.Plain, ex: s.ex, table: &s.up, c: s.upC, seen: &s.seen}
	return r.run(func(p []byte) (int, error) {
		off, _, err := s.core.RecoverUpload(p, 0)
		return off, err
	})
}

// download is SI download (spec §3.9 Step 3): a server's reply is hidden with this
// replica's partition of the device session's pairs and sent straight to the DI.
func (s *Server) download() error {
	buf := make([]byte, lois.Headroom+contract.MaxDatagram)
	var last int64
	for {
		n, err := s.cfg.TUN.Read(buf[lois.Headroom:])
		if err != nil {
			if closed(err) {
				return nil
			}
			return err
		}
		pkt := buf[lois.Headroom : lois.Headroom+n]
		if n < 20 || pkt[0]>>4 != 4 {
			s.dnC.inc(contract.ResultMalformed)
			continue
		}
		ss := (*s.sessions.Load())[[4]byte(pkt[16:20])]
		if ss == nil {
			s.dnC.inc(contract.ResultUnknownPeer)
			continue
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
		} else if ss.pad != nil {
			ss.pad.mu.Lock()
			if _, ok := s.cfg.Ports[binary.BigEndian.Uint16(pkt[20:])]; ok && n >= 40 {
				ss.pad.real(pkt, time.Now().UnixNano())
			}
			off, err = s.core.HideDownload(buf[:lois.Headroom+n], lois.Headroom, &ss.pools, s.clk.now())
			ss.pad.mu.Unlock()
		} else {
			off, err = s.core.HideDownload(buf[:lois.Headroom+n], lois.Headroom, &ss.pools, s.clk.now())
		}
		if err != nil {
			s.dnC.inc(contract.Result(err))
			continue
		}
		if _, err := s.cfg.Wire.WriteToUDPAddrPort(buf[off:lois.Headroom+n], ss.wire); err != nil {
			s.dnC.inc(contract.ResultIOError)
			continue
		}
		s.dnC.inc(contract.ResultOK)
		if now := s.clk.now(); now != last {
			last = now
			total := 0 // every session and service summed: a service id is never a label
			for _, ss := range *s.sessions.Load() {
				if ss.pad != nil {
					ss.pad.mu.Lock()
				}
				for _, p := range ss.byID {
					total += p.Len()
				}
				if ss.pad != nil {
					ss.pad.mu.Unlock()
				}
			}
			s.cfg.Metrics.Pool.WithLabelValues("down").Set(float64(total))
		}
	}
}
