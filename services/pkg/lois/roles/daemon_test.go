package roles

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

var (
	loisBinOnce sync.Once
	loisBin     string
	loisBinErr  error
)

// TestMain removes the lois binary buildLois made, if a test needed it.
func TestMain(m *testing.M) {
	code := m.Run()
	if loisBin != "" {
		os.RemoveAll(filepath.Dir(loisBin))
	}
	os.Exit(code)
}

// buildLois builds services/cmd/lois once per test binary (the registrar daemon under test).
func buildLois(t *testing.T) string {
	t.Helper()
	loisBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lois-bin-")
		if err != nil {
			loisBinErr = err
			return
		}
		loisBin = filepath.Join(dir, "lois")
		out, err := exec.Command(testenv.GoTool(), "build", "-o", loisBin, "github.com/obscura-iot/obscura/services/cmd/lois").CombinedOutput()
		if err != nil {
			loisBinErr = fmt.Errorf("build lois: %v\n%s", err, out)
		}
	})
	if loisBinErr != nil {
		t.Fatal(loisBinErr)
	}
	return loisBin
}

// registrarVault starts a Vault dev server with the Transit engine, the seed key and a token
// of a policy allowed only encrypt and decrypt with it; it returns the root client, the
// address and the token file.
func registrarVault(t *testing.T) (*vault.Client, string, string) {
	t.Helper()
	v := testenv.StartVault(t)
	c := v.Client(t)
	if err := c.Sys().Mount("transit", &vault.MountInput{Type: "transit"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Logical().Write("transit/keys/lois-seeds", map[string]any{"type": "aes256-gcm96"}); err != nil {
		t.Fatal(err)
	}
	policy := `path "transit/encrypt/lois-seeds" { capabilities = ["update"] }
path "transit/decrypt/lois-seeds" { capabilities = ["update"] }
path "transit/keys/lois-seeds" { capabilities = ["read"] }`
	if err := c.Sys().PutPolicy("lois-registrar", policy); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Auth().Token().Create(&vault.TokenCreateRequest{Policies: []string{"lois-registrar"}, NoParent: true})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "vault-token")
	if err := os.WriteFile(file, []byte(tok.Auth.ClientToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, v.Addr(), file
}

// registrarDaemon runs `lois registrar` and waits until it is ready; it returns the daemon
// and its metrics address.
func registrarDaemon(t *testing.T, args ...string) (*testenv.Daemon, string) {
	t.Helper()
	d, m, _ := registrarProcess(t, args...)
	return d, m
}

// registrarProcess is registrarDaemon that also returns the process (the test pauses it).
func registrarProcess(t *testing.T, args ...string) (*testenv.Daemon, string, *os.Process) {
	t.Helper()
	af := filepath.Join(t.TempDir(), "addr")
	args = append([]string{"registrar", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0", "--addr-file", af}, args...)
	cmd := exec.Command(buildLois(t), args...)
	d := testenv.StartDaemon(t, "lois-registrar", cmd)
	var health, metrics string
	testenv.Eventually(t, 60*time.Second, "registrar addresses", func() error {
		if err := d.Exited(); err != nil {
			return err
		}
		b, err := os.ReadFile(af)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, telemetry.AddrHealth+"="); ok {
				health = v
			}
			if v, ok := strings.CutPrefix(l, telemetry.AddrMetrics+"="); ok {
				metrics = v
			}
		}
		if health == "" || metrics == "" {
			return fmt.Errorf("addr file: %q", b)
		}
		return nil
	})
	d.Get(t, 60*time.Second, health, "/readyz")
	return d, metrics, cmd.Process
}

// metricValues reads samples of one scrape of the daemon's /metrics ("name{labels} value").
func metricValues(t *testing.T, d *testenv.Daemon, addr string, series ...string) []float64 {
	t.Helper()
	out := make([]float64, len(series))
	for _, l := range strings.Split(d.Get(t, 10*time.Second, addr, "/metrics"), "\n") {
		for i, s := range series {
			if v, ok := strings.CutPrefix(l, s+" "); ok {
				fmt.Sscan(v, &out[i])
			}
		}
	}
	return out
}

func metricValue(t *testing.T, d *testenv.Daemon, addr, series string) float64 {
	t.Helper()
	return metricValues(t, d, addr, series)[0]
}

// daemonPath is a CI, an SI and a device around a running registrar daemon: the CI and
// the SI follow the session stream, the device opened its session with a HELLO to the daemon
// and replenishes through it (NATSControl); every stream the device was handed is recorded.
type daemonPath struct {
	t              *testing.T
	js             jetstream.JetStream
	m              *Metrics
	devTUN, srvTUN *memTUN
	dev            *Device
	keys           *contract.Keys // the HELLO answer
	keyless        countingInstaller
	heldMu         sync.Mutex
	held           []*contract.Keys
}

// newRecordKeyFile writes a fresh session record key file and returns its path and sealer.
func newRecordKeyFile(t *testing.T) (string, *RecordSeal) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(f, NewRecordKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ReadRecordKey(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, s
}

// countingInstaller counts the records a follower installed.
type countingInstaller struct{ n atomic.Int64 }

func (c *countingInstaller) InstallSession(*contract.Keys) error { c.n.Add(1); return nil }

// startDaemonPath: the CI and SI open the records with seal; keyless adds a follower without
// the record key.
func startDaemonPath(t *testing.T, srv *testenv.NATS, n int, seal *RecordSeal, keyless bool) *daemonPath {
	t.Helper()
	js := srv.JetStream(t)
	nc := js.Conn()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	p := &daemonPath{t: t, js: js, m: NewMetrics(nil), devTUN: newMemTUN(), srvTUN: newMemTUN()}
	m, log, core := p.m, telemetry.Discard(), lois.Config{CIP: cip}
	diWire, ciWire, siWire := udp(t), udp(t), udp(t)
	s, err := NewServer(ServerConfig{Core: core, Ports: map[uint16]uint16{pSrv: sid}, TUN: p.srvTUN, Wire: siWire,
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log, LowWaterMin: 1, ExhaustQueue: 10 * time.Second,
		LowWater: func(session string, sid uint16) error {
			return nc.Publish(contract.SubjectLowWater("c1", session, sid), nil)
		}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCloud(CloudConfig{Core: core, Wire: ciWire, Grace: time.Minute, Metrics: m, Log: log,
		Backends: []ServerBackend{{SID: sid, Backend: lois.Backend{IP: sip, Port: pSrv}, Wire: addrOf(siWire)}}})
	if err != nil {
		t.Fatal(err)
	}
	goRun(c.Run)
	goRun(s.Run)
	goRun(func(ctx context.Context) error { return FollowSealed(ctx, js, "c1", "ci-0", 0, seal, c, log) })
	goRun(func(ctx context.Context) error { return FollowSealed(ctx, js, "c1", "si-0", 0, seal, s, log) })
	if seal != nil && keyless {
		// A reader of the stream without the record key installs nothing.
		goRun(func(ctx context.Context) error { return Follow(ctx, js, "c1", "keyless-0", 0, &p.keyless, log) })
	}

	hctx, hcancel := context.WithTimeout(ctx, 30*time.Second)
	keys, err := Hello(hctx, nc, "c1", contract.HelloRequest{DeviceIP: netip.AddrFrom4(dip).String(),
		DeviceWire: addrOf(diWire).String(), Services: []uint16{sid}})
	hcancel()
	if err != nil {
		t.Fatal(err)
	}
	if keys.ControlKey() == nil || len(keys.Streams) != 2 || keys.Streams[0].N != uint32(n) {
		t.Fatalf("HELLO answer: control key %v, %d streams", keys.ControlKey() != nil, len(keys.Streams))
	}
	p.keys, p.held = keys, []*contract.Keys{keys}
	ctl, err := NewNATSControl(nc, "c1", keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	rec := &recordingControl{NATSControl: ctl, held: &p.held, mu: &p.heldMu}
	p.dev, err = NewDevice(DeviceConfig{Core: core, Keys: keys, TUN: p.devTUN, Wire: diWire, Cloud: addrOf(ciWire),
		Margin: time.Minute, Grace: time.Minute, Metrics: m, Log: log, Control: rec, LowWaterMin: 1, ExhaustQueue: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ServeGrants(&recordingDevice{Device: p.dev, held: &p.held, mu: &p.heldMu}); err != nil {
		t.Fatal(err)
	}
	p.dev.SendReady(ctx)
	goRun(p.dev.Run)
	return p
}

// exchange sends rounds packets from the device and as many replies, each waiting for the
// previous one.
func (p *daemonPath) exchange(from, rounds int) {
	t := p.t
	t.Helper()
	for i := from; i < from+rounds; i++ {
		p.devTUN.in <- tcp(dip, cip, dport, sid, uint32(i), 1, 0x18, []byte("ping"))
		if got := p.srvTUN.next(t); [4]byte(got[12:16]) != dip || !lois.ChecksumsValid(got) {
			t.Fatalf("packet %d at the server: %x", i, got[:40])
		}
		p.srvTUN.in <- tcp(sip, dip, pSrv, dport, 1, uint32(i), 0x18, []byte("pong"))
		if got := p.devTUN.next(t); [4]byte(got[12:16]) != cip || !lois.ChecksumsValid(got) {
			t.Fatalf("reply %d at the device: %x", i, got[:40])
		}
	}
}

func (p *daemonPath) count(role, dir, result string) float64 {
	return testutil.ToFloat64(p.m.Packets.WithLabelValues(role, dir, result))
}

// checkClean: no receiver met an unknown or replayed id, no sender dropped a packet as
// exhausted.
func (p *daemonPath) checkClean(phase string) {
	t := p.t
	t.Helper()
	for _, rc := range []struct{ role, dir string }{{"ci", "up"}, {"si", "up"}, {"di", "down"}} {
		for _, r := range []string{contract.ResultReplay, contract.ResultUnknownID} {
			if v := p.count(rc.role, rc.dir, r); v != 0 {
				t.Errorf("%s: %s %s counted %v %s", phase, rc.role, rc.dir, v, r)
			}
		}
	}
	for _, rc := range []struct{ role, dir string }{{"di", "up"}, {"si", "down"}} {
		if v := p.count(rc.role, rc.dir, contract.ResultExhausted); v != 0 {
			t.Errorf("%s: %s dropped %v packets as exhausted", phase, rc.role, v)
		}
	}
}

// epochsHandedOnce checks that no (session, direction, epoch) reached the device twice.
func (p *daemonPath) epochsHandedOnce() {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	seen := map[string]bool{}
	for _, k := range p.held {
		for _, st := range k.Streams {
			key := fmt.Sprintf("%s/%s/%d", k.Session, st.Dir, st.Epoch)
			if seen[key] {
				p.t.Errorf("epoch %s handed to the device twice", key)
			}
			seen[key] = true
		}
	}
}

// TestRegistrarDaemonReplenishesDeviceOverNATS: the registrar runs as its own process (`lois
// registrar`, seeds wrapped by a real Vault's Transit engine) on a real nats-server; a CI and
// an SI follow the session stream; a device opens its session with a HELLO to the daemon and
// exchanges 6 × 64 packets each way with epochs of 64 keystreams and no low-water margin, so
// each pool runs empty: the DI holds the packet, sends EPOCH_REQ through the daemon, gets
// the grant (installed at the CI and the SI first) and carries on; the SI's low-water events
// bring download grants through the daemon to the DI. Every exchange completes, nothing is
// dropped, no receiver meets an unknown or replayed id. Then the registrar is restarted: it
// restores the session from its store (unwrapping the seed with Vault) and the device keeps
// talking across further epochs, none reusing an epoch number. Finally the registrar's store
// (the LOIS_REGISTRAR bucket through the API, and every file of the NATS server's storage)
// holds the seed only wrapped: neither the seed (raw, hex or base64, as Vault unwraps it with
// the root token) nor the device's control and stream keys appear.
func TestRegistrarDaemonReplenishesDeviceOverNATS(t *testing.T) {
	const n, perPhase = 64, 6 * 64
	root, vaultAddr, tokenFile := registrarVault(t)
	srv := testenv.StartNATS(t)
	keyFile, seal := newRecordKeyFile(t)
	args := []string{"--nats-url", srv.URL(), "--cloud", "c1", "--services", fmt.Sprint(sid), "--n", fmt.Sprint(n),
		"--wait-for", "ci-0,si-0", "--lifetime", "1h", "--vault-addr", vaultAddr, "--vault-token-file", tokenFile,
		"--record-key-file", keyFile}
	// Everything published under the cloud's subjects, as any subscriber sees it.
	wire := captureSubjects(t, srv, "lois.>")
	reg, metricsAddr, proc := registrarProcess(t, args...)

	p := startDaemonPath(t, srv, n, seal, true)

	// The registrar is paused while the first epoch is used: the device's 65th packet finds its
	// pool empty and is held, its EPOCH_REQ unanswered; the registrar resumes, the grant
	// comes, the packet goes, and the reply (the SI's pool is empty too) likewise.
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.exchange(0, n)
	p.devTUN.in <- tcp(dip, cip, dport, sid, n, 1, 0x18, []byte("ping"))
	testenv.Eventually(t, 10*time.Second, "the DI holds a packet for its empty pool", func() error {
		if q := testutil.ToFloat64(p.m.ExhaustQueued.WithLabelValues("di")); q != 1 {
			return fmt.Errorf("%v held", q)
		}
		return nil
	})
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := p.srvTUN.next(t); [4]byte(got[12:16]) != dip {
		t.Fatalf("the held packet at the server: %x", got[:40])
	}
	p.srvTUN.in <- tcp(sip, dip, pSrv, dport, 1, n, 0x18, []byte("pong"))
	if got := p.devTUN.next(t); [4]byte(got[12:16]) != cip {
		t.Fatalf("the held reply at the device: %x", got[:40])
	}
	p.exchange(n+1, perPhase-n-1)
	p.checkClean("before the restart")
	// One scrape; a grant still in flight is counted granted before it is answered.
	vs := metricValues(t, reg, metricsAddr, `lois_epochs_granted_total{dir="up",role="registrar"}`,
		`lois_epochs_granted_total{dir="down",role="registrar"}`, `lois_registrar_requests_total{kind="epoch",result="ok"}`)
	up, down := vs[0], vs[1]
	if up < 4 || down < 4 { // 6 epochs' worth: ≥ 5 grants each, the last perhaps still counting
		t.Fatalf("the registrar daemon granted %v upload and %v download epochs, want ≥ 4 each", up, down)
	}
	if v := vs[2]; v != up && v != up-1 {
		t.Errorf("%v EPOCH_REQs answered ok, %v upload grants", v, up)
	}
	t.Logf("before the restart: %v upload and %v download epochs granted by the daemon, %v packets held for a grant",
		up, down, testutil.ToFloat64(p.m.ExhaustQueued.WithLabelValues("di")))

	// Restart: the session comes back from the store, the epochs carry on.
	reg.Stop(t)
	reg, metricsAddr = registrarDaemon(t, args...)
	if v := metricValue(t, reg, metricsAddr, "lois_registrar_sessions"); v != 1 {
		t.Fatalf("restarted registrar holds %v sessions, want the 1 restored", v)
	}
	p.exchange(perPhase, perPhase/2)
	p.checkClean("after the restart")
	if up2 := metricValue(t, reg, metricsAddr, `lois_epochs_granted_total{dir="up",role="registrar"}`); up2 < 2 {
		t.Errorf("the restarted registrar granted %v upload epochs, want ≥ 2", up2)
	}
	p.epochsHandedOnce()

	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	seed := scanRegistrarStore(t, root, p.js, srv.Server.JetStreamConfig().StoreDir, p.keys.Session, p.held)
	scanSessionStream(t, p, seed, wire)
}

// capture is every message seen on a subject filter.
type capture struct {
	mu   sync.Mutex
	msgs [][]byte
}

// captureSubjects subscribes to filter on the server with a connection of its own and keeps
// every message's subject, headers and data.
func captureSubjects(t *testing.T, srv *testenv.NATS, filter string) *capture {
	t.Helper()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &capture{}
	if _, err := nc.Subscribe(filter, func(m *nats.Msg) {
		b := []byte(m.Subject)
		for k, vs := range m.Header {
			for _, v := range vs {
				b = append(b, k+": "+v+"\n"...)
			}
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, append(b, m.Data...))
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// scanSessionStream: the session records are sealed. Every message of LOIS_SESSIONS (read
// back from the stream) and everything captured on the cloud's subjects is searched for the
// seed, every stream key the device was handed and the first 16 keystreams of each of its
// streams (raw, hex, base64): none appears. A follower without the record key installed no
// record. The search itself finds the keys in a record marshalled in clear.
func scanSessionStream(t *testing.T, p *daemonPath, seed []byte, wire *capture) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := p.js.Stream(ctx, contract.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted by max age: nothing to scan
		}
		if !bytes.HasPrefix(m.Data, []byte(recordMagic2)) {
			t.Errorf("record %d on %s is not sealed", seq, m.Subject)
		}
		stored = append(stored, m.Data)
	}
	if len(stored) < 3 {
		t.Fatalf("%d records in %s, want the session, its grants and READY", len(stored), contract.StreamSessions)
	}
	secrets := map[string][]byte{"seed": seed}
	for i, k := range p.held {
		for _, s := range k.Streams {
			b, _ := hex.DecodeString(s.Key)
			secrets[fmt.Sprintf("held %d: %s stream key epoch %d", i, s.Dir, s.Epoch)] = b
			core, err := s.Core()
			if err != nil {
				t.Fatal(err)
			}
			for j := uint32(0); j < 16 && j < core.N; j++ {
				pr := lois.Segment(&core.Key, j)
				secrets[fmt.Sprintf("held %d: %s epoch %d keystream %d", i, s.Dir, s.Epoch, j)] = bytes.Clone(pr.KS[:])
			}
		}
	}
	forms := func(b []byte) [][]byte {
		return [][]byte{b, []byte(hex.EncodeToString(b)), []byte(base64.StdEncoding.EncodeToString(b)), []byte(base64.RawURLEncoding.EncodeToString(b))}
	}
	found := func(blobs [][]byte) []string {
		var out []string
		for name, s := range secrets {
			for _, f := range forms(s) {
				for _, b := range blobs {
					if bytes.Contains(b, f) {
						out = append(out, name)
					}
				}
			}
		}
		return out
	}
	wire.mu.Lock()
	captured := slices.Clone(wire.msgs)
	wire.mu.Unlock()
	if leaks := found(stored); len(leaks) > 0 {
		t.Errorf("the session stream holds %v", leaks)
	}
	if leaks := found(captured); len(leaks) > 0 {
		t.Errorf("messages on the cloud's subjects hold %v", leaks)
	}
	clearRecord, _ := json.Marshal(p.held[len(p.held)-1])
	if len(found([][]byte{clearRecord})) == 0 {
		t.Fatal("the search does not find a stream key in a record in clear")
	}
	if k := p.keyless.n.Load(); k != 0 {
		t.Errorf("a follower without the record key installed %d records", k)
	}
	t.Logf("%d sealed records and %d captured messages scanned for %d secrets in 4 encodings", len(stored), len(captured), len(secrets))
}

// scanRegistrarStore checks the registrar's bucket and the NATS server's files: the session's
// entry holds a Transit ciphertext that Vault unwraps to the seed, and neither that seed nor
// any control or stream key the device holds appears anywhere in them.
func scanRegistrarStore(t *testing.T, root *vault.Client, js jetstream.JetStream, storeDir, session string, held []*contract.Keys) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, RegistrarBucket)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, "c1."+session)
	if err != nil {
		t.Fatalf("the session is not in the registrar's store: %v", err)
	}
	var e storedSession
	if err := json.Unmarshal(ent.Value(), &e); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.WrappedSeed, "vault:v1:") {
		t.Fatalf("stored seed %.12q… is not a Transit ciphertext", e.WrappedSeed)
	}
	sec, err := root.Logical().Write("transit/decrypt/lois-seeds", map[string]any{"ciphertext": e.WrappedSeed})
	if err != nil {
		t.Fatal(err)
	}
	pt, err := base64.StdEncoding.DecodeString(sec.Data["plaintext"].(string))
	if err != nil || len(pt) != len(session)+lois.SeedSize || string(pt[:len(session)]) != session {
		t.Fatalf("the wrapped seed does not unwrap to session‖seed (%d bytes)", len(pt))
	}
	seed := pt[len(session):]
	secrets := map[string][]byte{"seed": seed}
	for i, k := range held {
		if c := k.ControlKey(); c != nil {
			secrets[fmt.Sprintf("control key %d", i)] = c
		}
		for _, st := range k.Streams {
			b, _ := hex.DecodeString(st.Key)
			secrets[fmt.Sprintf("%s stream key epoch %d", st.Dir, st.Epoch)] = b
		}
	}
	forms := func(b []byte) [][]byte {
		return [][]byte{b, []byte(hex.EncodeToString(b)), []byte(base64.StdEncoding.EncodeToString(b)), []byte(base64.RawURLEncoding.EncodeToString(b))}
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var values [][]byte
	for k := range lister.Keys() {
		v, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v.Value())
	}
	files := 0
	err = filepath.WalkDir(storeDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for name, s := range secrets {
			for _, f := range forms(s) {
				if bytes.Contains(b, f) {
					t.Errorf("%s found in NATS storage file %s", name, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		for name, s := range secrets {
			for _, f := range forms(s) {
				if bytes.Contains(v, f) {
					t.Errorf("%s found in the registrar's store", name)
				}
			}
		}
	}
	if files == 0 || len(values) == 0 {
		t.Fatalf("nothing scanned: %d files, %d entries", files, len(values))
	}
	t.Logf("scanned %d store entries and %d NATS storage files for %d secrets in 4 encodings", len(values), files, len(secrets))
	return seed
}

// recordingControl and recordingDevice keep a copy of every grant the device gets (the test
// scans the store for their keys and checks no epoch is handed out twice).
type recordingControl struct {
	*NATSControl
	held *[]*contract.Keys
	mu   *sync.Mutex
}

func (r *recordingControl) RequestEpoch(ctx context.Context, session string, sid uint16) (*contract.Keys, error) {
	k, err := r.NATSControl.RequestEpoch(ctx, session, sid)
	if err == nil {
		c := *k
		r.mu.Lock()
		*r.held = append(*r.held, &c)
		r.mu.Unlock()
	}
	return k, err
}

type recordingDevice struct {
	*Device
	held *[]*contract.Keys
	mu   *sync.Mutex
}

func (r *recordingDevice) InstallGrant(k *contract.Keys) error {
	c := *k
	r.mu.Lock()
	*r.held = append(*r.held, &c)
	r.mu.Unlock()
	return r.Device.InstallGrant(k)
}

// TestRegistrarDaemonRekeyOverNATS (spec §3.12 full rekey through the daemon): `lois
// registrar --seed-store memory --rekey-streams 256` lets a seed give four epochs of 64 (the
// session's first up and down epochs and two grants); the next EPOCH_REQ is answered
// rekey_due, the DI asks the daemon for a full rekey (sealed under the old session's control
// key), gets a new session with its own control key and carries on, its download grants now
// coming on the new session's subject. 8 × 64 exchanges cross several rekeys: every one
// completes, no receiver meets an unknown or replayed id, nothing is dropped, no epoch of any
// session reaches the device twice, and the daemon holds only the live sessions.
func TestRegistrarDaemonRekeyOverNATS(t *testing.T) {
	const n = 64
	srv := testenv.StartNATS(t)
	keyFile, seal := newRecordKeyFile(t)
	reg, metricsAddr := registrarDaemon(t, "--nats-url", srv.URL(), "--cloud", "c1", "--services", fmt.Sprint(sid),
		"--n", fmt.Sprint(n), "--wait-for", "ci-0,si-0", "--seed-store", "memory", "--rekey-streams", fmt.Sprint(4*n),
		"--record-key-file", keyFile)
	p := startDaemonPath(t, srv, n, seal, false)
	first := p.dev.Session()
	p.exchange(0, 8*n)
	p.checkClean("across rekeys")
	p.epochsHandedOnce()
	vs := metricValues(t, reg, metricsAddr, `lois_registrar_requests_total{kind="rehello",result="ok"}`,
		`lois_registrar_requests_total{kind="epoch",result="rekey_due"}`, "lois_registrar_sessions")
	due := testutil.ToFloat64(p.m.RekeysDue.WithLabelValues("di"))
	if vs[0] < 1 || vs[1] < 1 || due < 1 || p.dev.Session() == first {
		t.Fatalf("rekeys: %v answered, %v EPOCH_REQs due at the daemon, %v at the DI; session changed %v",
			vs[0], vs[1], due, p.dev.Session() != first)
	}
	if vs[2] != 1 {
		t.Errorf("the daemon holds %v sessions after the rekeys, want only the live one", vs[2])
	}
	sessions := map[string]bool{}
	p.heldMu.Lock()
	for _, k := range p.held {
		sessions[k.Session] = true
	}
	p.heldMu.Unlock()
	t.Logf("%d exchanges over %d sessions (%v rekeys)", 8*n, len(sessions), vs[0])
}
