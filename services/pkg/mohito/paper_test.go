package mohito

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// TestPaperLiteralLeaksRealCounts demonstrates spec §8.1 G1 on whole rounds.
// With the same users, destinations and targets, the paper-literal response
// path lets the integrator tell fake from real positions exactly — its
// authenticated layer opens at every real position and at no fake one — and
// so read off the real per-vendor counts A_v; on the hardened path every
// position opens, so the same observation says nothing. Both modes deliver
// every response.
func TestPaperLiteralLeaksRealCounts(t *testing.T) {
	cfg := worldConfig{
		params:       Params{Vendors: 3, Q: 1, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519},
		deviceCounts: []int{12, 20, 30},
		users:        30,
		delta:        2,
		policy:       []TargetPolicy{{8, 0}, {10, 0}, {12, 0}},
		capacity:     []int{16, 16, 32},
		quantum:      32,
		seed:         5,
	}
	targets := []uint64{10, 12, 14}
	observe := func(mode ResponseMode) (real []int, observed []int, correct, n int) {
		c := cfg
		c.params.ResponseMode = mode
		w := newWorld(t, c)
		res := w.runRound(t, roundPlan{intents: w.honestIntents(16, nil), targets: targets})
		real, observed = make([]int, c.params.Vendors), make([]int, c.params.Vendors)
		for v, vv := range res.vviews {
			for _, got := range vv.recipients {
				if got {
					real[v]++
				}
			}
		}
		// The integrator's guess: a position is real iff its layer opened;
		// it knows the vendor of every position from the command phase.
		for p, opened := range res.iview.respOpened {
			if opened {
				observed[res.vendorAt[p]]++
			}
			if opened == !res.fakeAt[p] {
				correct++
			}
		}
		if res.delivered != 16 {
			t.Fatalf("mode %d: %d of 16 responses delivered", mode, res.delivered)
		}
		return real, observed, correct, len(res.fakeAt)
	}
	real, seen, correct, n := observe(ResponsePaperLiteral)
	if correct != n {
		t.Fatalf("paper-literal: the integrator's opened/failed pattern matches fake/real at %d of %d positions, want all", correct, n)
	}
	for v := range real {
		if seen[v] != real[v] {
			t.Fatalf("paper-literal: vendor %d: integrator counts %d opened positions, real A_v = %d", v, seen[v], real[v])
		}
	}
	t.Logf("paper-literal: integrator reads A = %v exactly (C = %v)", seen, targets)

	real, seen, correct, n = observe(ResponseHardened)
	for v := range seen {
		if seen[v] != int(targets[v]) {
			t.Fatalf("hardened: vendor %d: %d positions opened, want all C_v = %d", v, seen[v], targets[v])
		}
	}
	if correct == n {
		t.Fatal("hardened: the opened pattern separates fakes")
	}
	t.Logf("hardened: every position opens (%v = C), real A = %v invisible", seen, real)
}

// TestPaperLiteralIsBenchmarkOnly: the mode has no wire form, refuses the
// asynchronous path and the hardened stage functions.
func TestPaperLiteralIsBenchmarkOnly(t *testing.T) {
	p := Params{Vendors: 2, Q: 1, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519, ResponseMode: ResponsePaperLiteral}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	k, _ := GenerateKey(p.Suite)
	ri := &RoundInfo{T: 3, Params: p, IntegratorKey: k.PublicKey(), ShufflerKey: k.PublicKey()}
	if _, err := ri.MarshalBinary(); !errors.Is(err, ErrParams) {
		t.Fatalf("paper-literal round info marshalled: %v", err)
	}
	if err := AsyncWindow(1).Validate(p); !errors.Is(err, ErrParams) {
		t.Fatalf("async accepted paper-literal mode: %v", err)
	}
	if err := DecodeResponseLayer(p, nil, nil, nil); !errors.Is(err, ErrParams) {
		t.Fatalf("hardened decoder accepted paper-literal params: %v", err)
	}
	if err := (Params{Vendors: 2, Q: 1, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519, ResponseMode: 7}).Validate(); !errors.Is(err, ErrParams) {
		t.Fatal("unknown response mode accepted")
	}
}

// BenchmarkResponseLayerPerPosition is the integrator's per-position cost of
// the response layer (R3) in both modes, measured in the same run and
// interleaved in chunks of 16 positions so both see the same machine load:
// one vendor table, 512 shuffled positions of which half are real, L_r =
// 1024. Hardened: OKVS decode + XSalsa20 keystream. Paper-literal: OKVS
// decode (values two HPKE overheads larger) + an authenticated HPKE open,
// which fails at the fakes (the G1 leak). Reports ns/position for each and
// the ratio paper/hardened.
func BenchmarkResponseLayerPerPosition(b *testing.B) {
	const n, chunk = 512, 16
	ph := benchParams(1)
	pp := ph
	pp.ResponseMode = ResponsePaperLiteral
	ik, _ := GenerateKey(ph.Suite)
	vk, _ := GenerateKey(ph.Suite)
	inH, _ := NewIntegrator(ph, ik)
	inP, _ := NewIntegrator(pp, ik)
	ri := &RoundInfo{T: 1, Params: pp, IntegratorKey: ik.PublicKey(), ShufflerKey: vk.PublicKey()}
	slots := make([]ResponseSlot, n)
	var keys, valsH, valsP [][]byte
	for i := range slots {
		readAll(rand.Reader, slots[i].Key[:], slots[i].RespKey[:])
		slots[i].Pos, slots[i].Vendor = uint32(i), 0
		if i%2 == 1 {
			continue // a fake: its key is in no table
		}
		dev := make([]byte, ph.ResponseValueSize())
		rand.Read(dev)
		layered, err := sealPaperLayers(ri, dev)
		if err != nil {
			b.Fatal(err)
		}
		keys, valsH, valsP = append(keys, slots[i].Key[:]), append(valsH, dev), append(valsP, layered)
	}
	tH, err := okvs.EncodeWithSize(keys, valsH, ph.ResponseTableValueSize(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tP, err := okvs.EncodeWithSize(keys, valsP, pp.ResponseTableValueSize(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	out := make([][]byte, chunk)
	var hard, paper float64
	opened := 0
	for b.Loop() {
		var th, tp time.Duration
		for c := 0; c < n; c += chunk {
			s0 := time.Now()
			if err := DecodeResponseLayer(inH.Params(), tH, slots[c:c+chunk], out); err != nil {
				b.Fatal(err)
			}
			s1 := time.Now()
			ok, err := inP.DecodeResponseLayerPaperLiteral(ri.T, tP, slots[c:c+chunk], out, nil)
			if err != nil {
				b.Fatal(err)
			}
			th, tp = th+s1.Sub(s0), tp+time.Since(s1)
			for _, o := range ok {
				if o {
					opened++
				}
			}
		}
		hard += float64(th.Nanoseconds()) / n
		paper += float64(tp.Nanoseconds()) / n
	}
	if opened != b.N*n/2 {
		b.Fatalf("paper-literal opened %d positions, want exactly the %d real ones", opened, b.N*n/2)
	}
	b.ReportMetric(hard/float64(b.N), "hardened-ns/pos")
	b.ReportMetric(paper/float64(b.N), "paper-ns/pos")
	b.ReportMetric(paper/hard, "ratio-paper/hardened")
}
