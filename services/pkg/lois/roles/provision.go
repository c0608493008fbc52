package roles

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
)

// Provision is the registrar's work for one device session done ahead of time (spec §3.2,
// §3.4, §7.3), standing in for the HELLO over mutual TLS: random r_d, r_c, k_c and session
// id give the seed; the seed gives one stream per (direction, service, epoch); the registrar's
// deduplicating table gives each stream's dup indices; and each role gets a keys file with
// only what it needs. The seed itself is never written.
type Provision struct {
	Services   []uint16 // SIDs the device uses
	N          uint32   // keystreams per service and direction
	Lifetime   time.Duration
	Epoch      uint32
	DeviceIP   netip.Addr
	DeviceWire netip.AddrPort // where SIs send downloads
	Replicas   int            // SI replicas per service (download partition, §3.11)
	// Registrar is the deduplicating table (DVTConfig.Dedup) shared by every session of
	// the cloud; nil gives a fresh one for this session alone.
	Registrar *lois.DVT
	// KeepSeed returns the seed in Provisioned.Seed: the live registrar derives later
	// epochs of the session from it (spec §3.12). Keys files never carry it.
	KeepSeed bool
}

// Provisioned are the keys files of one session.
type Provisioned struct {
	Device *contract.Keys
	Cloud  *contract.Keys
	Server []*contract.Keys     // one per SI replica
	Seed   *[lois.SeedSize]byte // only with KeepSeed; the caller wipes it
}

// Run derives and registers the session's streams.
func (p Provision) Run(now time.Time) (*Provisioned, error) {
	if len(p.Services) == 0 || p.N == 0 || p.Lifetime <= 0 || !p.DeviceIP.Is4() {
		return nil, errors.New("provision: services, n, lifetime and an IPv4 device address are required")
	}
	replicas := max(1, p.Replicas)
	var rnd [16 + lois.CloudSecretSize + 16]byte
	if _, err := crand.Read(rnd[:]); err != nil {
		return nil, err
	}
	defer clear(rnd[:])
	h := lois.Handshake{DeviceNonce: binary.BigEndian.Uint64(rnd[0:]), CloudNonce: binary.BigEndian.Uint64(rnd[8:]),
		CloudSecret: rnd[16 : 16+lois.CloudSecretSize], SessionID: [16]byte(rnd[16+lois.CloudSecretSize:])}
	seed, err := h.Seed()
	if err != nil {
		return nil, err
	}
	defer clear(seed[:])
	reg := p.Registrar
	if reg == nil {
		if reg, err = lois.NewDVT(lois.DVTConfig{TableCapacity: int(2 * p.N * uint32(len(p.Services))), Dedup: true}); err != nil {
			return nil, err
		}
	}
	expiry := now.Add(p.Lifetime).Unix()
	base := contract.Keys{Version: contract.KeysVersion, Session: hex.EncodeToString(h.SessionID[:]),
		DeviceIP: p.DeviceIP.String(), Created: now.Unix()}
	if p.DeviceWire.IsValid() {
		base.DeviceWire = p.DeviceWire.String()
	}
	out := &Provisioned{}
	dev, ci := base, base
	out.Device, out.Cloud = &dev, &ci
	var si []contract.Stream
	for _, sid := range p.Services {
		for _, d := range []lois.Dir{lois.Up, lois.Down} {
			s := lois.Stream{Key: lois.StreamKey(seed, d, sid, p.Epoch), Dir: d, SID: sid, Epoch: p.Epoch, N: p.N, Expiry: expiry}
			if _, err := reg.Register(&s); err != nil {
				return nil, fmt.Errorf("register %v stream of sid %d: %w", d, sid, err)
			}
			rec := contract.FromCore(&s)
			clear(s.Key[:])
			dev.Streams = append(dev.Streams, rec)
			si = append(si, rec)
			if d == lois.Up {
				ci.Streams = append(ci.Streams, rec)
			}
		}
	}
	if p.KeepSeed {
		out.Seed = new([lois.SeedSize]byte)
		*out.Seed = seed
	}
	for r := range replicas {
		k := base
		k.Replicas, k.Replica, k.Streams = replicas, r, si
		out.Server = append(out.Server, &k)
	}
	return out, nil
}
