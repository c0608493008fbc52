package lois_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	mrand "math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

var (
	cip = [4]byte{203, 0, 113, 7}
	dip = [4]byte{198, 51, 100, 23}
)

const (
	now     = int64(1_800_000_000)
	expiry  = now + 3600
	margin  = 60
	portOff = 8000 // P_srv = portOff + SID
)

func chacha(label string) *mrand.ChaCha8 { return mrand.NewChaCha8(sha256.Sum256([]byte(label))) }

// optionSets are the spec T1 option sets.
var optionSets = map[string][]byte{
	"none":      nil,
	"mss":       {2, 4, 0x05, 0xb4},
	"syn-linux": {2, 4, 0x05, 0xb4, 4, 2, 8, 10, 1, 2, 3, 4, 0, 0, 0, 0, 1, 3, 3, 7},
	"ts-only":   {1, 1, 8, 10, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1},
	"nop-pad":   {1, 1, 1, 1},
}

// packet builds an IPv4/TCP packet at buf[lois.Headroom:] with valid checksums.
func packet(src, dst [4]byte, sport, dport uint16, seq, ack uint32, flags byte, opts []byte, payload []byte) ([]byte, int) {
	n := 40 + len(opts) + len(payload)
	buf := make([]byte, lois.Headroom+n)
	p := buf[lois.Headroom:]
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(n))
	binary.BigEndian.PutUint16(p[4:], 0x1234)
	p[6] = 0x40
	p[8] = 57
	p[9] = 6
	copy(p[12:], src[:])
	copy(p[16:], dst[:])
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint32(p[24:], seq)
	binary.BigEndian.PutUint32(p[28:], ack)
	p[32] = byte((20+len(opts))/4) << 4
	p[33] = flags
	binary.BigEndian.PutUint16(p[34:], 64240)
	copy(p[40:], opts)
	copy(p[40+len(opts):], payload)
	lois.FixChecksums(p)
	return buf, lois.Headroom
}

func randPacket(r *mrand.ChaCha8, src, dst [4]byte, dport uint16, optName string, flags byte, payload int) ([]byte, int) {
	var b [12]byte
	r.Read(b[:])
	pl := make([]byte, payload)
	r.Read(pl)
	return packet(src, dst, binary.BigEndian.Uint16(b[:]), dport, binary.BigEndian.Uint32(b[2:]),
		binary.BigEndian.Uint32(b[6:]), flags, optionSets[optName], pl)
}

// world is one session between a DI and a cloud with replicas SI replicas behind every
// service, wired up the way spec §7.3 installs it.
type world struct {
	dev      *lois.Device
	ci       *lois.Cloud
	si       []*lois.Server
	siPools  []*lois.Pools
	sids     []uint16
	registry *lois.DVT
	up, down map[uint16]*lois.Stream
}

func newWorld(t testing.TB, paper bool, sids []uint16, n uint32, replicas int) *world {
	t.Helper()
	h := lois.Handshake{DeviceNonce: 1, CloudNonce: 2, CloudSecret: bytes.Repeat([]byte{3}, 32), SessionID: [16]byte{4}}
	seed, err := h.Seed()
	if err != nil {
		t.Fatal(err)
	}
	cfg := lois.Config{CIP: cip, PaperMode: paper}
	tcfg := lois.DVTConfig{TableCapacity: int(n) * len(sids), Fingerprint16: paper, Key: [16]byte{9}, Grace: 120}
	rcfg := tcfg
	rcfg.Dedup = true
	w := &world{sids: sids, up: map[uint16]*lois.Stream{}, down: map[uint16]*lois.Stream{}}
	w.registry, _ = lois.NewDVT(rcfg)
	ciT, _ := lois.NewDVT(tcfg)
	diT, _ := lois.NewDVT(tcfg)
	w.dev = lois.NewDevice(cfg, diT)
	w.ci = lois.NewCloud(cfg, ciT, [16]byte{7})
	ports := map[uint16]uint16{}
	for _, sid := range sids {
		ports[portOff+sid] = sid
	}
	var backends []lois.Backend
	for r := range replicas {
		backends = append(backends, lois.Backend{IP: [4]byte{10, 0, 0, byte(1 + r)}})
	}
	for range replicas {
		siT, _ := lois.NewDVT(tcfg)
		w.si = append(w.si, lois.NewServer(cfg, siT, ports))
		w.siPools = append(w.siPools, &lois.Pools{})
	}
	for _, sid := range sids {
		bs := make([]lois.Backend, len(backends))
		for i, b := range backends {
			bs[i] = lois.Backend{IP: b.IP, Port: portOff + sid}
		}
		mg, err := lois.NewMaglev(bs)
		if err != nil {
			t.Fatal(err)
		}
		w.ci.SetBackends(sid, mg)
		for _, d := range []lois.Dir{lois.Up, lois.Down} {
			s := &lois.Stream{Key: lois.StreamKey(seed, d, sid, 1), Dir: d, SID: sid, Epoch: 1, N: n, Expiry: expiry}
			if _, err := w.registry.Register(s); err != nil {
				t.Fatal(err)
			}
			if d == lois.Up {
				w.up[sid] = s
				w.dev.Up.Set(sid, &lois.Pool{})
				w.dev.Up.Get(sid).Add(s, 1, 0, expiry-margin)
				must(t, ciT.Install(s))
				for _, si := range w.si {
					must(t, si.Up.Install(s))
				}
			} else {
				w.down[sid] = s
				must(t, diT.Install(s))
				for r := range w.si {
					p := &lois.Pool{}
					p.Add(s, replicas, r, expiry-margin)
					w.siPools[r].Set(sid, p)
				}
			}
		}
	}
	return w
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func pools5(p *lois.Pool) *lois.Pools {
	ps := &lois.Pools{}
	ps.Set(5, p)
	return ps
}
