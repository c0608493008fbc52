package pda

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
	"github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// binary is the pda binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	testenv.RunWithBinary(m, "github.com/obscura-iot/obscura/services/cmd/pda", &binary)
}

const (
	// longWindow does not end during a test: the tests that check exact counts close their
	// windows themselves, as Mixer.Close does, by writing the closed state to the proxy's
	// window bucket (the mixer then seals after the grace), so that every submission of a
	// test lands in one window however slow the machine. shortWindow ends on its own.
	longWindow  = 5 * time.Minute
	shortWindow = 2 * time.Second
	grace       = 500 * time.Millisecond
	tau         = 3
	// keysFlag names the key bundle of the proxy-domain and DB roles.
	keysFlag = "--keys"
)

var shards = []string{"shard-a", "shard-b"}

func pw(user string) string { return user + "-e2e-pw" }

// hermeticEnv is the test's environment without OBSCURA_* variables: every flag falls back
// to one, and a developer's shell must not configure the roles under test.
func hermeticEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OBSCURA_") })
}

// role is one daemon process and what it takes to start it again.
type role struct {
	name, sub, user string
	args            []string
	addrFile        string
	cmd             *exec.Cmd
	d               *testenv.Daemon
	health, metrics string
}

// capture records every message published in one NATS account.
type capture struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (c *capture) add(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, &nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Data: bytes.Clone(m.Data)})
}

func (c *capture) snapshot() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// submission is one participant's accepted items of one key in one window.
type submission struct {
	window uint64
	who    string
	key    pda.Key
}

// ledger is what the participants had accepted, and the session ids they were given.
type ledger struct {
	mu       sync.Mutex
	subs     []submission
	sessions [][]byte
}

func (l *ledger) add(w uint64, who string, obs []pda.Observation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range obs {
		l.subs = append(l.subs, submission{window: w, who: who, key: o.Key})
	}
}

func (l *ledger) session(sid []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions = append(l.sessions, slices.Clone(sid))
}

// windows returns the windows that hold accepted items.
func (l *ledger) windows() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, s := range l.subs {
		if !slices.Contains(out, s.window) {
			out = append(out, s.window)
		}
	}
	slices.Sort(out)
	return out
}

// want returns the keys of window w that must be revealed, with their counts: the distinct
// participants that reported the key, or in tuples mode its accepted items; only counts ≥ τ.
func (l *ledger) want(w uint64, mode string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	who := map[string]map[string]bool{}
	items := map[string]int{}
	for _, s := range l.subs {
		if s.window != w {
			continue
		}
		k := s.key.Text()
		if who[k] == nil {
			who[k] = map[string]bool{}
		}
		who[k][s.who] = true
		items[k]++
	}
	out := map[string]int{}
	for k := range who {
		n := len(who[k])
		if mode == "tuples" {
			n = items[k]
		}
		if n >= tau {
			out[k] = n
		}
	}
	return out
}

type cluster struct {
	t          *testing.T
	ctx        context.Context
	dir        string
	mode       string
	nats       *testenv.NATS
	dbJS       jetstream.JetStream
	proxyJS    jetstream.JetStream
	proxyRedis *testenv.Redis
	shardRedis map[string]*testenv.Redis
	proxyKeys  string
	dbKeys     string
	proxySec   *roles.ProxySecrets
	job        *roles.Job
	jobArgs    []string
	pki        *roles.PKI
	caFile     string
	listen     string
	people     []string
	roles      map[string]*role
	dbCap      *capture
	ledger     *ledger
}

// newCluster starts NATS with the PDA accounts, the proxy's and each shard's redis-server,
// writes the keys and the PKI, publishes the shard ring (the operator's job) and starts
// every role, waiting until each is ready.
func newCluster(t *testing.T, mode string, people int, window time.Duration) *cluster {
	t.Helper()
	c := &cluster{t: t, ctx: t.Context(), dir: t.TempDir(), mode: mode, roles: map[string]*role{},
		shardRedis: map[string]*testenv.Redis{}, dbCap: &capture{}, ledger: &ledger{}}
	c.nats = testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(pw)))
	// The DB domain's view: every message its account carries, from before any role runs.
	capNC := c.nats.Connect(t, nats.UserInfo(contract.DBUser, pw(contract.DBUser)))
	if _, err := capNC.Subscribe(">", c.dbCap.add); err != nil {
		t.Fatal(err)
	}
	if err := capNC.Flush(); err != nil {
		t.Fatal(err)
	}
	c.dbJS = c.nats.JetStream(t, nats.UserInfo(contract.DBUser, pw(contract.DBUser)))
	c.proxyJS = c.nats.JetStream(t, nats.UserInfo(contract.ProxyUser, pw(contract.ProxyUser)))
	if err := roles.EnsureDBDomain(c.ctx, c.dbJS); err != nil {
		t.Fatal(err)
	}
	r, err := ring.New(1, shards)
	if err != nil {
		t.Fatal(err)
	}
	if err := roles.PublishRing(c.ctx, c.kv(c.dbJS, contract.RingBucket), r); err != nil {
		t.Fatal(err)
	}

	c.proxyKeys = filepath.Join(c.dir, "proxy.json")
	c.dbKeys = filepath.Join(c.dir, "db.json")
	proxyPub := c.keygen("proxy", c.proxyKeys)
	dbPub := c.keygen("db", c.dbKeys)
	if c.proxySec, _, err = roles.LoadProxySecrets(c.proxyKeys); err != nil {
		t.Fatal(err)
	}
	c.jobArgs = []string{"--deployment", "e2e", "--group", "ristretto255", "--threshold", strconv.Itoa(tau),
		"--count-mode", mode, "--chunks", "1", "--db-public-key", dbPub, "--proxy-public-key", proxyPub,
		"--window", window.String(), "--grace", grace.String()}
	// The same job in-process, for the suites the privacy check derives needles from.
	c.job = &roles.Job{DeploymentID: "e2e", Group: pda.Ristretto255, Threshold: tau, CountMode: pda.CountDistinctParticipants,
		Chunks: 1, WindowLength: window, Grace: grace}
	if mode == "tuples" {
		c.job.CountMode = pda.CountTuples
	}
	if c.job.DBKey, err = hex.DecodeString(dbPub); err != nil {
		t.Fatal(err)
	}
	if c.job.ProxyKey, err = hex.DecodeString(proxyPub); err != nil {
		t.Fatal(err)
	}
	if err := c.job.Validate(); err != nil {
		t.Fatal(err)
	}

	if c.pki, err = roles.NewPKI(); err != nil {
		t.Fatal(err)
	}
	srv, err := c.pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	crt, key := c.writeCert("tls", srv.Certificates[0])
	c.caFile = c.write("ca.crt", c.pki.CAPEM())
	for i := range people {
		c.people = append(c.people, fmt.Sprintf("org%d-e2e-participant", i))
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c.listen = net.JoinHostPort(testenv.Host, strconv.Itoa(port))

	c.proxyRedis = testenv.StartRedis(t)
	for _, s := range shards {
		c.shardRedis[s] = testenv.StartRedis(t)
	}
	pu, du := contract.ProxyUser, contract.DBUser
	c.start("proxy", "proxy", pu, keysFlag, c.proxyKeys, "--listen", c.listen, "--reuse-port", "--tls-cert", crt, "--tls-key", key,
		"--client-ca", c.caFile, "--participants", strings.Join(c.people, ","), "--redis-addr", c.proxyRedis.Addr(), "--max-batch", "1000")
	c.start("mixer", "mixer", pu, keysFlag, c.proxyKeys, "--chunk-items", "16", "--poll", "200ms")
	c.start("oracle", "oracle", pu, keysFlag, c.proxyKeys)
	c.start("db-frontend", "db-frontend", du, keysFlag, c.dbKeys, "--workers", "1")
	for _, s := range shards {
		c.start(s, "db-shard", du, "--shard-id", s, "--redis-addr", c.shardRedis[s].Addr())
	}
	for _, r := range c.roles {
		c.waitReady(r)
	}
	c.waitIngress("proxy")
	return c
}

func (c *cluster) write(name string, b []byte) string {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// writeCert writes a certificate and its key as PEM files and returns their paths.
func (c *cluster) writeCert(name string, cert tls.Certificate) (string, string) {
	c.t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.write(name+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})),
		c.write(name+".key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// passwordFile writes user's password file once.
func (c *cluster) passwordFile(user string) string {
	p := filepath.Join(c.dir, "pw-"+user)
	if _, err := os.Stat(p); err != nil {
		c.write("pw-"+user, []byte(pw(user)+"\n"))
	}
	return p
}

// keygen runs `pda keygen` for role and returns the printed public key.
func (c *cluster) keygen(role, out string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "keygen", "--role", role, "--group", "ristretto255", "--out", out)
	cmd.Env = hermeticEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("pda keygen --role %s: %v\n%s", role, err, stderr.String())
	}
	return strings.TrimSpace(string(b))
}

func (c *cluster) kv(js jetstream.JetStream, bucket string) jetstream.KeyValue {
	c.t.Helper()
	kv, err := js.KeyValue(c.ctx, bucket)
	if err != nil {
		c.t.Fatalf("bucket %s: %v", bucket, err)
	}
	return kv
}

// start runs `pda <sub>` as name with the NATS credentials of user, the job flags and args.
func (c *cluster) start(name, sub, user string, args ...string) *role {
	c.t.Helper()
	r := &role{name: name, sub: sub, user: user, args: args}
	c.launch(r)
	return r
}

func (c *cluster) launch(r *role) {
	c.t.Helper()
	r.addrFile = filepath.Join(c.dir, r.name+".addr")
	_ = os.Remove(r.addrFile) // a restarted role must not be found at its predecessor's ports
	full := append([]string{r.sub,
		"--nats-url", c.nats.URL(),
		"--nats-user", r.user, "--nats-password-file", c.passwordFile(r.user),
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0", "--addr-file", r.addrFile,
		"--log-level", "info",
	}, c.jobArgs...)
	r.cmd = exec.Command(binary, append(full, r.args...)...)
	r.cmd.Env = hermeticEnv()
	r.d = testenv.StartDaemon(c.t, r.name, r.cmd)
	c.roles[r.name] = r
}

// restart starts a killed role again with the same configuration and waits until it is ready.
func (c *cluster) restart(name string) {
	c.t.Helper()
	old := c.roles[name]
	if old.d.Exited() == nil {
		c.t.Fatalf("restart %s: still running", name)
	}
	c.launch(&role{name: name, sub: old.sub, user: old.user, args: old.args})
	c.waitReady(c.roles[name])
}

// kill9 kills a role with SIGKILL and waits until it is gone.
func (c *cluster) kill9(name string) {
	c.t.Helper()
	r := c.roles[name]
	if err := r.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("kill -9 %s: %v", name, err)
	}
	testenv.Eventually(c.t, 30*time.Second, name+" exits after SIGKILL", func() error {
		if r.d.Exited() == nil {
			return errors.New("still running")
		}
		return nil
	})
}

// waitReady waits until the role publishes its addresses and answers GET /readyz with 200.
func (c *cluster) waitReady(r *role) {
	c.t.Helper()
	testenv.Eventually(c.t, 60*time.Second, r.name+" writes health= and metrics= to its address file", func() error {
		if err := r.d.Exited(); err != nil {
			return err
		}
		var err error
		if r.health, err = telemetry.ReadAddr(r.addrFile, telemetry.AddrHealth); err != nil {
			return err
		}
		r.metrics, err = telemetry.ReadAddr(r.addrFile, telemetry.AddrMetrics)
		return err
	})
	r.d.Get(c.t, 60*time.Second, r.health, "/readyz")
}

// waitIngress waits until the proxy names its listener in its address file and accepts mTLS
// connections there.
func (c *cluster) waitIngress(name string) {
	c.t.Helper()
	r := c.roles[name]
	if got, err := telemetry.ReadAddr(r.addrFile, telemetry.AddrHTTPS); err != nil || got != c.listen {
		c.t.Fatalf("%s's address file names https=%q (%v), want %s", name, got, err, c.listen)
	}
	tc := c.clientTLS(c.people[0])
	testenv.Eventually(c.t, 30*time.Second, name+" accepts TLS on "+c.listen, func() error {
		if err := r.d.Exited(); err != nil {
			return err
		}
		conn, err := tls.Dial("tcp", c.listen, tc)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

func (c *cluster) clientTLS(who string) *tls.Config {
	c.t.Helper()
	tc, err := c.pki.ClientTLS(who)
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}

func (c *cluster) url() string { return "https://" + c.listen }

// closeWindows closes every window that holds accepted items the way the mixer closes a
// window that has ended: ingress refuses it from then on, and the mixer seals it once the
// grace has passed.
func (c *cluster) closeWindows() {
	c.t.Helper()
	kv := c.kv(c.proxyJS, contract.WindowsBucket)
	for _, w := range c.ledger.windows() {
		b, err := json.Marshal(contract.WindowRecord{State: contract.WindowClosed, ClosedAt: time.Now()})
		if err != nil {
			c.t.Fatal(err)
		}
		if _, err := kv.Create(c.ctx, contract.WindowKey(w), b); err != nil {
			c.t.Fatalf("close window %d: %v", w, err)
		}
	}
}

// submit sends obs as participant who in one session through the participant client. A
// window that closes between the session and the items (nothing accepted) is retried in
// the next window.
func (c *cluster) submit(who string, obs ...pda.Observation) {
	c.t.Helper()
	cl := client.NewClient(c.url(), c.clientTLS(who))
	cl.Batch = 1000 // one request: a window closes on all of a session's items or none
	for attempt := 1; ; attempt++ {
		sid, suite, w, err := cl.Session(c.ctx)
		if err == nil {
			c.ledger.session(sid[:])
			items, perr := pda.NewParticipant(suite, nil).Submit(sid, 0, obs)
			if perr != nil {
				c.t.Fatalf("items of %s: %v", who, perr)
			}
			var rep *client.Report
			rep, err = cl.SendItems(c.ctx, sid, w, items, nil)
			if err == nil {
				if rep.Accepted != len(obs) || len(rep.Rejected) > 0 {
					c.t.Fatalf("submit as %s: accepted %d of %d, rejected %v", who, rep.Accepted, len(obs), rep.Rejected)
				}
				c.ledger.add(w, who, obs)
				return
			}
			if rep != nil && rep.Accepted > 0 {
				c.t.Fatalf("submit as %s: %v after %d items were accepted", who, err, rep.Accepted)
			}
		}
		if !errors.Is(err, client.ErrWindowClosed) || attempt == 3 {
			c.t.Fatalf("submit as %s: %v", who, err)
		}
	}
}

var cliReport = regexp.MustCompile(`window (\d+): (\d+) accepted`)

// submitCLI sends IP keys as participant who with `pda submit` and a CSV file.
func (c *cluster) submitCLI(who string, ips ...string) {
	c.t.Helper()
	tc := c.clientTLS(who)
	crt, key := c.writeCert(who, tc.Certificates[0])
	csv := c.write(who+".csv", []byte("# key\n"+strings.Join(ips, "\n")+"\n"))
	var obs []pda.Observation
	for _, s := range ips {
		obs = append(obs, ipObs(c.t, s))
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
		cmd := exec.CommandContext(ctx, binary, "submit", "--proxy", c.url(), "--cert", crt, "--key", key, "--ca", c.caFile,
			"--key-type", "ip", "--batch", "1000", csv)
		cmd.Env = hermeticEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err == nil {
			m := cliReport.FindStringSubmatch(string(out))
			if m == nil {
				c.t.Fatalf("pda submit as %s printed %q", who, out)
			}
			w, _ := strconv.ParseUint(m[1], 10, 64)
			if n, _ := strconv.Atoi(m[2]); n != len(ips) {
				c.t.Fatalf("pda submit as %s: %s", who, out)
			}
			c.ledger.add(w, who, obs)
			return
		}
		if !strings.Contains(stderr.String(), client.ErrWindowClosed.Error()) || attempt == 3 {
			c.t.Fatalf("pda submit as %s: %v\n%s", who, err, stderr.String())
		}
	}
}

// refused requires the proxy to refuse a session of every closed window to who.
func (c *cluster) refused(who string) {
	c.t.Helper()
	cl := client.NewClient(c.url(), c.clientTLS(who))
	for _, w := range c.ledger.windows() {
		cl.Window = &w
		if _, _, _, err := cl.Session(c.ctx); !errors.Is(err, client.ErrWindowClosed) {
			c.t.Fatalf("session of closed window %d as %s: %v, want %v", w, who, err, client.ErrWindowClosed)
		}
	}
}

// result waits for the merged result of window w in the DB domain's results bucket.
func (c *cluster) result(w uint64) contract.WindowResult {
	c.t.Helper()
	kv := c.kv(c.dbJS, contract.ResultsBucket)
	var res contract.WindowResult
	testenv.Eventually(c.t, 90*time.Second, fmt.Sprintf("merged result of window %d", w), func() error {
		for _, r := range c.roles {
			if err := r.d.Exited(); err != nil {
				return err
			}
		}
		e, err := kv.Get(c.ctx, contract.WindowKey(w))
		if err != nil {
			return err
		}
		return json.Unmarshal(e.Value(), &res)
	})
	return res
}

// checkResults requires every window with accepted items to reveal exactly the keys with
// count ≥ τ, with their counts, and returns how many keys were revealed in all.
func (c *cluster) checkResults() int {
	c.t.Helper()
	total := 0
	for _, w := range c.ledger.windows() {
		res := c.result(w)
		got := map[string]int{}
		for _, k := range res.Revealed {
			got[k.Key] = k.Count
		}
		want := c.ledger.want(w, c.mode)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			c.t.Errorf("window %d revealed %v, want %v", w, got, want)
		}
		if res.Window != w || !slices.Equal(res.Shards, shards) {
			c.t.Errorf("window %d result names window %d, shards %v; want shards %v", w, res.Window, res.Shards, shards)
		}
		c.t.Logf("window %d: revealed %v", w, got)
		total += len(got)
	}
	return total
}

// waitSealed waits until the mixer has forwarded window w to the DB domain.
func (c *cluster) waitSealed(w uint64) {
	c.t.Helper()
	kv := c.kv(c.proxyJS, contract.WindowsBucket)
	testenv.Eventually(c.t, 60*time.Second, fmt.Sprintf("window %d sealed", w), func() error {
		if err := c.roles["mixer"].d.Exited(); err != nil {
			return err
		}
		e, err := kv.Get(c.ctx, contract.WindowKey(w))
		if err != nil {
			return err
		}
		var rec contract.WindowRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return err
		}
		if rec.State != contract.WindowSealed {
			return fmt.Errorf("state %q", rec.State)
		}
		return nil
	})
}

func ipObs(t testing.TB, s string) pda.Observation {
	t.Helper()
	k, err := pda.ParseIPKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return pda.Observation{Key: k, Value: 1}
}

// canary returns an opaque key of 16 random bytes: if any of its forms shows up in a view,
// that view saw the key.
func canary(t testing.TB) pda.Observation {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	k, err := pda.OpaqueKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return pda.Observation{Key: k, Value: 1}
}

// TestRevealsExactlyTheKeysOfTauParticipantsAndTheDBSeesNoIdentity runs every role as its
// own process for one window in distinct-participants mode: once the window is closed the
// proxy refuses it, and exactly the keys reported by ≥ τ distinct participants are revealed,
// with their counts (one participant repeating a key in several sessions counts once); the
// DB domain's NATS traffic, its roles' logs and its shards' Redis never hold a participant
// identity, pseudonym or session id, nor any form of an unrevealed key; every role exports
// metrics; SIGTERM stops each role with status 0.
func TestRevealsExactlyTheKeysOfTauParticipantsAndTheDBSeesNoIdentity(t *testing.T) {
	c := newCluster(t, "distinct_participants", 6, longWindow)
	p := c.people
	// A second proxy replica on the same address (--reuse-port, as on the host network): the
	// kernel spreads the participants' connections over both.
	proxy := c.roles["proxy"]
	c.waitReady(c.start("proxy-2", proxy.sub, proxy.user, proxy.args...))
	c.waitIngress("proxy-2")
	// 10.0.0.j is reported by participants 0..j (j+1 of them): j ≥ 2 reaches τ = 3.
	// Participant 5 submits through the CLI.
	perPerson := make([][]pda.Observation, len(p))
	var cliIPs []string
	for j := range 6 {
		ip := fmt.Sprintf("10.0.0.%d", j)
		for i := 0; i <= j; i++ {
			if i == 5 {
				cliIPs = append(cliIPs, ip)
				continue
			}
			perPerson[i] = append(perPerson[i], ipObs(t, ip))
		}
	}
	// A domain reported by four, a string by three (revealed), a string by two (not).
	for i, k := range []struct {
		s     string
		mk    func(string) (pda.Key, error)
		count int
	}{{"evil.example", pda.DomainKey, 4}, {"reported-by-three", pda.StringKey, 3}, {"reported-by-two-only", pda.StringKey, 2}} {
		key, err := k.mk(k.s)
		if err != nil {
			t.Fatal(err)
		}
		for n := range k.count {
			who := (i + n) % 5
			perPerson[who] = append(perPerson[who], pda.Observation{Key: key, Value: 1})
		}
	}
	// Canaries: eight random keys, each reported by two participants (below τ).
	for i := range 8 {
		o := canary(t)
		perPerson[i%5] = append(perPerson[i%5], o)
		perPerson[(i+1)%5] = append(perPerson[(i+1)%5], o)
	}
	for i := range 5 {
		c.submit(p[i], perPerson[i]...)
	}
	c.submitCLI(p[5], cliIPs...)
	// Forced reveal by repetition: participant 0 sends 10.0.1.1 in three more sessions,
	// participant 1 once; two distinct participants stay below τ.
	for range 3 {
		c.submit(p[0], ipObs(t, "10.0.1.1"))
	}
	c.submit(p[1], ipObs(t, "10.0.1.1"))
	c.closeWindows()
	c.refused(p[2])

	if n := c.checkResults(); n == 0 {
		t.Fatal("nothing was revealed")
	}
	if t.Failed() {
		return
	}
	c.checkDBView()

	// Every role exports its series and stops cleanly.
	series := map[string]string{
		"proxy":       `pda_proxy_items_total{outcome="accepted"}`,
		"proxy-2":     "pda_proxy_sessions_total",
		"mixer":       "pda_mixer_windows_sealed_total",
		"oracle":      `pda_oracle_requests_total{outcome="answered"}`,
		"db-frontend": `pda_frontend_items_total{outcome="routed"}`,
		"shard-a":     "pda_shard_results_total",
		"shard-b":     "pda_shard_results_total",
	}
	for name, r := range c.roles {
		if body := r.d.Get(t, 10*time.Second, r.metrics, "/metrics"); !strings.Contains(body, series[name]) {
			t.Errorf("%s /metrics lacks %s", name, series[name])
		}
		r.d.Get(t, 10*time.Second, r.health, "/healthz")
	}
	for _, r := range c.roles {
		if err := r.d.Terminate(); err != nil {
			t.Error(err)
		}
	}
	for _, r := range c.roles {
		if err := r.d.Stopped(30 * time.Second); err != nil {
			t.Error(err)
		}
	}
}

// TestShortWindowsRevealOnTheirOwn runs the roles with 2-second windows (the CRD accepts 1 s),
// for which the proxy domain's pool keeps less than the other streams' 10-minute duplicate
// window: every role comes up, and the mixer closes and seals each window once it has ended,
// with no help from the test, revealing exactly the keys of τ participants in it.
func TestShortWindowsRevealOnTheirOwn(t *testing.T) {
	c := newCluster(t, "distinct_participants", 3, shortWindow)
	// One key per round, by all three participants: a round whose submissions straddle a
	// window boundary reveals nothing, so there are three.
	for r := range 3 {
		for _, who := range c.people {
			c.submit(who, ipObs(t, fmt.Sprintf("10.6.0.%d", r)))
		}
	}
	if n := c.checkResults(); n == 0 {
		t.Fatal("nothing was revealed")
	}
	c.refused(c.people[0])
}

// checkDBView requires the DB domain's view — every message of its NATS account, its roles'
// logs and its shards' Redis — to hold no participant identity, pseudonym or session id, no
// proxy-internal header, and no form of a key that was not revealed (text, canonical bytes,
// raw bytes, hex, hash to the group).
func (c *cluster) checkDBView() {
	c.t.Helper()
	var view [][]byte
	for _, m := range c.dbCap.snapshot() {
		if m.Header.Get(contract.HdrPid) != "" {
			c.t.Errorf("the participant pseudonym header crossed into the DB domain on %s", m.Subject)
		}
		view = append(view, []byte(m.Subject), m.Data)
		for k, vs := range m.Header {
			view = append(view, []byte(k))
			for _, v := range vs {
				view = append(view, []byte(v))
			}
		}
	}
	if len(view) == 0 {
		c.t.Fatal("no DB-domain traffic captured")
	}
	for _, r := range c.roles {
		if r.user == contract.DBUser {
			view = append(view, []byte(r.d.Log()))
		}
	}
	for _, r := range c.shardRedis {
		view = append(view, redisDump(c.t, r)...)
	}
	seen := func(needle []byte) bool {
		return slices.ContainsFunc(view, func(h []byte) bool { return bytes.Contains(h, needle) })
	}

	for _, who := range c.people {
		for _, needle := range []string{who, c.proxySec.Pseudonym(who)} {
			if seen([]byte(needle)) {
				c.t.Errorf("the DB domain saw participant identity material %q", needle)
			}
		}
	}
	c.ledger.mu.Lock()
	sessions := slices.Clone(c.ledger.sessions)
	subs := slices.Clone(c.ledger.subs)
	c.ledger.mu.Unlock()
	if len(sessions) == 0 {
		c.t.Fatal("no session ids recorded")
	}
	for _, sid := range sessions {
		if seen(sid) || seen([]byte(hex.EncodeToString(sid))) {
			c.t.Errorf("the DB domain saw session id %x", sid)
		}
	}
	revealed := map[string]bool{}
	for _, w := range c.ledger.windows() {
		for k := range c.ledger.want(w, c.mode) {
			revealed[k] = true
		}
	}
	checked := map[string]bool{} // window and key
	for _, s := range subs {
		id := fmt.Sprintf("%d/%x", s.window, s.key.Canonical())
		if revealed[s.key.Text()] || checked[id] {
			continue
		}
		checked[id] = true
		suite, err := c.job.Suite(s.window)
		if err != nil {
			c.t.Fatal(err)
		}
		h2g, err := suite.Group().AppendElement(nil, suite.HashKey(s.key))
		if err != nil {
			c.t.Fatal(err)
		}
		// Needles of at least five bytes: shorter ones (an IPv4 address's four bytes) turn
		// up by chance in a few hundred kilobytes of ciphertext.
		forms := map[string][]byte{"text": []byte(s.key.Text()), "canonical": s.key.Canonical(),
			"bytes": s.key.Bytes(), "hex": []byte(hex.EncodeToString(s.key.Bytes())), "H2G": h2g}
		for form, needle := range forms {
			if len(needle) >= 5 && seen(needle) {
				c.t.Errorf("the DB domain saw the %s form of unrevealed key %q", form, s.key.Text())
			}
		}
	}
	if len(checked) == 0 {
		c.t.Fatal("no unrevealed key to look for")
	}
	c.t.Logf("DB view: %d byte strings; looked for %d participants, %d sessions, %d unrevealed (window, key) pairs",
		len(view), len(c.people), len(sessions), len(checked))
}

// redisDump returns every key and value of a Redis, type by type.
func redisDump(t testing.TB, r *testenv.Redis) [][]byte {
	t.Helper()
	ctx, rc := context.Background(), r.Client()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, k := range keys {
		out = append(out, []byte(k))
		switch rc.Type(ctx, k).Val() {
		case "string":
			out = append(out, []byte(rc.Get(ctx, k).Val()))
		case "set":
			for _, m := range rc.SMembers(ctx, k).Val() {
				out = append(out, []byte(m))
			}
		case "hash":
			for f, v := range rc.HGetAll(ctx, k).Val() {
				out = append(out, []byte(f), []byte(v))
			}
		case "list":
			for _, v := range rc.LRange(ctx, k, 0, -1).Val() {
				out = append(out, []byte(v))
			}
		case "zset":
			for _, v := range rc.ZRange(ctx, k, 0, -1).Val() {
				out = append(out, []byte(v))
			}
		}
	}
	return out
}

// TestKill9OfShardAndMixerMidWindowLosesNoSubmission counts tuples, so that an item lost or
// counted twice changes a count: shard-a is killed with SIGKILL after the first round and the
// mixer after the second; the window closes while both are down; the restarted mixer seals it
// while shard-a is still down (shard-b publishes its part, nothing is merged); then shard-a
// comes back, catches up, and the merged result is exact.
func TestKill9OfShardAndMixerMidWindowLosesNoSubmission(t *testing.T) {
	c := newCluster(t, "tuples", 4, longWindow)
	p := c.people
	round := func(r int) {
		for i, who := range p {
			obs := []pda.Observation{
				ipObs(t, fmt.Sprintf("10.1.%d.1", r)), // by all four: 4 tuples
				ipObs(t, "10.3.0.1"),                  // by everyone in every round: 12 tuples
				ipObs(t, fmt.Sprintf("10.2.%d.%d", r, i)),
			}
			if i < 2 {
				obs = append(obs, ipObs(t, fmt.Sprintf("10.1.%d.2", r))) // 2 tuples: below τ
			}
			for j := range 3 {
				obs = append(obs, ipObs(t, fmt.Sprintf("10.4.%d.%d", r, j))) // 4 tuples each
			}
			c.submit(who, obs...)
		}
		// One participant repeats a key in two more sessions: 3 tuples, revealed.
		c.submit(p[r%len(p)], ipObs(t, fmt.Sprintf("10.5.%d.1", r)))
		c.submit(p[r%len(p)], ipObs(t, fmt.Sprintf("10.5.%d.1", r)))
		c.submit(p[r%len(p)], ipObs(t, fmt.Sprintf("10.5.%d.1", r)))
	}
	round(0)
	c.kill9("shard-a")
	round(1)
	c.kill9("mixer")
	round(2)
	// The window ends while the mixer is down; the restarted mixer finds it to seal.
	c.closeWindows()
	c.refused(p[0])
	c.restart("mixer")

	results := c.kv(c.dbJS, contract.ResultsBucket)
	for _, w := range c.ledger.windows() {
		c.waitSealed(w)
		testenv.Eventually(t, 60*time.Second, fmt.Sprintf("shard-b's part of window %d", w), func() error {
			_, err := results.Get(c.ctx, contract.WindowKey(w)+".shard-b")
			return err
		})
		if _, err := results.Get(c.ctx, contract.WindowKey(w)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("window %d: merged result while shard-a is down: %v", w, err)
		}
	}
	c.restart("shard-a")
	if n := c.checkResults(); n == 0 {
		t.Fatal("nothing was revealed")
	}
}

// TestConfigErrorsExit2: a configuration error exits with status 2 and names what is wrong,
// before the role reaches NATS (the URL points nowhere).
func TestConfigErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	keygen := func(role string) (string, string) {
		out := filepath.Join(dir, role+".json")
		b, err := exec.CommandContext(ctx, binary, "keygen", "--role", role, "--out", out).Output()
		if err != nil {
			t.Fatalf("keygen %s: %v", role, err)
		}
		return out, strings.TrimSpace(string(b))
	}
	proxyKeys, proxyPub := keygen("proxy")
	dbKeys, dbPub := keygen("db")
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-proxy.json")
	base := []string{"--nats-url", "nats://127.0.0.1:1", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0",
		"--deployment", "e2e", "--window", "4s", "--grace", "500ms",
		"--db-public-key", dbPub, "--proxy-public-key", proxyPub}
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"missing key file", []string{"mixer", keysFlag, missing, "--nats-user", "pda-proxy", "--nats-password-file", pwFile}, nil, missing},
		{"threshold zero", []string{"oracle", keysFlag, proxyKeys, "--threshold", "0"}, nil, "threshold"},
		{"threshold not a number", []string{"db-frontend", keysFlag, dbKeys, "--threshold", "ten"}, nil, "threshold"},
		{"threshold from the environment", []string{"db-shard", "--shard-id", "shard-a"}, []string{"OBSCURA_THRESHOLD=ten"}, "OBSCURA_THRESHOLD"},
		{"user without password file", []string{"db-shard", "--shard-id", "shard-a", "--nats-user", "pda-db"}, nil, "--nats-password-file"},
		{"missing password file", []string{"db-shard", "--shard-id", "shard-a", "--nats-user", "pda-db", "--nats-password-file", missing}, nil, "--nats-password-file"},
		{"password on the command line", []string{"oracle", keysFlag, proxyKeys, "--nats-password", "x"}, nil, "nats-password"},
		{"bad shard id", []string{"db-shard", "--shard-id", "Shard_A"}, nil, "shard"},
		{"bad count mode", []string{"oracle", keysFlag, proxyKeys, "--count-mode", "sometimes"}, nil, "count-mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The common flags first, then the case's: a later flag wins, so the broken
			// value is the one parsed.
			args := append([]string{tc.args[0]}, base...)
			args = append(args, tc.args[1:]...)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(cctx, binary, args...)
			cmd.Env = append(hermeticEnv(), tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("pda %v: %v, want exit status 2\n%s", args, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("pda %v: stderr %q does not mention %q", args, stderr.String(), tc.want)
			}
		})
	}
}
