package mohito

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"os"
	"testing"
	"time"
)

var updateVectors = flag.Bool("update", false, "rewrite testdata/formats.json")

// detReader is a deterministic byte stream (SHA-256 in counter mode) so the
// pinned vectors can be regenerated bit for bit.
type detReader struct {
	seed [32]byte
	ctr  uint64
	buf  []byte
}

func newDetReader(label string) *detReader { return &detReader{seed: sha256.Sum256([]byte(label))} }

func (d *detReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(d.buf) == 0 {
			var c [8]byte
			for i := range 8 {
				c[i] = byte(d.ctr >> (8 * i))
			}
			d.ctr++
			s := sha256.Sum256(append(d.seed[:], c[:]...))
			d.buf = s[:]
		}
		k := copy(p[n:], d.buf)
		d.buf = d.buf[k:]
		n += k
	}
	return n, nil
}

// formatVectors pins the package's own formats. Everything here is a
// deterministic function of fixed inputs, except M1, whose HPKE layers are
// randomized: it is pinned in the opening direction (fixed keys, fixed bytes,
// expected fields).
type formatVectors struct {
	DeviceSecret string `json:"device_secret"`
	PRFKey       string `json:"k_prf"`
	AEKey        string `json:"k_ae"`
	IDs          []struct {
		J uint32 `json:"j"`
		T uint64 `json:"t"`
		Z string `json:"z"`
	} `json:"ephemeral_ids"`
	ShareSeed   string   `json:"share_seed"`
	ShareX1     []uint64 `json:"share_x1"`
	ShareA1     uint64   `json:"share_a1"`
	ShareC1     uint64   `json:"share_c1"`
	CheckSeed   string   `json:"check_seed"`
	CheckR      []uint64 `json:"check_r"`
	Command     string   `json:"command_plaintext"`
	RoundInfo   string   `json:"round_info"`
	Close       string   `json:"close"`
	Summary     string   `json:"shuffle_summary"`
	RespKey     string   `json:"resp_key"`
	RespLayerI  string   `json:"resp_layer_integrator_64_zero"`
	IKMI        string   `json:"ikm_integrator"`
	IKMV        string   `json:"ikm_shuffler"`
	M1          string   `json:"m1"`
	M1Vendor    uint32   `json:"m1_vendor"`
	M1Z         string   `json:"m1_z"`
	M1Payload   string   `json:"m1_payload"`
	M1SharedSum []uint64 `json:"m1_x1_plus_x2"`
}

func vectorParams() Params {
	return Params{Vendors: 3, Q: 2, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519}
}

func buildVectors(t *testing.T) formatVectors {
	var v formatVectors
	r := newDetReader("mohito format vectors")
	var s DeviceSecret
	r.Read(s[:])
	k := s.Keys()
	v.DeviceSecret, v.PRFKey, v.AEKey = hex.EncodeToString(s[:]), hex.EncodeToString(k.PRF[:]), hex.EncodeToString(k.AE[:])
	for _, jt := range []struct {
		j uint32
		t uint64
	}{{1, 1}, {2, 1}, {1, 1 << 40}} {
		z := DeriveEphemeralID(&k.PRF, jt.j, jt.t)
		v.IDs = append(v.IDs, struct {
			J uint32 `json:"j"`
			T uint64 `json:"t"`
			Z string `json:"z"`
		}{jt.j, jt.t, hex.EncodeToString(z[:])})
	}
	var seed ShareSeed
	r.Read(seed[:])
	sh := seed.Expand(3)
	v.ShareSeed = hex.EncodeToString(seed[:])
	for _, e := range sh.X {
		v.ShareX1 = append(v.ShareX1, uint64(e))
	}
	v.ShareA1, v.ShareC1 = uint64(sh.A), uint64(sh.C)
	var cs CheckSeed
	r.Read(cs[:])
	v.CheckSeed = hex.EncodeToString(cs[:])
	for _, e := range NewCheckVector(&cs, 3).r {
		v.CheckR = append(v.CheckR, uint64(e))
	}
	cmd := Command{Timestamp: time.Unix(1_750_000_000, 5), Payload: []byte("turn on")}
	r.Read(cmd.ID[:])
	r.Read(cmd.IntegratorRespKey[:])
	r.Read(cmd.ShufflerRespKey[:])
	pt, _ := cmd.marshal(128)
	v.Command = hex.EncodeToString(pt)

	p := vectorParams()
	ikmI, ikmV := make([]byte, 32), make([]byte, 32)
	r.Read(ikmI)
	r.Read(ikmV)
	v.IKMI, v.IKMV = hex.EncodeToString(ikmI), hex.EncodeToString(ikmV)
	ki, _ := DeriveKey(p.Suite, ikmI)
	kv, _ := DeriveKey(p.Suite, ikmV)
	ri := &RoundInfo{T: 77, Shuffler: 2, Params: p, IntegratorKey: ki.PublicKey(), ShufflerKey: kv.PublicKey(), IntegratorEpoch: 7, VendorEpochs: []uint32{1, 0, 3}}
	m0, err := ri.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	v.RoundInfo = hex.EncodeToString(m0)
	v.Close = hex.EncodeToString(marshalClose(77, 1234))
	v.Summary = hex.EncodeToString(marshalSummary(77, ShuffleSummary{N: 500, S: 3}))
	var rk [KeySize]byte
	r.Read(rk[:])
	ks := make([]byte, 64)
	xorRespLayer(ks, &rk, &nonceRespIntegrator)
	v.RespKey, v.RespLayerI = hex.EncodeToString(rk[:]), hex.EncodeToString(ks)
	return v
}

func TestFormatVectors(t *testing.T) {
	got := buildVectors(t)
	path := "testdata/formats.json"
	if *updateVectors {
		// M1 is randomized: generate it once and pin it.
		p := vectorParams()
		ki, _ := DeriveKey(p.Suite, unhex(t, got.IKMI))
		kv, _ := DeriveKey(p.Suite, unhex(t, got.IKMV))
		ri := &RoundInfo{T: 77, Shuffler: 2, Params: p, IntegratorKey: ki.PublicKey(), ShufflerKey: kv.PublicKey(), IntegratorEpoch: 7, VendorEpochs: []uint32{1, 0, 3}}
		var s DeviceSecret
		copy(s[:], unhex(t, got.DeviceSecret))
		dev := DeviceCredentials{Vendor: 1, Keys: s.Keys()}
		m1, pc, err := IssueCommand(ri, &dev, 2, []byte("open door"), time.Unix(1_750_000_000, 0), newDetReader("m1"))
		if err != nil {
			t.Fatal(err)
		}
		got.M1, got.M1Vendor, got.M1Z, got.M1Payload = hex.EncodeToString(m1), 1, hex.EncodeToString(pc.Z[:]), "open door"
		got.M1SharedSum = []uint64{0, 1, 0}
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want formatVectors
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	m1 := want
	want.M1, want.M1Vendor, want.M1Z, want.M1Payload, want.M1SharedSum = "", 0, "", "", nil
	got.M1, got.M1Vendor, got.M1Z, got.M1Payload, got.M1SharedSum = "", 0, "", "", nil
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("format vectors changed:\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if _, err := ParseRoundInfo(unhex(t, want.RoundInfo)); err != nil {
		t.Fatalf("pinned round info does not parse: %v", err)
	}
	checkPinnedM1(t, &m1)
}

// checkPinnedM1 opens the pinned M1 with the pinned keys through every stage.
func checkPinnedM1(t *testing.T, v *formatVectors) {
	p := vectorParams()
	ki, _ := DeriveKey(p.Suite, unhex(t, v.IKMI))
	kv, _ := DeriveKey(p.Suite, unhex(t, v.IKMV))
	outer, seed, err := ParseSubmission(p, 77, unhex(t, v.M1))
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := MarshalForward(p, 77, 0, outer)
	sh, _ := NewShuffler(2, p, kv, NewFakePool(p, ki.PublicKey()))
	_, layer, err := sh.OpenForward(77, m2)
	if err != nil {
		t.Fatal(err)
	}
	x1 := seed.Expand(p.Vendors)
	for i := range p.Vendors {
		if uint64(x1.X[i].Add(layer.Share.X[i])) != v.M1SharedSum[i] {
			t.Fatal("pinned shares do not reconstruct e_v")
		}
	}
	in, _ := NewIntegrator(p, ki)
	var c ShuffledCommand
	if err := in.OpenInner(0, layer.Inner, &c); err != nil {
		t.Fatal(err)
	}
	if c.Vendor != v.M1Vendor || hex.EncodeToString(c.Z[:]) != v.M1Z {
		t.Fatal("pinned inner layer fields differ")
	}
	var s DeviceSecret
	copy(s[:], unhex(t, v.DeviceSecret))
	keys := s.Keys()
	pt, err := openDevice(&keys.AE, aadCommand, &c.Z, c.DeviceCiphertext)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := parseCommand(pt)
	if err != nil || string(cmd.Payload) != v.M1Payload {
		t.Fatalf("pinned command: %v", err)
	}
	if cmd.IntegratorRespKey != c.RespKey || cmd.ShufflerRespKey != layer.RespKey {
		t.Fatal("response keys in the command differ from those in the layers")
	}
}

var _ io.Reader = (*detReader)(nil)
