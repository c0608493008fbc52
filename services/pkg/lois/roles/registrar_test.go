package roles

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRegistrarOverJetStream (spec §3.2, §3.11, §10) on a real nats-server: a CI and two SI
// replicas start with empty tables and follow the session stream; the registrar registers
// a session, publishes its record and hands the device its keys only once the CI and both
// SIs acknowledged installing it. The device's packet then crosses DI → CI → SI and the
// reply comes back. The two SI replicas hold disjoint download partitions whose union is
// the whole stream. A registrar that waits for a replica that never acks gives
// ErrNotInstalled and no keys.
func TestRegistrarOverJetStream(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := EnsureSessionStream(ctx, js, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	m, log := NewMetrics(nil), telemetry.Discard()
	core := lois.Config{CIP: cip}
	diWire, ciWire := udp(t), udp(t)
	srvTUN := [2]*memTUN{newMemTUN(), newMemTUN()}
	siWire := [2]netip.AddrPort{}
	var servers [2]*Server
	for r := range 2 {
		w := udp(t)
		siWire[r] = addrOf(w)
		s, err := NewServer(ServerConfig{Core: core, Ports: map[uint16]uint16{pSrv: sid}, TUN: srvTUN[r], Wire: w,
			Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		servers[r] = s
	}
	// Both SIs serve one backend address here so that the flow lands on replica 0.
	c, err := NewCloud(CloudConfig{Core: core, Wire: ciWire, Grace: time.Minute, Metrics: m, Log: log,
		Backends: []ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: siWire[0]}}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil {
				t.Error(err)
			}
		}()
	}
	goRun(c.Run)
	goRun(func(ctx context.Context) error { return Follow(ctx, js, "c1", "ci-0", 0, c, log) })
	for r, s := range servers {
		goRun(s.Run)
		goRun(func(ctx context.Context) error { return Follow(ctx, js, "c1", []string{"si-0", "si-1"}[r], r, s, log) })
	}

	table, err := lois.NewDVT(lois.DVTConfig{TableCapacity: 4096, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 256
	prov := Provision{Services: []uint16{sid}, N: n, Lifetime: time.Hour, Epoch: 1, DeviceIP: netip.AddrFrom4(dip),
		DeviceWire: addrOf(diWire), Replicas: 2}
	strict := &Registrar{JS: js, Cloud: "c1", Table: table, Replicas: []string{"ci-0", "si-0", "si-1", "si-2"}}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	if k, err := strict.Open(sctx, prov); !errors.Is(err, ErrNotInstalled) || k != nil {
		t.Fatalf("a replica never acked, got keys %v, err %v; want ErrNotInstalled", k != nil, err)
	}
	scancel()

	reg := &Registrar{JS: js, Cloud: "c1", Table: table, Replicas: []string{"ci-0", "si-0", "si-1"}}
	keys, err := reg.Open(ctx, prov)
	if err != nil {
		t.Fatal(err)
	}
	devTUN := newMemTUN()
	d, err := NewDevice(DeviceConfig{Core: core, Keys: keys, TUN: devTUN, Wire: diWire, Cloud: addrOf(ciWire),
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	goRun(d.Run)
	devTUN.in <- tcp(dip, cip, dport, sid, 7, 9, 0x18, []byte("hello"))
	if got := srvTUN[0].next(t); [4]byte(got[12:16]) != dip || !lois.ChecksumsValid(got) {
		t.Fatalf("SI 0 got %x", got[:40])
	}
	srvTUN[0].in <- tcp(sip, dip, pSrv, dport, 100, 13, 0x18, []byte("hi"))
	if got := devTUN.next(t); [4]byte(got[12:16]) != cip || !lois.ChecksumsValid(got) {
		t.Fatalf("DI got %x", got[:40])
	}

	// Partition: stop the loops (they own the pools), then drain both replicas' pools.
	stop()
	wg.Wait()
	ids := map[uint64]int{}
	for r, s := range servers {
		for _, ss := range *s.sessions.Load() {
			for _, p := range ss.byID {
				for {
					pr, ok := p.Pop(0)
					if !ok {
						break
					}
					if _, dup := ids[pr.ID]; dup {
						t.Fatalf("download keystream %x held by two replicas", pr.ID)
					}
					ids[pr.ID] = r
				}
			}
		}
	}
	per := [2]int{}
	for _, r := range ids {
		per[r]++
	}
	if per[0] < n/2-8 || per[1] < n/2-8 {
		t.Fatalf("partition sizes %v of %d, want about half each (i mod 2)", per, n)
	}
	if len(ids) < n-2-8 { // 1 used for the reply; dups are skipped identically everywhere
		t.Fatalf("replicas hold %d download keystreams together, want about %d", len(ids), n)
	}
}
