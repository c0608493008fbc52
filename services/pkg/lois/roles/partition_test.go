package roles

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestPartitionChangeAtNextEpoch (spec §3.11: R changes only at an epoch boundary) on a real
// nats-server: a session opens while its service has one SI replica (R = 1), so si-0 holds
// every download keystream of epoch 1 and si-1, following the same stream as replica 1,
// holds none — only an empty pool below its low-water mark, which makes its first reply ask
// for an epoch. The registrar's policy then says R = 2 (as a registrar restarted with
// --partitions 2 restores its sessions): the next download epoch it grants is split i mod 2
// — si-0 and si-1 each hold about half of it, no keystream of either epoch is held by both,
// and together they hold every usable one. Epoch 1 is not repartitioned.
func TestPartitionChangeAtNextEpoch(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := EnsureSessionStream(ctx, js, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	m, log := NewMetrics(nil), telemetry.Discard()
	core := lois.Config{CIP: cip}
	var servers [2]*Server
	for r := range servers {
		s, err := NewServer(ServerConfig{Core: core, Ports: map[uint16]uint16{pSrv: sid}, TUN: newMemTUN(), Wire: udp(t),
			Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		servers[r] = s
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for r, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Follow(runCtx, js, "c1", []string{"si-0", "si-1"}[r], r, s, log); err != nil {
				t.Error(err)
			}
		}()
	}
	table, err := lois.NewDVT(lois.DVTConfig{TableCapacity: 4096, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 256
	diWire := udp(t)
	reg := &Registrar{JS: js, Cloud: "c1", Table: table, Replicas: []string{"si-0", "si-1"}, Policy: HelloPolicy{Partitions: 1}}
	keys, err := reg.Open(ctx, Provision{Services: []uint16{sid}, N: n, Lifetime: time.Hour, Epoch: 1,
		DeviceIP: netip.AddrFrom4(dip), DeviceWire: addrOf(diWire), Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The DI that acknowledges the download grant (not run: InstallGrant is its control side).
	d, err := NewDevice(DeviceConfig{Core: core, Keys: keys, TUN: newMemTUN(), Wire: diWire, Cloud: addrOf(udp(t)),
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	reg.Attach(keys.Session, d)

	pool := func(s *Server) *lois.Pool {
		s.up.mu.Lock()
		defer s.up.mu.Unlock()
		ss := s.bySession[keys.Session]
		if ss == nil {
			t.Fatal("a replica holds no session")
		}
		return ss.byID[sid]
	}
	p0, p1 := pool(servers[0]), pool(servers[1])
	if p1 == nil || p1.Len() != 0 || !p1.NeedsReplenish() {
		t.Fatalf("replica 1 outside epoch 1's partition: pool %v, want an empty one below its low-water mark", p1)
	}
	first := p0.Len()
	if first < n-8 {
		t.Fatalf("replica 0 holds %d of epoch 1's %d download keystreams, want all usable (R = 1)", first, n)
	}

	reg.Policy.Partitions = 2
	if err := reg.GrantDownload(ctx, keys.Session, sid); err != nil {
		t.Fatal(err)
	}
	stop() // both acknowledged the grant; the followers stop before the pools are read
	wg.Wait()
	second := [2]int{p0.Len() - first, p1.Len()}
	if second[0] < n/2-8 || second[1] < n/2-8 {
		t.Fatalf("epoch 2 split %v over the replicas, want about half each (i mod 2)", second)
	}
	ids := map[uint64]int{}
	for r, p := range []*lois.Pool{p0, p1} {
		for {
			pr, ok := p.Pop(0)
			if !ok {
				break
			}
			if prev, dup := ids[pr.ID]; dup {
				t.Fatalf("download keystream %x held by replicas %d and %d", pr.ID, prev, r)
			}
			ids[pr.ID] = r
		}
	}
	if len(ids) < first+n-8 {
		t.Fatalf("the replicas hold %d download keystreams together, want epoch 1's %d and about %d of epoch 2", len(ids), first, n)
	}
}
