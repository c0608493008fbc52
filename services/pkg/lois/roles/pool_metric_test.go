package roles

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPoolGaugeHasNoServiceLabel (docs/metrics.md L-2): lois_pool_keystreams reports a
// sender's unused keystreams by direction only — the service id, which LOIS hides from the
// network, is no label — and counts what a packet consumed: with 16 keystreams, one upload
// and one download leave 15 at the DI (up) and 15 at the SI (down).
func TestPoolGaugeHasNoServiceLabel(t *testing.T) {
	p := startPath(t, 16)
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.m.Pool)
	p.devTUN.in <- tcp(dip, cip, dport, sid, 1, 0, 0x18, []byte("GET"))
	p.toCI(t, p.capture(t))
	p.srvTUN.next(t)
	p.srvTUN.in <- tcp(sip, dip, pSrv, dport, 7, 2, 0x18, []byte("OK"))
	p.devTUN.next(t)
	pool := func(dir string) float64 { return testutil.ToFloat64(p.m.Pool.WithLabelValues(dir)) }
	testEventually(t, func() bool { return pool("up") == 15 && pool("down") == 15 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "dir" {
				t.Errorf("%s has labels %v, want dir only", mf.GetName(), l)
			}
		}
	}
}
