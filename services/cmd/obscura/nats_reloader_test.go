package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nats-server/v2/server"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

func TestNATSReloaderFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no watch", []string{"--pid-file", "p"}},
		{"no pid file", []string{"--watch", "w"}},
		{"interval too short", []string{"--watch", "w", "--pid-file", "p", "--interval", "1ms"}},
		{"bad interval", []string{"--watch", "w", "--pid-file", "p", "--interval", "soon"}},
		{"bad log level", []string{"--watch", "w", "--pid-file", "p", "--log-level", "loud"}},
		{"positional", []string{"--watch", "w", "--pid-file", "p", "extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseNATSReloader(tc.args); !errors.Is(err, errConfig) {
				t.Fatalf("parseNATSReloader(%q) = %v, want a configuration error (exit 2)", tc.args, err)
			}
		})
	}
	c, err := parseNATSReloader([]string{"--watch", "w", "--pid-file", "p"})
	if err != nil || c.Interval != 2*time.Second {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
}

// secretVolume plays the kubelet's Secret volume: files live in a timestamped directory that
// ..data points to, the visible file is a symlink through ..data, and an update swaps ..data
// atomically.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func (v *secretVolume) write(name, content string) {
	v.t.Helper()
	v.gen++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_01_01_00_00_%02d", v.gen))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	link := filepath.Join(v.dir, name)
	if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			v.t.Fatal(err)
		}
	}
}

// accounts renders the layout the operator renders (natsx.Layout, bcrypt hashes, a system
// account) for the given vendors, each with its service and device user.
func accounts(t *testing.T, pw func(string) string, vendors ...int) string {
	t.Helper()
	hash := func(u string) natsx.User {
		h, err := bcrypt.GenerateFromPassword([]byte(pw(u)), 11)
		if err != nil {
			t.Fatal(err)
		}
		return natsx.User{Name: u, Password: string(h)}
	}
	l := natsx.Layout{System: "SYS", Accounts: []natsx.Account{contract.IntegratorAccountFor(vendors, []natsx.User{hash(contract.IntegratorUser)})}}
	for _, v := range vendors {
		l.Accounts = append(l.Accounts, contract.VendorAccountFor(v, []natsx.User{hash(contract.VendorUser(v))}, []natsx.User{hash(contract.DeviceUser(v, "d0"))}))
	}
	l.Accounts = append(l.Accounts, natsx.Account{Name: "SYS"})
	return l.Render()
}

// natsPassword is the tests' password of NATS user u.
func natsPassword(u string) string { return "pw-" + u }

// newAccountsVolume makes the accounts Secret volume in dir/accounts with accounts.conf for
// vendor 0 (passwords natsPassword).
func newAccountsVolume(t *testing.T, dir string) *secretVolume {
	t.Helper()
	vol := &secretVolume{t: t, dir: filepath.Join(dir, "accounts")}
	if err := os.Mkdir(vol.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol.write("accounts.conf", accounts(t, natsPassword, 0))
	return vol
}

// syncBuffer is a log sink the reloader's goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNATSReloaderReloadsServer runs a real nats-server on a configuration that includes the
// rendered accounts from a Secret-like volume, and the reloader beside it: after the accounts
// change, a new vendor's users get in and a removed vendor's are refused.
func TestNATSReloaderReloadsServer(t *testing.T) {
	bin, err := testenv.Bin("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vol := newAccountsVolume(t, dir)
	pw := natsPassword

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: %q\njetstream: {store_dir: %q}\ninclude \"accounts/accounts.conf\"\n",
		fmt.Sprintf("%s:%d", testenv.Host, port), filepath.Join(dir, "js")), 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "nats.pid")
	logFile, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// start plays the container runtime: it (re)starts nats-server after it exits. exited is
	// closed once the server has been waited for, waitErr then holds how it ended.
	var exited chan struct{}
	var waitErr error
	var server *exec.Cmd
	start := func() {
		server = exec.Command(bin, "-c", conf, "--pid", pidFile)
		server.Stdout, server.Stderr = logFile, logFile
		server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		exited = make(chan struct{})
		go func(c *exec.Cmd, ch chan struct{}) {
			waitErr = c.Wait()
			close(ch)
		}(server, exited)
	}
	start()
	t.Cleanup(func() {
		if err := testenv.Terminate(server.Process, exited, 10*time.Second); err != nil {
			t.Errorf("nats-server: %v", err)
		}
	})
	url := fmt.Sprintf("nats://%s:%d", testenv.Host, port)
	connectAs := func(user, password string) error {
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("nats-server exited: %v\n%s", waitErr, log)
		default:
		}
		nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.Timeout(2*time.Second))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	}
	connect := func(user string) error { return connectAs(user, pw(user)) }
	testenv.Eventually(t, 20*time.Second, "nats-server accepts vendor0", func() error { return connect(contract.VendorUser(0)) })
	if err := connect(contract.VendorUser(1)); err == nil {
		t.Fatal("vendor1 connected before its account existed")
	}

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	cfg, err := parseNATSReloader([]string{"--watch", filepath.Join(vol.dir, "accounts.conf"), "--pid-file", pidFile, "--interval", "50ms", "--metrics-addr", ""})
	if err != nil {
		t.Fatal(err)
	}
	r := newNATSReloader(cfg, slog.New(slog.NewJSONHandler(&logs, nil)), reg, &telemetry.Health{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testenv.Eventually(t, 10*time.Second, "first reload", func() error {
		if n := testutil.ToFloat64(r.signals.WithLabelValues("hup")); n != 1 {
			return fmt.Errorf("%v reloads", n)
		}
		return nil
	})

	// Users only (vendor0's passwords rotate): a reload, the same process.
	pw2 := func(u string) string { return "pw2-" + u }
	pid := server.Process.Pid
	vol.write("accounts.conf", accounts(t, pw2, 0))
	testenv.Eventually(t, 20*time.Second, "vendor0's new password accepted after the reload", func() error {
		return connectAs(contract.VendorUser(0), pw2(contract.VendorUser(0)))
	})
	if err := connect(contract.VendorUser(0)); err == nil {
		t.Error("vendor0's old password still accepted after the reload")
	}
	if hup := testutil.ToFloat64(r.signals.WithLabelValues("hup")); server.Process.Pid != pid || hup != 2 {
		t.Errorf("a users-only change: pid %d → %d, %v SIGHUPs; want a reload of the same process", pid, server.Process.Pid, hup)
	}

	// A new account (vendor1 replaces vendor0): the server is restarted (SIGTERM), because a
	// reload would not rewire the integrator's imports; the runtime starts it again.
	next := accounts(t, pw, 1)
	vol.write("accounts.conf", next)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("nats-server still runs 20s after its accounts changed shape; want a restart")
	}
	start()
	testenv.Eventually(t, 20*time.Second, "vendor1 and device1 accepted after the restart", func() error {
		return errors.Join(connect(contract.VendorUser(1)), connect(contract.DeviceUser(1, "d0")))
	})
	for _, u := range []string{contract.VendorUser(0), contract.DeviceUser(0, "d0")} {
		if err := connectAs(u, pw2(u)); err == nil {
			t.Errorf("%s, removed, still connects", u)
		}
	}
	if hup, term := testutil.ToFloat64(r.signals.WithLabelValues("hup")), testutil.ToFloat64(r.signals.WithLabelValues("term")); hup != 2 || term != 1 {
		t.Errorf("%v SIGHUPs and %v SIGTERMs, want 2 and 1", hup, term)
	}
	out := logs.String()
	if !strings.Contains(out, contentHash([]byte(next))) || !strings.Contains(out, "signalled to restart") {
		t.Errorf("log does not name the new hash and the restart:\n%s", out)
	}
	if strings.Contains(out, "$2a$") || strings.Contains(out, "pw-") {
		t.Errorf("log leaks configuration content:\n%s", out)
	}
}

// TestNATSReloaderClusterRestartsTakeTurns runs a real three-node JetStream cluster whose
// nodes include one accounts file, a reloader beside each node and a supervisor that restarts
// a node whose server exits (the kubelet). When the accounts change shape every reloader sees
// it at once — the worst case of a kubelet sync — yet no two nodes are ever down together:
// each node's downtime (exit until it holds its replicas current again) overlaps no other's, so
// the cluster keeps its quorum and R3 file and memory streams every message. Restarting together (the reloader before
// turns) lost the quorum and every memory stream in the cluster e2e.
func TestNATSReloaderClusterRestartsTakeTurns(t *testing.T) {
	const nodes = 3
	dir := t.TempDir()
	vol := newAccountsVolume(t, dir)
	pw := natsPassword
	c := testenv.StartNATSClusterIncluding(t, nodes, filepath.Join(vol.dir, "accounts.conf"))

	pidFile := func(i int) string { return filepath.Join(dir, fmt.Sprintf("nats-%d.pid", i)) }
	writePID := func(i, pid int) {
		if err := os.WriteFile(pidFile(i), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Error(err)
		}
	}
	probe := &natsReloader{http: &http.Client{Timeout: time.Second}}
	healthy := func(i int) bool { return probe.peerHealthy(c.MonitorURL(i), nil) == nil } // the reloader's own notion of a node back
	// Each restart's downtime: from the server's exit (the supervisor starts it at once) until
	// it is healthy again.
	type downtime struct {
		node       int
		start, end time.Time
	}
	var mu sync.Mutex
	var downs []downtime
	var wg sync.WaitGroup
	for i := range nodes {
		writePID(i, c.Pid(i))
	}
	c.Supervise(t, func(i, pid int) {
		start := time.Now()
		writePID(i, pid)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(2 * time.Minute); !healthy(i); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("node %d not healthy 2 minutes after its restart", i)
					return
				}
			}
			mu.Lock()
			downs = append(downs, downtime{i, start, time.Now()})
			mu.Unlock()
		}()
	})

	// A replicated stream with acknowledged messages before the change.
	js := c.JetStream(t, nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: nodes}); err != nil {
		t.Fatal(err)
	}
	// And a replicated memory stream, as the services' round-info bucket: its replicas live only
	// in the servers' memory, so a node restarted before the previous one caught up loses it.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3MEM", Subjects: []string{"r3mem.>"}, Replicas: nodes, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for n := range 20 {
		if _, err := js.Publish(ctx, "r3.x", []byte(strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "r3mem.x", []byte(strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	reloaders := startClusterReloaders(t, c, filepath.Join(vol.dir, "accounts.conf"), pidFile, &logs, "3m")

	// vendor1 joins: the accounts change shape on every node at the same moment.
	vol.write("accounts.conf", accounts(t, pw, 0, 1))
	testenv.Eventually(t, 3*time.Minute, "every node restarted once and healthy", func() error {
		mu.Lock()
		n := len(downs)
		mu.Unlock()
		for i, r := range reloaders {
			if term := testutil.ToFloat64(r.signals.WithLabelValues("term")); term != 1 {
				return fmt.Errorf("node %d: %v restarts", i, term)
			}
		}
		if n != nodes {
			return fmt.Errorf("%d of %d restarts healthy again", n, nodes)
		}
		return nil
	})
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	seen := map[int]bool{}
	for a, x := range downs {
		seen[x.node] = true
		t.Logf("node %d down %s → %s (%s)", x.node, x.start.Format("15:04:05.000"), x.end.Format("15:04:05.000"), x.end.Sub(x.start).Round(time.Millisecond))
		for _, y := range downs[a+1:] {
			if x.start.Before(y.end) && y.start.Before(x.end) {
				t.Errorf("nodes %d and %d were down together (%s–%s and %s–%s): the cluster lost its quorum",
					x.node, y.node, x.start.Format("15:04:05.000"), x.end.Format("15:04:05.000"), y.start.Format("15:04:05.000"), y.end.Format("15:04:05.000"))
			}
		}
	}
	if len(seen) != nodes {
		t.Errorf("restarted nodes %v, want every one of %d", seen, nodes)
	}
	// One at a time: a restart here takes milliseconds on 127.0.0.1, so downtimes could miss
	// each other by luck; turns are distinct slots, at least half a slot apart (asserted with room
	// for the time a server takes to exit: 500 ms; restarting together they are milliseconds apart).
	sort.Slice(downs, func(a, b int) bool { return downs[a].start.Before(downs[b].start) })
	for a := 1; a < len(downs); a++ {
		if gap := downs[a].start.Sub(downs[a-1].start); gap < 500*time.Millisecond {
			t.Errorf("nodes %d and %d restarted %s apart: not in turns of a 2s slot", downs[a-1].node, downs[a].node, gap)
		}
	}
	for i := range nodes {
		nc, err := nats.Connect(c.URL(i), nats.UserInfo(contract.VendorUser(1), pw(contract.VendorUser(1))), nats.Timeout(2*time.Second))
		if err != nil {
			t.Errorf("vendor1 on node %d after the restarts: %v", i, err)
			continue
		}
		nc.Close()
	}
	s, err := js.Stream(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 20 {
		t.Fatalf("R3 after the restarts: %v, %+v; want its 20 messages", err, info)
	}
	testenv.Eventually(t, time.Minute, "the memory stream R3MEM with its 20 messages and a leader", func() error {
		s, err := js.Stream(ctx, "R3MEM")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 20 || info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("%d messages, cluster %+v", info.State.Msgs, info.Cluster)
		}
		return nil
	})
	if strings.Contains(logs.String(), "without every peer healthy") {
		t.Errorf("a reloader gave up waiting for its peers:\n%s", logs.String())
	}
}

// startClusterReloaders runs a reloader beside each node of c as the chart does (--peers every
// node's monitor, --ordinal its index; 2 s turns, polling every 100 ms), watching watch and
// signalling the pid in pidFile(i), logging to logs; it returns once each has made its first
// reload, and stops them at cleanup.
func startClusterReloaders(t *testing.T, c *testenv.NATSCluster, watch string, pidFile func(int) string, logs *syncBuffer, maxWait string) []*natsReloader {
	t.Helper()
	nodes := c.Nodes()
	reloaders := make([]*natsReloader, nodes)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, nodes)
	peers := make([]string, nodes)
	for i := range nodes {
		peers[i] = c.MonitorURL(i)
	}
	started := 0
	t.Cleanup(func() {
		stop()
		for range started {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			t.Logf("the reloaders' log:\n%s", logs)
		}
	})
	for i := range nodes {
		cfg, err := parseNATSReloader([]string{"--watch", watch, "--pid-file", pidFile(i),
			"--interval", "100ms", "--metrics-addr", "", "--peers", strings.Join(peers, ","), "--ordinal", strconv.Itoa(i),
			"--slot", "2s", "--max-wait", maxWait})
		if err != nil {
			t.Fatal(err)
		}
		reloaders[i] = newNATSReloader(cfg, slog.New(slog.NewJSONHandler(logs, nil)).With("node", i), prometheus.NewRegistry(), &telemetry.Health{})
		started++
		go func() { done <- reloaders[i].run(rctx) }()
	}
	testenv.Eventually(t, 30*time.Second, "every reloader's first reload", func() error {
		for i, r := range reloaders {
			if n := testutil.ToFloat64(r.signals.WithLabelValues("hup")); n != 1 {
				return fmt.Errorf("node %d: %v reloads", i, n)
			}
		}
		return nil
	})
	return reloaders
}

// restarts is how many restarts (SIGTERM) each reloader has sent.
func restarts(reloaders []*natsReloader) []float64 {
	n := make([]float64, len(reloaders))
	for i, r := range reloaders {
		n[i] = testutil.ToFloat64(r.signals.WithLabelValues("term"))
	}
	return n
}

// TestNATSReloaderClusterAccountRemovedAndAddedBack reproduces the full cluster e2e's vendor
// deleted and created again (issue 14, full19 at db7bf03): a three-node JetStream cluster whose
// nodes include one accounts file, a reloader beside each and a supervisor restarting a node
// whose server exits. Vendor 1 has an R3 memory inbox (V_IN, as the vendor roles create it) when
// its account is removed: every node restarts in turn without the account, and the meta layer
// keeps the stream's assignment. When the account comes back, the first node restarted with it
// runs its V_IN replica alone — the others do not know the account — so its /healthz reports the
// stream not current, and that is cured only by the other nodes' own restarts. The reloaders
// waited for each other's health (in the e2e: nodes 0 and 2 skipped their turns for 4 minutes,
// "'VENDOR0 > V_IN' is not current", while the vendor's "ensure stream V_IN" timed out; max-wait
// would have let them go after 5). Here max-wait is 10 minutes, so the vendor creating its R3
// inbox and publishing into it within 2 minutes of the re-creation means no node waited for a
// peer whose only unhealthy replicas belong to the account it has yet to load.
func TestNATSReloaderClusterAccountRemovedAndAddedBack(t *testing.T) {
	const nodes = 3
	dir := t.TempDir()
	vol := newAccountsVolume(t, dir)
	pw := natsPassword
	vol.write("accounts.conf", accounts(t, pw, 0, 1))
	c := testenv.StartNATSClusterIncluding(t, nodes, filepath.Join(vol.dir, "accounts.conf"))
	pidFile := func(i int) string { return filepath.Join(dir, fmt.Sprintf("nats-%d.pid", i)) }
	writePID := func(i, pid int) {
		if err := os.WriteFile(pidFile(i), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Error(err)
		}
	}
	for i := range nodes {
		writePID(i, c.Pid(i))
	}
	c.Supervise(t, writePID)

	// inbox is what vendor 1's roles do at start: connect (to whichever node lets it in),
	// ensure its R3 memory inbox V_IN and publish into it with an acknowledgement.
	vendor := contract.VendorUser(1)
	published := 0
	inbox := func() error {
		return testenv.EnsureStream(c.URLs(), jetstream.StreamConfig{Name: contract.StreamVendorIn, Subjects: []string{contract.VendorRoundSubjects(1)},
			Storage: jetstream.MemoryStorage, Replicas: nodes}, func(ctx context.Context, js jetstream.JetStream, _ jetstream.Stream) error {
			if _, err := js.Publish(ctx, contract.VendorInbox(1)+".r.1", []byte(strconv.Itoa(published))); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			published++
			return nil
		}, nats.UserInfo(vendor, pw(vendor)), nats.Timeout(2*time.Second), nats.NoReconnect())
	}
	testenv.Eventually(t, 30*time.Second, "vendor1's R3 inbox before its account is removed", inbox)

	var logs syncBuffer
	reloaders := startClusterReloaders(t, c, filepath.Join(vol.dir, "accounts.conf"), pidFile, &logs, "10m")
	probe := &natsReloader{http: &http.Client{Timeout: time.Second}}

	// Vendor 1 is deleted: every node restarts once, in turn, without its account.
	vol.write("accounts.conf", accounts(t, pw, 0))
	testenv.Eventually(t, 2*time.Minute, "every node restarted once without vendor1, healthy", func() error {
		if n := restarts(reloaders); slices.ContainsFunc(n, func(x float64) bool { return x != 1 }) {
			return fmt.Errorf("restarts by node: %v", n)
		}
		for i := range nodes {
			if err := probe.peerHealthy(c.MonitorURL(i), nil); err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
		}
		return nil
	})
	if err := inbox(); err == nil {
		t.Fatal("vendor1 still publishes into its inbox after its account was removed")
	}

	// And created again.
	vol.write("accounts.conf", accounts(t, pw, 0, 1))
	testenv.Eventually(t, 2*time.Minute, "vendor1, back, ensures its R3 inbox and publishes into it", inbox)
	testenv.Eventually(t, time.Minute, "every node restarted again, with vendor1", func() error {
		if n := restarts(reloaders); slices.ContainsFunc(n, func(x float64) bool { return x != 2 }) {
			return fmt.Errorf("restarts by node: %v", n)
		}
		return nil
	})
	if strings.Contains(logs.String(), "without every peer healthy") {
		t.Errorf("a reloader gave up waiting for its peers:\n%s", logs.String())
	}
}

// TestReplicasCurrentReadsHealthzDetails: a peer whose only /healthz errors are about accounts (a
// removed account with JetStream data stays "could not be resolved" for good) is current; one
// with a stream or consumer replica not current, or a meta layer not caught up, is not — unless
// the replica is in an account the restart brings in (the asking node does not know it yet, so
// the replica waits for that restart). The answers are nats-server's own types, marshalled as
// its monitor does.
func TestReplicasCurrentReadsHealthzDetails(t *testing.T) {
	answer := func(errs ...server.HealthzError) (int, []byte) {
		st := server.HealthStatus{Status: "ok", StatusCode: http.StatusOK, Errors: errs}
		if len(errs) > 0 {
			st.Status, st.StatusCode = "unavailable", http.StatusServiceUnavailable
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return st.StatusCode, b
	}
	gone := server.HealthzError{Type: server.HealthzErrorAccount, Account: "PDA_OLD", Error: "JetStream account 'PDA_OLD' could not be resolved"}
	stream := server.HealthzError{Type: server.HealthzErrorStream, Account: "INTEGRATOR", Stream: "KV_MOHITO_ROUNDINFO", Error: "JetStream stream 'INTEGRATOR > KV_MOHITO_ROUNDINFO' is not current"}
	meta := server.HealthzError{Type: server.HealthzErrorJetStream, Error: "JetStream is not current with the meta leader"}
	back := server.HealthzError{Type: server.HealthzErrorStream, Account: "VENDOR1", Stream: "V_IN", Error: "JetStream stream 'VENDOR1 > V_IN' is not current: group node unhealthy"}
	backConsumer := server.HealthzError{Type: server.HealthzErrorConsumer, Account: "VENDOR1", Stream: "V_IN", Consumer: "agent", Error: "JetStream consumer 'VENDOR1 > V_IN > agent' is not current"}
	incoming := map[string]bool{"VENDOR1": true}
	for _, c := range []struct {
		name     string
		errs     []server.HealthzError
		incoming map[string]bool
		current  bool
	}{
		{"no errors", nil, nil, true},
		{"a removed account only", []server.HealthzError{gone}, nil, true},
		{"a stream replica catching up", []server.HealthzError{gone, stream}, nil, false},
		{"the meta layer behind", []server.HealthzError{meta}, nil, false},
		{"replicas of an account not loaded here yet", []server.HealthzError{back, backConsumer}, incoming, true},
		{"replicas of an account loaded here", []server.HealthzError{back}, nil, false},
		{"an account not loaded here and another stream", []server.HealthzError{back, stream}, incoming, false},
		{"an account not loaded here and the meta layer", []server.HealthzError{back, meta}, incoming, false},
	} {
		code, body := answer(c.errs...)
		if err := replicasCurrent(code, body, c.incoming); (err == nil) != c.current {
			t.Errorf("%s: replicasCurrent = %v, want current %v", c.name, err, c.current)
		}
	}
	if err := replicasCurrent(http.StatusServiceUnavailable, []byte("unavailable"), incoming); err == nil {
		t.Error("a 503 without a readable body counted as current")
	}
}

// TestNATSReloaderIncomingAccounts: the accounts a change brings in are those of the new file
// the server has not loaded — an account removed and then created again is incoming again — and
// none before the first signal or when a file does not parse.
func TestNATSReloaderIncomingAccounts(t *testing.T) {
	both := []byte(contract.AccountsConfig([][]string{{"d0"}, {"d0"}}, natsPassword))
	one := []byte(contract.AccountsConfig([][]string{{"d0"}}, natsPassword))
	if got := accountNames(both); !maps.Equal(got, map[string]bool{"INTEGRATOR": true, "VENDOR0": true, "VENDOR1": true}) {
		t.Fatalf("accountNames = %v", got)
	}
	r := &natsReloader{}
	if in := r.incoming(accountNames(both)); len(in) != 0 {
		t.Errorf("before the first signal: incoming %v, want none", in)
	}
	r.appliedAccounts = accountNames(both)
	if in := r.incoming(accountNames(one)); len(in) != 0 {
		t.Errorf("vendor1 removed: incoming %v, want none", in)
	}
	r.appliedAccounts = accountNames(one)
	if in := r.incoming(accountNames(both)); !maps.Equal(in, map[string]bool{"VENDOR1": true}) {
		t.Errorf("vendor1 back: incoming %v, want VENDOR1", in)
	}
	if got := accountNames([]byte("accounts { broken")); got != nil {
		t.Errorf("an unparsable file: %v, want nil", got)
	}
	if in := r.incoming(nil); len(in) != 0 {
		t.Errorf("an unparsable new file: incoming %v, want none", in)
	}
}
