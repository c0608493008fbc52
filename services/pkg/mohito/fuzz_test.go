package mohito

import (
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// Fuzz targets for every decoder of bytes that arrive from the network. Each
// must return an error wrapping one of the package's sentinels (or
// okvs.ErrMalformed underneath ErrTableShape) and never panic.

var sentinels = []error{ErrSize, ErrKind, ErrRound, ErrNonCanonical, ErrDecrypt, ErrRateLimit,
	ErrRoundClosed, ErrRoundOpen, ErrPhase, ErrIndex, ErrReplay, ErrPayloadTooLarge, ErrParams,
	ErrNoCommand, ErrTableShape}

func requireSentinel(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error without a sentinel: %v", err)
}

type fuzzFixture struct {
	p          Params
	ri         *RoundInfo
	ik, vk     *PrivateKey
	in         *Integrator
	sh         *Shuffler
	dev        DeviceCredentials
	secret     DeviceSecret
	m1         [][]byte
	pc         []*PendingCommand
	m0         []byte
	m4, m6, m7 []byte
	m9, m10    []byte
	m11        []byte
	cmdTable   []byte
	respTable  []byte
	challenge  []byte
	reply      []byte
	verdict    []byte
	finish     []byte
	summary    []byte
}

var (
	fixtureOnce sync.Once
	fixture     *fuzzFixture
)

// getFixture runs one small round and keeps a valid example of every
// envelope as a seed.
func getFixture(t testing.TB) *fuzzFixture {
	fixtureOnce.Do(func() {
		f := &fuzzFixture{p: Params{Vendors: 2, Q: 1, CommandSize: 96, ResponseSize: 32, Suite: SuiteX25519}}
		f.ik, _ = GenerateKey(f.p.Suite)
		f.vk, _ = GenerateKey(f.p.Suite)
		f.ri = &RoundInfo{T: 5, Shuffler: 1, Params: f.p, IntegratorKey: f.ik.PublicKey(), ShufflerKey: f.vk.PublicKey()}
		f.m0, _ = f.ri.MarshalBinary()
		f.in, _ = NewIntegrator(f.p, f.ik)
		f.sh, _ = NewShuffler(1, f.p, f.vk, NewFakePool(f.p, f.ik.PublicKey()))
		f.secret, _ = NewDeviceSecret(rand.Reader)
		f.dev = DeviceCredentials{Vendor: 0, Keys: f.secret.Keys()}
		ir, _ := f.in.NewRound(f.ri, []uint64{2, 2})
		sr, _ := f.sh.NewRound(f.ri, nil)
		for i := range 2 {
			m1, pc, err := IssueCommand(f.ri, &f.dev, 1, []byte("x"), time.Now(), rand.Reader)
			if err != nil {
				panic(err)
			}
			f.m1, f.pc = append(f.m1, m1), append(f.pc, pc)
			_, m2, err := ir.Admit(string(rune('a'+i)), m1)
			if err != nil {
				panic(err)
			}
			idx, l, _ := f.sh.OpenForward(5, m2)
			sr.Accept(idx, l)
		}
		m3, _ := ir.Close()
		sr.Close(m3)
		f.challenge, _ = sr.Challenge()
		f.reply, _ = ir.Reply(f.challenge)
		f.verdict, _ = sr.Verdict(f.reply)
		f.finish, _ = ir.Finish(f.verdict)
		f.summary, _ = sr.Finish(f.finish)
		s, counts, err := ir.AcceptSummary(f.summary)
		if err != nil {
			panic(err)
		}
		f.m4, _ = sr.Output(0, s.N)
		cmds, _, _ := f.in.OpenShuffled(5, f.m4, s.N, nil)
		byV, _ := GroupByVendor(cmds, 2)
		tab, slots, _, _ := EncodeCommandTable(f.p, byV[0], CommandCapacity(counts[0], 4), nil)
		f.cmdTable, _ = MarshalTable(KindCommandTable, 5, 0, CommandCapacity(counts[0], 4), tab)
		v, _ := NewVendor(0, f.p, [][KeySize]byte{f.dev.Keys.PRF})
		vr, _ := v.NewRound(f.ri, []int{0})
		m6s, _ := vr.DecodeCommands(tab)
		f.m6 = m6s[0]
		d := NewDevice(&f.secret, f.p, time.Minute)
		tt, ds, _ := d.ReceiveCommands(f.m6, time.Now())
		f.m7, _ = d.Respond(tt, ds, [][]byte{[]byte("ok")}, rand.Reader)
		vr.AcceptResponse(0, f.m7)
		rt, rc, _ := vr.EncodeResponses(4, nil)
		f.respTable, _ = MarshalTable(KindResponseTable, 5, 0, rc, rt)
		out := make([][]byte, len(slots))
		DecodeResponseLayer(f.p, rt, slots, out)
		all := make([][]byte, s.N)
		for i, sl := range slots {
			all[sl.Pos] = out[i]
		}
		for i := range all {
			if all[i] == nil {
				all[i], _ = VoidResponseLayer(f.p, nil)
			}
		}
		f.m9, _ = MarshalResponseLayer(f.p, 5, 0, all)
		sr.AcceptResponses(f.m9)
		m10s, _ := sr.ResponsesOut(16)
		f.m10 = m10s[0]
		_, vals, _ := ParseResponseOut(f.p, 5, f.m10, 2)
		f.m11, _ = MarshalUserResponse(f.p, 5, 0, vals[0])
		fixture = f
	})
	if fixture == nil {
		t.Fatal("fixture failed")
	}
	return fixture
}

func seeds(f *testing.F, valid ...[]byte) {
	for _, v := range valid {
		f.Add(v)
		if len(v) > 12 {
			f.Add(v[:len(v)-1])
			w := append([]byte(nil), v...)
			w[12] ^= 0xff
			f.Add(w)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1, 2})
}

func FuzzParseRoundInfo(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m0)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := ParseRoundInfo(b)
		requireSentinel(t, err)
	})
}

func FuzzAdmitSubmission(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m1[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		ir, _ := fx.in.NewRound(fx.ri, []uint64{2, 2})
		_, m2, err := ir.Admit("u", b)
		requireSentinel(t, err)
		if err == nil {
			_, _, err = fx.sh.OpenForward(5, m2)
			requireSentinel(t, err)
		}
	})
}

func FuzzOpenForward(f *testing.F) {
	fx := getFixture(f)
	m2, _ := MarshalForward(fx.p, 5, 0, fx.m1[0][headerSize:len(fx.m1[0])-SeedSize])
	seeds(f, m2)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := fx.sh.OpenForward(5, b)
		requireSentinel(t, err)
	})
}

// freshShuffleRound returns a shuffle round with both fixture messages
// accepted (phase: collect).
func freshShuffleRound(fx *fuzzFixture) *ShuffleRound {
	sr, _ := fx.sh.NewRound(fx.ri, nil)
	ir, _ := fx.in.NewRound(fx.ri, []uint64{2, 2})
	for i, m1 := range fx.m1 {
		_, m2, _ := ir.Admit(string(rune('a'+i)), m1)
		idx, l, _ := fx.sh.OpenForward(5, m2)
		sr.Accept(idx, l)
	}
	return sr
}

func FuzzShuffleRoundMessages(f *testing.F) {
	fx := getFixture(f)
	// The first byte selects the step; the rest is the envelope.
	for step, m := range [][]byte{marshalClose(5, 2), fx.reply, fx.finish, fx.m9} {
		f.Add(append([]byte{byte(step)}, m...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		sr := freshShuffleRound(fx)
		step, msg := b[0]%4, b[1:]
		var err error
		if step == 0 {
			err = sr.Close(msg)
			requireSentinel(t, err)
			return
		}
		if err := sr.Close(marshalClose(5, 2)); err != nil {
			t.Fatal(err)
		}
		if _, err := sr.Challenge(); err != nil {
			t.Fatal(err)
		}
		if step == 1 {
			_, err = sr.Verdict(msg)
			requireSentinel(t, err)
			return
		}
		// The fixture reply was computed for another challenge; it still
		// parses and drives the round to Finish.
		if _, err := sr.Verdict(fx.reply); err != nil {
			t.Fatal(err)
		}
		if step == 2 {
			_, err = sr.Finish(msg)
			requireSentinel(t, err)
			return
		}
		if _, err := sr.Finish(fx.finish); err != nil {
			return // Y from another round's shares may fail the size bound
		}
		requireSentinel(t, sr.AcceptResponses(msg))
	})
}

func FuzzIntegratorRoundMessages(f *testing.F) {
	fx := getFixture(f)
	for step, m := range [][]byte{fx.challenge, fx.verdict, fx.summary} {
		f.Add(append([]byte{byte(step)}, m...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		ir, _ := fx.in.NewRound(fx.ri, []uint64{2, 2})
		for i, m1 := range fx.m1 {
			ir.Admit(string(rune('a'+i)), m1)
		}
		ir.Close()
		step, msg := b[0]%3, b[1:]
		if step == 0 {
			_, err := ir.Reply(msg)
			requireSentinel(t, err)
			return
		}
		if _, err := ir.Reply(fx.challenge); err != nil {
			t.Fatal(err)
		}
		if step == 1 {
			_, err := ir.Finish(msg)
			requireSentinel(t, err)
			return
		}
		ir.Finish(fx.verdict)
		_, _, err := ir.AcceptSummary(msg)
		requireSentinel(t, err)
	})
}

func FuzzOpenShuffled(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m4)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := fx.in.OpenShuffled(5, b, 64, nil)
		requireSentinel(t, err)
	})
}

func FuzzParseTables(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.cmdTable, fx.respTable)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := ParseCommandTable(fx.p, 5, 0, 4, b)
		requireSentinel(t, err)
		_, _, err = ParseResponseTable(fx.p, 5, 0, 4, 1024, b)
		requireSentinel(t, err)
	})
}

func FuzzDeviceReceive(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m6)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDevice(&fx.secret, fx.p, time.Minute)
		_, slots, err := d.ReceiveCommands(b, time.Now())
		requireSentinel(t, err)
		for _, s := range slots {
			requireSentinel(t, s.Err)
		}
	})
}

func FuzzVendorAcceptResponse(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m7)
	v, _ := NewVendor(0, fx.p, [][KeySize]byte{fx.dev.Keys.PRF})
	f.Fuzz(func(t *testing.T, b []byte) {
		vr, _ := v.NewRound(fx.ri, []int{0})
		requireSentinel(t, vr.AcceptResponse(0, b))
	})
}

func FuzzResponseEnvelopes(f *testing.F) {
	fx := getFixture(f)
	seeds(f, fx.m9, fx.m10, fx.m11)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := ParseResponseOut(fx.p, 5, b, 2)
		requireSentinel(t, err)
		_, _, err = ParseResponseLayer(fx.p, 5, b, 64)
		requireSentinel(t, err)
		_, err = fx.pc[0].OpenResponse(b)
		requireSentinel(t, err)
		_, err = ParseShuffleSummary(5, b)
		requireSentinel(t, err)
		_, _, err = ParseDelivery(fx.p, b)
		requireSentinel(t, err)
	})
}

func FuzzPlaintexts(f *testing.F) {
	cmd := Command{Payload: []byte("abc")}
	pt, _ := cmd.marshal(128)
	f.Add(pt)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := parseCommand(b)
		requireSentinel(t, err)
		if len(b) >= ResponseHeaderSize {
			_, _, err = parseResponse(b)
			requireSentinel(t, err)
		}
		_, err = parseShare(b, 3)
		requireSentinel(t, err)
	})
}

var _ = okvs.ErrMalformed
