package mohito

import (
	"bytes"
	"math"
	"math/bits"
	"reflect"
	"testing"
)

// Transcript tests of spec §9.2: capture what each party sees and assert that
// it does not depend on who talks to whom.

func privacyConfig() worldConfig {
	return worldConfig{
		params:       Params{Vendors: 5, Q: 1, CommandSize: 160, ResponseSize: 64, Suite: SuiteX25519},
		deviceCounts: []int{10, 40, 200, 400, 600},
		users:        300,
		delta:        4,
		policy:       []TargetPolicy{{10, 0}, {16, 0}, {36, 0}, {56, 0}, {76, 0}},
		capacity:     []int{32, 32, 64, 96, 128},
		quantum:      128,
		seed:         42,
	}
}

// integratorProjection is everything of the integrator's transcript that must
// not depend on destinations (§9.2 #8).
type integratorProjection struct {
	PerVendor      []int
	Void           int
	M1, M4         []int
	CmdTables      []int
	RespTables     []int
	M9, M10, M11   []int
	PerUser        map[string]int
	RespOK, N, S   int
	FakesPlusValid int
}

func projectIntegrator(r *roundResult) integratorProjection {
	v := r.iview
	return integratorProjection{
		PerVendor: v.perVendor, Void: v.void, M1: v.m1Sizes, M4: v.m4Sizes,
		CmdTables: v.cmdTableSizes, RespTables: v.respTableSizes,
		M9: v.m9Sizes, M10: v.m10Sizes, M11: v.m11Sizes, PerUser: v.perUser,
		RespOK: v.respOK, N: r.stats.N, S: r.stats.S, FakesPlusValid: r.stats.Fakes + r.stats.Valid,
	}
}

// redirect keeps users and slots but sends each command to another device of
// the same user, on another vendor when the user has one.
func (w *world) redirect(in []intent) []intent {
	out := make([]intent, len(in))
	for i, x := range in {
		out[i] = x
		for _, d := range w.owned[x.user] {
			if d.v != x.dev.v {
				out[i].dev = d
				break
			}
		}
		if out[i].dev == x.dev {
			for _, d := range w.owned[x.user] {
				if d != x.dev {
					out[i].dev = d
				}
			}
		}
	}
	return out
}

// TestIntegratorViewIndependentOfDestinations is §9.2 #8 and #15: with the same
// participating users, messages per user and C, the integrator's projection
// is identical whatever the destinations — including a scenario where all
// traffic goes to one vendor and the §5.1 "new user joins" case.
func TestIntegratorViewIndependentOfDestinations(t *testing.T) {
	w := newWorld(t, privacyConfig())
	targets := []uint64{14, 20, 40, 60, 80}
	base := w.honestIntents(40, nil)
	moved := w.redirect(base)
	changed := 0
	for i := range base {
		if base[i].dev.v != moved[i].dev.v {
			changed++
		}
	}
	if changed < len(base)/3 {
		t.Fatalf("only %d of %d commands changed vendor", changed, len(base))
	}
	a := w.runRound(t, roundPlan{intents: base, targets: targets})
	b := w.runRound(t, roundPlan{intents: moved, targets: targets})
	pa, pb := projectIntegrator(a), projectIntegrator(b)
	if !reflect.DeepEqual(pa, pb) {
		t.Fatalf("integrator transcript depends on destinations:\n%+v\n%+v", pa, pb)
	}
	for v, n := range pa.PerVendor {
		if n != int(targets[v]) {
			t.Fatalf("vendor %d: integrator saw %d entries, want C_v = %d", v, n, targets[v])
		}
	}
	if pa.RespOK != pa.N {
		t.Fatalf("response layer produced %d of %d positions", pa.RespOK, pa.N)
	}

	// Real counts very different from both: per-vendor counts still C_v.
	c := w.runRound(t, roundPlan{intents: w.honestIntents(5, nil), targets: targets})
	if !reflect.DeepEqual(c.iview.perVendor, pa.PerVendor) || !reflect.DeepEqual(c.iview.cmdTableSizes, pa.CmdTables) {
		t.Fatalf("per-vendor counts depend on the amount of real traffic: %v vs %v", c.iview.perVendor, pa.PerVendor)
	}
	// §5.1 intersection: round i has users {A, B}, round j {A, D} where D is
	// new and talks to a vendor nobody used in round i.
	ui, uj := base[:2], []intent{base[0], moved[1]}
	ri := w.runRound(t, roundPlan{intents: ui, targets: targets})
	rj := w.runRound(t, roundPlan{intents: uj, targets: targets})
	if !reflect.DeepEqual(ri.iview.perVendor, rj.iview.perVendor) {
		t.Fatalf("intersection scenario: counts %v then %v", ri.iview.perVendor, rj.iview.perVendor)
	}
}

// TestVendorViewIndependentOfRecipients is §9.2 #9: with a fixed active set,
// a vendor's table size, decode pattern (q keys per active device, derived
// only from the device keys and t) and message sizes are the same whichever
// devices get commands, and the decoded bytes of recipients and
// non-recipients are statistically alike (no zero cells, no structure).
func TestVendorViewIndependentOfRecipients(t *testing.T) {
	w := newWorld(t, privacyConfig())
	targets := []uint64{14, 20, 40, 60, 80}
	base := w.honestIntents(40, nil)
	a := w.runRound(t, roundPlan{intents: base, targets: targets})
	b := w.runRound(t, roundPlan{intents: w.redirect(base), targets: targets})
	for v := range w.p.Vendors {
		va, vb := a.vviews[v], b.vviews[v]
		if va.tableSize != vb.tableSize || !reflect.DeepEqual(va.m6Sizes, vb.m6Sizes) || !reflect.DeepEqual(va.m7Sizes, vb.m7Sizes) {
			t.Fatalf("vendor %d: sizes depend on recipients", v)
		}
		if len(va.pattern) != w.p.Q*len(w.devices[v]) || len(vb.pattern) != len(va.pattern) {
			t.Fatalf("vendor %d: decodes %d keys, want q·|D_a|", v, len(va.pattern))
		}
		// The pattern is exactly the ids of every active device, in order.
		for d := range w.devices[v] {
			if va.pattern[d] != DeriveEphemeralID(&w.creds[v][d].Keys.PRF, 1, a.info.T) {
				t.Fatalf("vendor %d: decode pattern is not the fixed id list", v)
			}
		}
	}
	// Byte statistics of decoded slot values, recipients vs non-recipients,
	// pooled over vendors and both rounds.
	var rec, non [][]byte
	for _, r := range []*roundResult{a, b} {
		for _, vv := range r.vviews {
			for i, val := range vv.decoded {
				if vv.recipients[i] {
					rec = append(rec, val)
				} else {
					non = append(non, val)
				}
			}
		}
	}
	if len(rec) < 50 {
		t.Fatalf("only %d recipients", len(rec))
	}
	checkIndistinguishable(t, "decoded command slots", rec, non)
}

// TestResponseLayerFakeVsReal is §9.2 #13: the integrator's response-layer
// processing yields a value for every position, with no failure, and the
// values at fake and real positions are statistically alike.
func TestResponseLayerFakeVsReal(t *testing.T) {
	w := newWorld(t, privacyConfig())
	targets := []uint64{14, 20, 40, 60, 80}
	var real, fake [][]byte
	for range 2 {
		r := w.runRound(t, roundPlan{intents: w.honestIntents(60, nil), targets: targets})
		if r.iview.respOK != r.stats.N {
			t.Fatalf("response layer: %d of %d positions", r.iview.respOK, r.stats.N)
		}
		for pos, v := range r.iview.respLayer {
			if len(v) != w.p.ResponseValueSize() {
				t.Fatal("response value length differs")
			}
			if r.fakeAt[pos] {
				fake = append(fake, v)
			} else {
				real = append(real, v)
			}
		}
	}
	checkIndistinguishable(t, "response layer r′", real, fake)
}

// TestShufflerNeverSeesDeviceIDs is §9.2 #10: nothing the shuffler receives
// contains an ephemeral id, a device key, a vendor-identifying plaintext or C.
func TestShufflerNeverSeesDeviceIDs(t *testing.T) {
	w := newWorld(t, privacyConfig())
	targets := []uint64{14, 20, 40, 60, 80}
	intents := w.honestIntents(40, nil)
	r := w.runRound(t, roundPlan{intents: intents, targets: targets})
	all := bytes.Join(r.sview.received, nil)
	for _, in := range intents {
		cr := &w.creds[in.dev.v][in.dev.d]
		z := DeriveEphemeralID(&cr.Keys.PRF, in.j, r.info.T)
		for _, secret := range [][]byte{z[:], z[:8], cr.Keys.PRF[:8], cr.Keys.AE[:8]} {
			if bytes.Contains(all, secret) {
				t.Fatal("shuffler transcript contains a device id or key")
			}
		}
		if bytes.Contains(all, []byte("cmd u")) {
			t.Fatal("shuffler transcript contains a command plaintext")
		}
	}
	// OuterLayer, the only thing V* decrypts, has no place for z, v or cmd.
	ty := reflect.TypeOf(OuterLayer{})
	for i := range ty.NumField() {
		switch ty.Field(i).Name {
		case "Inner", "Share", "RespKey":
		default:
			t.Fatalf("OuterLayer grew field %s", ty.Field(i).Name)
		}
	}
}

// TestTaggedMessagePositionUniform is the χ² part of §9.2 #8: the output
// position of a tagged honest message is uniform over [0, N).
func TestTaggedMessagePositionUniform(t *testing.T) {
	trials := 400
	if testing.Short() {
		trials = 160
	}
	cfg := worldConfig{
		params:       Params{Vendors: 2, Q: 1, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519},
		deviceCounts: []int{4, 4}, users: 2, delta: 0,
		policy:   []TargetPolicy{{4, 0}, {4, 0}},
		capacity: []int{8, 8}, quantum: 8, seed: 9,
	}
	w := newWorld(t, cfg)
	const n = 8
	var counts [n]int
	var u int
	for u = range w.owned {
		if len(w.owned[u]) > 0 {
			break
		}
	}
	in := intent{user: u, dev: w.owned[u][0], j: 1}
	for range trials {
		r := w.runRound(t, roundPlan{intents: []intent{in}, targets: []uint64{4, 4}})
		if r.stats.N != n {
			t.Fatalf("N = %d", r.stats.N)
		}
		pos := -1
		for p, f := range r.fakeAt {
			if !f {
				pos = p
			}
		}
		counts[pos]++
	}
	exp := float64(trials) / n
	chi := 0.0
	for _, c := range counts {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	if chi > 24.3 { // p ≈ 0.001 at 7 degrees of freedom
		t.Fatalf("tagged position not uniform: χ² = %.1f, %v", chi, counts)
	}
}

// checkIndistinguishable compares two samples of byte strings with a monobit
// test on each and a two-sample χ² on byte histograms (spec §9.2 #9), and
// rejects all-zero values.
func checkIndistinguishable(t *testing.T, what string, a, b [][]byte) {
	t.Helper()
	hist := func(s [][]byte) (h [256]float64, ones, total float64) {
		for _, v := range s {
			if allZero(v) {
				t.Fatalf("%s: an all-zero value", what)
			}
			for _, x := range v {
				h[x]++
				ones += float64(bits.OnesCount8(x))
				total += 8
			}
		}
		return
	}
	ha, oa, ta := hist(a)
	hb, ob, tb := hist(b)
	for _, m := range []struct{ ones, total float64 }{{oa, ta}, {ob, tb}} {
		if z := math.Abs(m.ones-m.total/2) / math.Sqrt(m.total/4); z > 4.5 {
			t.Fatalf("%s: monobit z = %.1f", what, z)
		}
	}
	// Two-sample χ² with 255 degrees of freedom; 340 is p ≈ 3·10⁻⁴.
	na, nb := ta/8, tb/8
	chi := 0.0
	for i := range 256 {
		if ha[i]+hb[i] == 0 {
			continue
		}
		d := ha[i]*math.Sqrt(nb/na) - hb[i]*math.Sqrt(na/nb)
		chi += d * d / (ha[i] + hb[i])
	}
	if chi > 340 {
		t.Fatalf("%s: byte histograms differ, χ² = %.0f", what, chi)
	}
}
