package lois

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
)

// Config is what every role of one cloud agrees on.
type Config struct {
	CIP         [4]byte // the unified cloud address
	UnifiedPort uint16  // U; 0 means DefaultUnifiedPort
	ExID        uint16  // option ExID; 0 means DefaultExID
	// PaperMode leaves IP ID, TTL and TCP options as the stack wrote them and hides only the
	// six classic flags (MASK 0x3F). The default (hardened) normalises them (D-10, D-11).
	PaperMode bool
	// MTU bounds the MSS a hardened SYN may announce: MTU − 40 − 12 (D-10). 0 means 1500.
	MTU int
}

func (c *Config) fill() {
	if c.UnifiedPort == 0 {
		c.UnifiedPort = DefaultUnifiedPort
	}
	if c.ExID == 0 {
		c.ExID = DefaultExID
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
}

func (c *Config) mask() byte {
	if c.PaperMode {
		return FlagMaskPaper
	}
	return FlagMaskHardened
}

// normaliser rewrites the fields the paper leaves linkable (D-10, D-11): a fresh random IP
// ID with DF set, TTL 64, Timestamps and SACK options replaced by NOPs (dropping them in the
// SYN keeps them from being negotiated, which removes the TSval linker), and the MSS of a SYN
// clamped so that the packets still fit the MTU with the 12-byte option.
type normaliser struct {
	rnd    *mrand.ChaCha8
	maxMSS uint16
}

func newNormaliser(mtu int) normaliser {
	var seed [32]byte
	crand.Read(seed[:])
	return normaliser{rnd: mrand.NewChaCha8(seed), maxMSS: uint16(mtu - fixedHdr - OptionLen)}
}

// apply leaves the TCP checksum to the caller's single update (hide).
func (n *normaliser) apply(pkt []byte, tcpHdr int) error {
	opts := pkt[tcpOptions : ipHdrLen+tcpHdr]
	syn := pkt[tcpFlags]&flagSYN != 0
	for i := 0; i < len(opts); {
		switch k := opts[i]; k {
		case 0: // end of option list
			i = len(opts)
			continue
		case 1:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			return ErrMalformed
		}
		l := int(opts[i+1])
		switch opts[i] {
		case 2: // MSS
			if syn && l == 4 && binary.BigEndian.Uint16(opts[i+2:]) > n.maxMSS {
				binary.BigEndian.PutUint16(opts[i+2:], n.maxMSS)
			}
		case 4, 5, 8: // SACK-permitted, SACK, Timestamps
			for j := i; j < i+l; j++ {
				opts[j] = 1
			}
		}
		i += l
	}
	binary.BigEndian.PutUint16(pkt[ipID:], uint16(n.rnd.Uint64()))
	binary.BigEndian.PutUint16(pkt[ipFlags:], 0x4000) // DF, no fragment
	pkt[ipTTL] = NormalTTL
	return nil
}

// Device is LOIS-DI for one cloud (spec §3.9, §7.4): it hides upload headers with pairs from
// its per-service pools and recovers download headers through its download DVT.
type Device struct {
	cfg  Config
	Up   Pools // by SID
	Down *DVT
	norm normaliser
}

// NewDevice returns a DI for the cloud of cfg with empty pools and download table.
func NewDevice(cfg Config, down *DVT) *Device {
	cfg.fill()
	return &Device{cfg: cfg, Down: down, norm: newNormaliser(cfg.MTU)}
}

// HideUpload protects the packet buf[off:] in place (DI upload, Step 1) and returns its new
// offset, off − OptionLen. Packets not addressed to CIP give ErrNotLOIS (the caller applies
// the pass/deny policy, D-13); an empty pool gives ErrExhausted and leaves the packet untouched,
// so the caller may queue it and call again (D-20). The pair is taken before the packet is
// normalised, so a packet refused for malformed options costs one keystream, never a reuse.
func (d *Device) HideUpload(buf []byte, off int, now int64) (int, error) {
	pkt := buf[off:]
	th, err := parse(pkt)
	if err != nil {
		return off, err
	}
	if [4]byte(pkt[ipDst:ipDst+4]) != d.cfg.CIP {
		return off, ErrNotLOIS
	}
	if off < Headroom {
		return off, ErrNoHeadroom
	}
	if th-tcpFixed > MaxOrigOptions {
		return off, ErrNoRoom
	}
	pool := d.Up.Get(binary.BigEndian.Uint16(pkt[tcpDport:]))
	if pool == nil {
		return off, ErrUnknownSID
	}
	p, ok := pool.Pop(now)
	if !ok {
		return off, ErrExhausted
	}
	optLen := 0
	if !d.cfg.PaperMode {
		optLen = th - tcpFixed
	}
	old := tcpHeadSum(pkt, pkt[tcpOptions:tcpOptions+optLen])
	if !d.cfg.PaperMode {
		if err := d.norm.apply(pkt, th); err != nil {
			return off, err
		}
	}
	return hide(buf, off, &p, tcpSport, tcpDport, d.cfg.UnifiedPort, d.cfg.mask(), d.cfg.ExID, old, optLen), nil
}

// RecoverDownload restores the packet buf[off:] (DI download) and returns its new offset,
// off + OptionLen, and the service it came from. Unknown, consumed and expired ids give
// ErrUnknownID; a cover packet is recovered and reported as ErrPad, to be dropped.
func (d *Device) RecoverDownload(buf []byte, off int) (int, uint16, error) {
	id, err := ParseID(buf[off:], d.cfg.ExID)
	if err != nil {
		return off, 0, err
	}
	ks, sid, ok := d.Down.Take(id)
	if !ok {
		return off, 0, ErrUnknownID
	}
	return d.recoverWith(buf, off, &ks, sid)
}

func (d *Device) recoverWith(buf []byte, off int, ks *[16]byte, sid uint16) (int, uint16, error) {
	n := unhide(buf, off, ks, tcpDport, d.cfg.mask(), tcpSport, sid)
	pkt := buf[n:]
	if pkt[tcpFlags]&PadMarker == PadMarker {
		return n, sid, ErrPad
	}
	return n, sid, nil
}

// RecoverDownloadAny is DI download for a device of several clouds: the source address is
// encrypted, so each cloud's table is probed in turn (spec §3.9 multi-cloud).
func RecoverDownloadAny(clouds []*Device, buf []byte, off int) (int, int, uint16, error) {
	for i, d := range clouds {
		id, err := ParseID(buf[off:], d.cfg.ExID)
		if err != nil {
			return off, -1, 0, err
		}
		if ks, sid, ok := d.Down.Take(id); ok {
			n, sid, err := d.recoverWith(buf, off, &ks, sid)
			return n, i, sid, err
		}
	}
	return off, -1, 0, ErrUnknownID
}

// Backend is a server a CI forwards to.
type Backend struct {
	IP   [4]byte
	Port uint16
}

// Cloud is LOIS-CI (Step 2): it finds the keystream by id, decrypts the source address and
// port into locals only, picks the backend by the decrypted 5-tuple and rewrites only the
// destination. The packet keeps its ciphertext fields and the option for SI.
type Cloud struct {
	cfg      Config
	Table    *DVT
	backends bySID[*Maglev]
	flowKey  sipKey
}

// NewCloud returns a CI over table. flowKey keys the backend hash; every CI replica must use
// the same one, because ECMP spreads a flow's packets over replicas (D-16).
func NewCloud(cfg Config, table *DVT, flowKey [16]byte) *Cloud {
	cfg.fill()
	return &Cloud{cfg: cfg, Table: table,
		flowKey: sipKey{binary.LittleEndian.Uint64(flowKey[:8]), binary.LittleEndian.Uint64(flowKey[8:])}}
}

// SetBackends installs the Maglev table of service sid.
func (c *Cloud) SetBackends(sid uint16, mg *Maglev) { c.backends.set(sid, mg) }

// Forward routes the packet pkt in place and returns the backend it now addresses.
func (c *Cloud) Forward(pkt []byte) (Backend, error) {
	id, err := ParseID(pkt, c.cfg.ExID)
	if err != nil {
		return Backend{}, err
	}
	if [4]byte(pkt[ipDst:ipDst+4]) != c.cfg.CIP || binary.BigEndian.Uint16(pkt[tcpDport:]) != c.cfg.UnifiedPort {
		return Backend{}, ErrNotLOIS
	}
	ks, sid, loc, ok := c.Table.Lookup(id)
	if !ok {
		return Backend{}, ErrUnknownID
	}
	return c.route(pkt, &ks, sid, loc)
}

// route finishes Forward once the keystream is found.
func (c *Cloud) route(pkt []byte, ks *[16]byte, sid uint16, loc Loc) (Backend, error) {
	mg := c.backends.get(sid)
	if mg == nil {
		return Backend{}, ErrUnknownSID
	}
	// The plaintext source never leaves these locals (spec §3.1 Step 2).
	src := binary.BigEndian.Uint32(pkt[ipSrc:]) ^ binary.BigEndian.Uint32(ks[0:])
	sport := binary.BigEndian.Uint16(pkt[tcpSport:]) ^ binary.BigEndian.Uint16(ks[4:])
	h := c.flowKey.sum64(uint64(src)<<32 | uint64(sport)<<16 | uint64(sid))
	be := mg.Pick(h)
	old := tcpHeadSum(pkt, nil)
	copy(pkt[ipDst:], be.IP[:])
	binary.BigEndian.PutUint16(pkt[tcpDport:], be.Port)
	adjustTCP(pkt, old, tcpHeadSum(pkt, nil))
	setIPChecksum(pkt)
	c.Table.Consume(loc)
	return be, nil
}

// Server is LOIS-SI (Steps 2b and 3): it recovers upload headers through its DVT (its own
// services' entries) and hides download headers with this replica's partition of the
// session's download pairs.
type Server struct {
	cfg   Config
	Up    *DVT
	sidOf bySID[uint32] // P_srv → SID + 1 (0: not a LOIS service)
	norm  normaliser
}

// NewServer returns an SI whose services listen on the ports of ports (P_srv → SID).
func NewServer(cfg Config, up *DVT, ports map[uint16]uint16) *Server {
	cfg.fill()
	s := &Server{cfg: cfg, Up: up, norm: newNormaliser(cfg.MTU)}
	for port, sid := range ports {
		s.sidOf.set(port, uint32(sid)+1)
	}
	return s
}

// RecoverUpload restores buf[off:] for the local stack and returns its new offset and the
// service. A cover packet is recovered and reported as ErrPad, to be dropped.
func (s *Server) RecoverUpload(buf []byte, off int) (int, uint16, error) {
	id, err := ParseID(buf[off:], s.cfg.ExID)
	if err != nil {
		return off, 0, err
	}
	ks, sid, ok := s.Up.Take(id)
	if !ok {
		return off, 0, ErrUnknownID
	}
	n := unhide(buf, off, &ks, tcpSport, s.cfg.mask(), 0, 0)
	if buf[n+tcpFlags]&PadMarker == PadMarker {
		return n, sid, ErrPad
	}
	return n, sid, nil
}

// HideDownload protects the server's reply buf[off:] (SIP:P_srv → DIP:DPort): it is first
// translated back to CIP:SID (direct server return, spec §3.8), then hidden with a pair from
// pools (this session's, this replica's partition) and returned with offset off − OptionLen.
func (s *Server) HideDownload(buf []byte, off int, pools *Pools, now int64) (int, error) {
	pkt := buf[off:]
	th, err := parse(pkt)
	if err != nil {
		return off, err
	}
	if off < Headroom {
		return off, ErrNoHeadroom
	}
	if th-tcpFixed > MaxOrigOptions {
		return off, ErrNoRoom
	}
	sid1 := s.sidOf.get(binary.BigEndian.Uint16(pkt[tcpSport:]))
	if sid1 == 0 {
		return off, ErrUnknownSID
	}
	sid := uint16(sid1 - 1)
	pool := pools.Get(sid)
	if pool == nil {
		return off, ErrUnknownSID
	}
	p, ok := pool.Pop(now)
	if !ok {
		return off, ErrExhausted
	}
	optLen := 0
	if !s.cfg.PaperMode {
		optLen = th - tcpFixed
	}
	old := tcpHeadSum(pkt, pkt[tcpOptions:tcpOptions+optLen])
	if !s.cfg.PaperMode {
		if err := s.norm.apply(pkt, th); err != nil {
			return off, err
		}
	}
	copy(pkt[ipSrc:], s.cfg.CIP[:])
	binary.BigEndian.PutUint16(pkt[tcpSport:], sid)
	return hide(buf, off, &p, tcpDport, tcpSport, s.cfg.UnifiedPort, s.cfg.mask(), s.cfg.ExID, old, optLen), nil
}

// Maglev is the consistent-hash backend table of one service (D-16): built only from the
// backend list, so every CI replica computes the same table and a flow keeps its server.
type Maglev struct {
	table    []uint16
	backends []Backend
}

// MaglevSize is the lookup table size (a prime, as Maglev requires).
const MaglevSize = 65537

// NewMaglev builds the table for backends (Eisenbud et al., NSDI 2016, §3.4).
func NewMaglev(backends []Backend) (*Maglev, error) {
	if len(backends) == 0 || len(backends) > 1<<16-1 { // entries are uint16 indices
		return nil, fmt.Errorf("lois maglev: %d backends", len(backends))
	}
	const m = MaglevSize
	k := sipKey{0x4c4f49536d61676c, 0x65762d7461626c65} // fixed: identical on every replica
	offset := make([]uint64, len(backends))
	skip := make([]uint64, len(backends))
	for i, b := range backends {
		x := uint64(binary.BigEndian.Uint32(b.IP[:]))<<16 | uint64(b.Port)
		offset[i] = k.sum64(x) % m
		skip[i] = k.sum64(x^1<<63)%(m-1) + 1
	}
	next := make([]uint64, len(backends))
	t := make([]int32, m)
	for i := range t {
		t[i] = -1
	}
	filled := 0
	for filled < m {
		for i := range backends {
			c := (offset[i] + next[i]*skip[i]) % m
			for t[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % m
			}
			t[c] = int32(i)
			next[i]++
			filled++
			if filled == m {
				break
			}
		}
	}
	mg := &Maglev{table: make([]uint16, m), backends: backends}
	for i, v := range t {
		mg.table[i] = uint16(v)
	}
	return mg, nil
}

// Pick returns the backend of flow hash h.
func (mg *Maglev) Pick(h uint64) Backend { return mg.backends[mg.table[h%MaglevSize]] }
