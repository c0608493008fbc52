package loadgen

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// BenchOptions configure [Bench]: an open-loop capacity benchmark of the Mohito services.
// Every server role runs as its own OS process (the mohito binary), with nats-server and
// redis-server as processes too; users run in the calling process and devices in a
// `bench-devices` process of the same binary, and neither's CPU is counted. Each step
// starts a fresh deployment sized for its offered rate, offers commands at that rate
// whether or not earlier ones were answered (open loop), and measures the role processes'
// CPU from /proc/<pid>/stat over a window of steady state.
type BenchOptions struct {
	Binary         string // the mohito executable (role processes)
	BinDir         string // holds nats-server and redis-server
	Vendors        int
	Round          time.Duration
	CommandSize    int
	PayloadSize    int
	Rates          []float64     // offered commands/s, one step each, in order
	Warmup         time.Duration // before the measured window
	Measure        time.Duration // the measured window
	Drain          time.Duration // after the window, for commands in flight to be answered
	DecryptWorkers int
	Encoders       int
	// UsersPerRate is users (each with one device) per offered command/s: a user has at
	// most one command in flight, so it must cover the latency (default 4 s).
	UsersPerRate float64
	// DeviceSpacing is how long apart one device's commands are issued (devices per offered
	// command/s, default 2 s: two rounds of 1 s).
	DeviceSpacing time.Duration
	// Pin maps a role process name prefix ("decrypt-worker-0") to a CPU list for taskset.
	Pin           map[string]string
	CPUProfileDir string // write each role's CPU profile of the measured window here
	// FullRoundDir is the services module directory: the library's FullRound benchmark is
	// run there (go test) before the steps, for the crypto-bound ratio. Empty: skipped.
	FullRoundDir string
	KeepGoing    bool // run every step even after one fails
	Out          io.Writer
	JSONPath     string
}

// BenchStep is one offered rate's result.
type BenchStep struct {
	Offered    float64 `json:"offered_per_s"`
	Users      int     `json:"users"`
	Devices    int     `json:"devices"`
	Issued     int     `json:"issued"`
	Saturated  int     `json:"generator_saturated"` // arrivals with no idle user: the step is invalid
	Answered   int     `json:"answered"`            // in the measured window
	AnsweredPS float64 `json:"answered_per_s"`
	Lost       int     `json:"lost"`       // issued, not answered by the end of the drain
	Duplicated int     `json:"duplicated"` // delivered more than once, or unknown payloads
	Wrong      int     `json:"wrong"`      // answered with another command's response
	Rounds     int     `json:"rounds"`
	// Aborted counts the rounds aborted from the start of the window to the end of the drain:
	// a round opened at start-up, before every shuffler held the integrator's key, may abort
	// during the warm-up (its users re-send; exactly-once is still checked over the whole step).
	Aborted  int     `json:"aborted_rounds"`
	Admitted float64 `json:"admitted"`
	Fakes    float64 `json:"fakes"`
	// FakesPerReal is the shufflers' fakes per admitted command over the whole step.
	FakesPerReal float64 `json:"fakes_per_real"`
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	// ServerCPU is the role processes' CPU-seconds in the window (nats-server and
	// redis-server included), by process group; ClientCPUS the client processes' (users and devices).
	ServerCPU  map[string]float64 `json:"server_cpu_s"`
	ServerCPUS float64            `json:"server_cpu_s_total"`
	ClientCPUS float64            `json:"client_cpu_s"`
	// UsersCPUS and DevicesCPUS split ClientCPUS: the bench process (users and their
	// generator) and the bench-devices process.
	UsersCPUS   float64 `json:"client_users_cpu_s"`
	DevicesCPUS float64 `json:"client_devices_cpu_s"`
	WindowS     float64 `json:"window_s"`
	CPUPerCmdUS float64 `json:"server_cpu_us_per_command"`
	// PerRoleUS is ServerCPU per answered command, in µs.
	PerRoleUS map[string]float64 `json:"server_cpu_us_per_command_by_role"`
	// CryptoBound is CPUPerCmdUS ÷ the library's FullRound CPU per entry.
	CryptoBound        float64 `json:"crypto_bound_ratio,omitempty"`
	GatewayCallsPerCmd float64 `json:"gateway_calls_per_command"`
	// GatewayCalls counts the window's user-API calls by method and code.
	GatewayCalls map[string]float64 `json:"gateway_calls,omitempty"`
	// NATSInPerCmd and NATSOutPerCmd are nats-server's messages received and sent (its /varz
	// in_msgs, out_msgs: client publishes, JetStream acks, deliveries and API calls) in the
	// window per answered command; StoredPerCmd the messages stored per answered command by
	// stream (account/stream, from /jsz last_seq).
	NATSInPerCmd  float64            `json:"nats_in_msgs_per_command"`
	NATSOutPerCmd float64            `json:"nats_out_msgs_per_command"`
	StoredPerCmd  map[string]float64 `json:"stream_msgs_per_command,omitempty"`
	OK            bool               `json:"ok"`
	Why           string             `json:"why,omitempty"`
}

// BenchResult is a whole run.
type BenchResult struct {
	Vendors     int     `json:"vendors"`
	RoundS      float64 `json:"round_s"`
	CommandSize int     `json:"command_size"`
	// FullRoundUSPerEntry is the library's BenchmarkFullRound (N = 10,000, one core) CPU per
	// entry in the same run; 0 when not measured.
	FullRoundUSPerEntry float64     `json:"fullround_cpu_us_per_entry,omitempty"`
	Steps               []BenchStep `json:"steps"`
	// Capacity is answered commands/s at the last step that held (no aborted round, every
	// command exactly once, the offered rate answered).
	Capacity    float64 `json:"capacity_per_s"`
	CapacityCPU float64 `json:"capacity_server_cpu_us_per_command"`
}

// verdict decides whether a step held: every command issued was answered exactly once with
// its own response, no round aborted, the generator kept up with the offered rate and the
// window's answered rate matched it.
func (s *BenchStep) verdict() {
	var why []string
	if s.Lost > 0 {
		why = append(why, fmt.Sprintf("%d commands lost", s.Lost))
	}
	if s.Duplicated > 0 {
		why = append(why, fmt.Sprintf("%d duplicated", s.Duplicated))
	}
	if s.Wrong > 0 {
		why = append(why, fmt.Sprintf("%d wrong responses", s.Wrong))
	}
	if s.Aborted > 0 {
		why = append(why, fmt.Sprintf("%d rounds aborted", s.Aborted))
	}
	if s.Saturated > 0 {
		why = append(why, fmt.Sprintf("generator saturated %d times (more users needed)", s.Saturated))
	}
	if s.Issued == 0 || s.AnsweredPS < 0.9*s.Offered {
		why = append(why, fmt.Sprintf("answered %.0f/s of %.0f/s offered", s.AnsweredPS, s.Offered))
	}
	s.OK, s.Why = len(why) == 0, strings.Join(why, "; ")
}

// benchRecord is one issued command.
type benchRecord struct {
	payload string
	issued  time.Time
	done    time.Time
	res     *client.Result
	err     error
}

// tally fills the step's exactly-once counts from the records and what the devices saw.
func (s *BenchStep) tally(recs []*benchRecord, delivered map[string]int, from, to time.Time) []time.Duration {
	sent := map[string]bool{}
	var lat []time.Duration
	for _, r := range recs {
		sent[r.payload] = true
		switch {
		case r.err != nil || r.res == nil:
			s.Lost++
		case string(r.res.Response) != "ack:"+r.payload:
			s.Wrong++
		case delivered[r.payload] != 1:
			s.Duplicated++
		default:
			if !r.done.Before(from) && r.done.Before(to) {
				s.Answered++
				lat = append(lat, r.res.Latency)
			}
		}
	}
	for p, n := range delivered {
		if !sent[p] || n > 1 {
			s.Duplicated++
		}
	}
	if w := to.Sub(from).Seconds(); w > 0 {
		s.AnsweredPS = float64(s.Answered) / w
	}
	return lat
}

// Bench runs the steps and returns the result (also on a failed step).
func Bench(ctx context.Context, o BenchOptions) (*BenchResult, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.UsersPerRate <= 0 {
		o.UsersPerRate = 4
	}
	if o.DeviceSpacing <= 0 {
		o.DeviceSpacing = 2 * o.Round
	}
	res := &BenchResult{Vendors: o.Vendors, RoundS: o.Round.Seconds(), CommandSize: o.CommandSize}
	if o.FullRoundDir != "" {
		us, err := fullRoundCPUPerEntry(ctx, o.FullRoundDir)
		if err != nil {
			fmt.Fprintf(o.Out, "FullRound not measured: %v\n", err)
		} else {
			res.FullRoundUSPerEntry = us
			fmt.Fprintf(o.Out, "library FullRound (N=10,000, 1 KiB, -cpu 1): %.1f µs CPU per entry\n", us)
		}
	}
	for _, rate := range o.Rates {
		st, err := benchStep(ctx, o, rate)
		if err != nil {
			return res, err
		}
		if res.FullRoundUSPerEntry > 0 && st.CPUPerCmdUS > 0 {
			st.CryptoBound = st.CPUPerCmdUS / res.FullRoundUSPerEntry
		}
		res.Steps = append(res.Steps, *st)
		printStep(o.Out, st)
		if st.OK {
			res.Capacity, res.CapacityCPU = st.AnsweredPS, st.CPUPerCmdUS
		} else if !o.KeepGoing {
			break
		}
	}
	fmt.Fprintf(o.Out, "\nsustained capacity: %.0f answered commands/s (server CPU %.0f µs per command", res.Capacity, res.CapacityCPU)
	if res.FullRoundUSPerEntry > 0 && res.CapacityCPU > 0 {
		fmt.Fprintf(o.Out, ", %.1f× the library's FullRound per entry", res.CapacityCPU/res.FullRoundUSPerEntry)
	}
	fmt.Fprintln(o.Out, ")")
	if o.JSONPath != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.JSONPath, b, 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

func printStep(w io.Writer, s *BenchStep) {
	verdict := "ok"
	if !s.OK {
		verdict = "FAILED: " + s.Why
	}
	fmt.Fprintf(w, "\nstep %.0f/s offered (%d users, %d devices): answered %.0f/s in %.0fs, %d issued, %d rounds (%d aborted), %.2f fakes per real, latency p50 %.0f ms p99 %.0f ms, %.2f gateway calls per command — %s\n",
		s.Offered, s.Users, s.Devices, s.AnsweredPS, s.WindowS, s.Issued, s.Rounds, s.Aborted, s.FakesPerReal, s.LatencyP50MS, s.LatencyP99MS, s.GatewayCallsPerCmd, verdict)
	fmt.Fprintf(w, "  gateway calls in the window: %v\n", s.GatewayCalls)
	if s.NATSInPerCmd > 0 {
		streams := make([]string, 0, len(s.StoredPerCmd))
		for k, v := range s.StoredPerCmd {
			streams = append(streams, fmt.Sprintf("%s %.2f", k, v))
		}
		sort.Strings(streams)
		fmt.Fprintf(w, "  NATS messages per answered command: %.1f in, %.1f out; stored: %s\n", s.NATSInPerCmd, s.NATSOutPerCmd, strings.Join(streams, ", "))
	}
	fmt.Fprintf(w, "  server CPU %.2f s in the window = %.0f µs per answered command", s.ServerCPUS, s.CPUPerCmdUS)
	if s.CryptoBound > 0 {
		fmt.Fprintf(w, " (%.1f× FullRound per entry)", s.CryptoBound)
	}
	fmt.Fprintf(w, "; clients %.2f s (users %.2f s, devices %.2f s; not counted)\n", s.ClientCPUS, s.UsersCPUS, s.DevicesCPUS)
	keys := make([]string, 0, len(s.PerRoleUS))
	for k := range s.PerRoleUS {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return s.PerRoleUS[keys[i]] > s.PerRoleUS[keys[j]] })
	for _, k := range keys {
		fmt.Fprintf(w, "    %-15s %8.1f µs/command\n", k, s.PerRoleUS[k])
	}
}

// benchProc is one server process of a step.
type benchProc struct {
	name    string
	group   string
	cmd     *exec.Cmd
	health  int
	metrics int
	done    chan struct{}
	log     string
}

// benchEnv is one step's deployment.
type benchEnv struct {
	o     BenchOptions
	dir   string
	procs []*benchProc
	ports []int
	grpc  int
	nats  int
	redis int

	natsProf int // nats-server's profiling port (0: not profiled)
	natsMon  int // nats-server's monitoring port
}

func (e *benchEnv) port() int {
	if len(e.ports) == 0 {
		var ls []net.Listener
		for range 64 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				break
			}
			ls = append(ls, l)
			e.ports = append(e.ports, l.Addr().(*net.TCPAddr).Port)
		}
		for _, l := range ls {
			l.Close()
		}
	}
	p := e.ports[0]
	e.ports = e.ports[1:]
	return p
}

func (e *benchEnv) write(name string, b []byte) string {
	p := filepath.Join(e.dir, name)
	_ = os.WriteFile(p, b, 0o600)
	return p
}

func benchPassword(u string) string { return u + "-bench" }

func benchDeviceID(v, u int) string { return fmt.Sprintf("v%dd%d", v, u) }

// passwordFile writes user's password file once: rewriting it while a role reads it would
// hand that role an empty password.
func (e *benchEnv) passwordFile(user string) string {
	p := filepath.Join(e.dir, "pw-"+user)
	if _, err := os.Stat(p); err != nil {
		e.write("pw-"+user, []byte(benchPassword(user)+"\n"))
	}
	return p
}

// command runs bin with args as the bench's process name: on the CPUs --pin gives name
// (taskset), and killed if the bench dies.
func (e *benchEnv) command(name, bin string, args ...string) *exec.Cmd {
	if cpus, ok := e.o.Pin[name]; ok {
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (e *benchEnv) start(name, group string, env []string, bin string, args ...string) (*benchProc, error) {
	p := &benchProc{name: name, group: group, done: make(chan struct{}), log: filepath.Join(e.dir, name+".log")}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = e.command(name, bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	e.procs = append(e.procs, p)
	return p, nil
}

// role starts `mohito <sub>` as process name.
func (e *benchEnv) role(name, sub, user string, env []string, args ...string) error {
	metrics, health := e.port(), e.port()
	full := append([]string{sub,
		"--deployment", filepath.Join(e.dir, "deployment.json"),
		"--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", e.nats),
		"--nats-user", user, "--nats-password-file", e.passwordFile(user),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metrics),
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", health),
		"--log-level", envOrDefault("MOHITO_BENCH_LOG_LEVEL", "warn"),
	}, args...)
	if e.o.CPUProfileDir != "" {
		env = append(env, "MOHITO_CPUPROFILE="+filepath.Join(e.o.CPUProfileDir, name+".pprof"))
	}
	p, err := e.start(name, sub, env, e.o.Binary, full...)
	if err != nil {
		return err
	}
	p.metrics, p.health = metrics, health
	return nil
}

// stop ends every process (SIGTERM, then SIGKILL after a grace period).
func (e *benchEnv) stop() {
	for _, p := range e.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range e.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (e *benchEnv) tail(p *benchProc) string {
	b, _ := os.ReadFile(p.log)
	return string(b[max(0, len(b)-2000):])
}

// benchDeployment sizes a deployment for rate commands/s: C_v covers the vendor's share of
// one round's commands with 30 % headroom, the response table its devices.
func benchDeployment(o BenchOptions, rate float64, devices []int) contract.DeploymentFile {
	quantum := 16
	f := contract.DeploymentFile{Series: "bench", Mode: "Hardened", Suite: "X25519", CommandsPerUser: 1, Delta: 2,
		CommandSize: o.CommandSize, ResponseSize: 128,
		Period: o.Round.String(), ShufflerTimeout: (3 * o.Round).String(), ResponseDeadline: o.Round.String(),
		Encoders: max(o.Encoders, 1), OutBatch: 256, ResponseQuantum: quantum, CapacityDraw: "Random"}
	perRound := rate * o.Round.Seconds()
	total := 0
	for _, d := range devices {
		total += d
	}
	for v, d := range devices {
		base := uint64(math.Ceil(1.3*perRound*float64(d)/float64(total))) + 4
		f.Vendors = append(f.Vendors, contract.DeploymentVendor{Index: v, Name: fmt.Sprintf("v%d", v), Devices: d, Base: base, Jitter: 2,
			PaddedEntries: int(base) + 4, ResponsePaddedEntries: (d + quantum - 1) / quantum * quantum})
	}
	return f
}

// benchStep runs one offered rate on a fresh deployment.
func benchStep(ctx context.Context, o BenchOptions, rate float64) (*BenchStep, error) {
	users := int(math.Ceil(rate*o.UsersPerRate)) + o.Vendors
	// Devices are taken round-robin in issue order, so a device's commands are issued
	// DeviceSpacing apart: never two in one round (q = 1 per device and user, spec O1), while
	// a device count near the rate keeps the devices' per-round work — which every device
	// does, with or without a command — from dominating the client process.
	nDev := int(math.Ceil(rate*o.DeviceSpacing.Seconds())) + o.Vendors
	st := &BenchStep{Offered: rate, Users: users, Devices: nDev}
	dir, err := os.MkdirTemp("", "mohito-bench-")
	if err != nil {
		return nil, err
	}
	if os.Getenv("MOHITO_BENCH_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintf(o.Out, "step %.0f/s: logs kept in %s\n", rate, dir)
	}
	e := &benchEnv{o: o, dir: dir}
	defer e.stop()
	devices := make([]int, o.Vendors)
	for d := range nDev {
		devices[d%o.Vendors]++
	}
	df := benchDeployment(o, rate, devices)
	db, _ := json.Marshal(df)
	e.write("deployment.json", db)
	p := mohito.Params{Vendors: o.Vendors, Q: 1, CommandSize: o.CommandSize, ResponseSize: 128, Suite: mohito.SuiteX25519, ResponseMode: mohito.ResponseHardened}

	// NATS and Redis. Device u of vendor u mod Vendors is v<v>d<u>, with its own NATS user.
	ids := make([][]string, o.Vendors)
	for u := range nDev {
		ids[u%o.Vendors] = append(ids[u%o.Vendors], benchDeviceID(u%o.Vendors, u))
	}
	e.nats, e.redis, e.grpc = e.port(), e.port(), e.port()
	e.natsMon = e.port()
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nserver_name: bench\njetstream { store_dir: %q }\n%s", e.nats, e.natsMon, filepath.Join(dir, "js"), contract.AccountsConfig(ids, benchPassword))
	if o.CPUProfileDir != "" {
		// nats-server profiles over HTTP (prof_port): the window's profile is read from there.
		e.natsProf = e.port()
		conf += fmt.Sprintf("prof_port: %d\n", e.natsProf)
	}
	if _, err := e.start("nats-server", "nats-server", nil, filepath.Join(o.BinDir, "nats-server"), "-c", e.write("nats.conf", []byte(conf))); err != nil {
		return nil, err
	}
	if _, err := e.start("redis-server", "redis-server", nil, filepath.Join(o.BinDir, "redis-server"),
		"--port", strconv.Itoa(e.redis), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, e.nats, e.redis); err != nil {
		return nil, err
	}

	// Keys, device registries, tokens.
	keyFile := func(name string) (string, error) {
		k, err := mohito.GenerateKey(p.Suite)
		if err != nil {
			return "", err
		}
		b, err := k.Bytes()
		if err != nil {
			return "", err
		}
		return e.write(name, b), nil
	}
	ikey, err := keyFile("integrator.key")
	if err != nil {
		return nil, err
	}
	type dev struct {
		id    string
		sec   *mohito.DeviceSecret
		creds mohito.DeviceCredentials
	}
	devs := make([]dev, nDev)
	for v := range o.Vendors {
		type entry struct {
			ID  string `json:"id"`
			PRF []byte `json:"prf"`
		}
		var reg []entry
		for u := v; u < nDev; u += o.Vendors {
			s, err := mohito.NewDeviceSecret(rand.Reader)
			if err != nil {
				return nil, err
			}
			id := benchDeviceID(v, u)
			cr := mohito.DeviceCredentials{Vendor: uint32(v), Keys: s.Keys()}
			devs[u] = dev{id: id, sec: &s, creds: cr}
			reg = append(reg, entry{ID: id, PRF: cr.Keys.PRF[:]})
		}
		b, _ := json.Marshal(reg)
		e.write(fmt.Sprintf("devices-%d.json", v), b)
	}
	tokens := map[string]string{}
	for u := range users {
		tokens[fmt.Sprintf("tok-%d", u)] = fmt.Sprintf("user%d", u)
	}
	tb, _ := json.Marshal(tokens)
	e.write("tokens.json", tb)

	// The roles.
	iu := contract.IntegratorUser
	rdb := []string{"--redis-addr", fmt.Sprintf("127.0.0.1:%d", e.redis)}
	for v := range o.Vendors {
		vk, err := keyFile(fmt.Sprintf("vendor%d.key", v))
		if err != nil {
			return nil, err
		}
		if err := e.role(fmt.Sprintf("shuffler-%d", v), "shuffler", contract.VendorUser(v), nil, "--key-file", vk, "--vendor", strconv.Itoa(v)); err != nil {
			return nil, err
		}
		if err := e.role(fmt.Sprintf("vendor-agent-%d", v), "vendor-agent", contract.VendorUser(v), []string{"OBSCURA_VENDOR_INDEX=" + strconv.Itoa(v)},
			"--key-file", vk, "--devices-file", filepath.Join(dir, fmt.Sprintf("devices-%d.json", v))); err != nil {
			return nil, err
		}
	}
	steps := []error{
		e.role("gateway", "gateway", iu, nil, append(rdb, "--grpc-addr", fmt.Sprintf("127.0.0.1:%d", e.grpc), "--tokens-file", filepath.Join(dir, "tokens.json"))...),
		e.role("responder", "responder", iu, nil, rdb...),
		e.role("coordinator", "coordinator", iu, nil, append(rdb, "--key-file", ikey)...),
	}
	for i := range max(o.DecryptWorkers, 1) {
		steps = append(steps, e.role(fmt.Sprintf("decrypt-worker-%d", i), "decrypt-worker", iu, nil, "--key-file", ikey))
	}
	for i := range max(o.Encoders, 1) {
		steps = append(steps, e.role(fmt.Sprintf("encoder-%d", i), "encoder", iu, []string{fmt.Sprintf("POD_NAME=round-encoder-%d", i)}, rdb...))
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	if err := e.ready(ctx); err != nil {
		return nil, err
	}

	// Devices in a process of their own (bench-devices), over NATS, each as its own device
	// user: the users' generator in this process never waits on the devices' round work.
	dspec := BenchDevicesSpec{NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", e.nats), Params: p}
	for u := range nDev {
		dspec.Devices = append(dspec.Devices, BenchDeviceSecret{ID: devs[u].id, Vendor: u % o.Vendors, Secret: devs[u].sec[:]})
	}
	dp, err := e.startDevices(ctx, dspec)
	if err != nil {
		return nil, err
	}
	defer dp.kill()

	// Users: a few connections, one token each.
	var conns []*grpc.ClientConn
	var emu sync.Mutex
	errMsgs := map[string]int{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil {
			emu.Lock()
			errMsgs[method+": "+digits.ReplaceAllString(err.Error(), "N")]++
			emu.Unlock()
		}
		return err
	}
	defer func() {
		if os.Getenv("MOHITO_BENCH_KEEP") != "" {
			fmt.Fprintf(o.Out, "client-side call errors: %v\n", errMsgs)
		}
	}()
	for range 4 {
		c, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", e.grpc), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageSize)), grpc.WithUnaryInterceptor(count))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	idle := make(chan int, users)
	us := make([]*client.User, users)
	for u := range users {
		us[u] = &client.User{Name: fmt.Sprintf("user%d", u), GW: client.NewGatewayClient(conns[u%len(conns)], fmt.Sprintf("tok-%d", u))}
		idle <- u
	}
	probe := us[0].GW
	if _, err := probe.NextRound(ctx, 0, 200*time.Millisecond); err != nil {
		return nil, fmt.Errorf("no round opened: %w", err)
	}

	// The open-loop generator: rate arrivals per second, each on an idle user.
	gctx, stopGen := context.WithCancel(ctx)
	var rmu sync.Mutex
	var recs []*benchRecord
	var inflight sync.WaitGroup
	var saturated, seq atomic.Int64
	timeout := 6*o.Round + 20*time.Second
	begin := time.Now()
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		owed := 0.0
		last := time.Now()
		for {
			select {
			case <-gctx.Done():
				return
			case now := <-tick.C:
				owed += rate * now.Sub(last).Seconds()
				last = now
			}
			for ; owed >= 1; owed-- {
				var u int
				select {
				case u = <-idle:
				default:
					saturated.Add(1)
					continue
				}
				n := seq.Add(1)
				dv := &devs[int(n-1)%nDev].creds
				payload := fmt.Sprintf("c%d-u%d;", n, u)
				if len(payload) < o.PayloadSize {
					payload += strings.Repeat("x", o.PayloadSize-len(payload))
				}
				r := &benchRecord{payload: payload, issued: time.Now()}
				rmu.Lock()
				recs = append(recs, r)
				rmu.Unlock()
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					cctx, cancel := context.WithTimeout(ctx, timeout)
					r.res, r.err = us[u].Send(cctx, dv, []byte(r.payload))
					cancel()
					r.done = time.Now()
					idle <- u
				}()
			}
		}
	}()
	if !sleepCtx(ctx, o.Warmup) {
		stopGen()
		return nil, ctx.Err()
	}
	var natsProfiled chan struct{}
	var usersProfile *os.File
	if o.CPUProfileDir != "" {
		e.signal(syscall.SIGUSR1)
		natsProfiled = e.profileNATS(o.Measure)
		// The users' side too (this process: the users and their generator), not counted
		// in the server CPU but where refusal storms start.
		usersProfile = startUsersProfile(filepath.Join(o.CPUProfileDir, "users.pprof"))
	}
	from := time.Now()
	cpu0, self0, dev0 := e.cpu(), selfCPU(), dp.cpu()
	calls0 := e.samples("gateway", "mohito_gateway_calls_total")
	msgs0 := e.natsCounts()
	aborted0 := int(e.scrape("coordinator", `mohito_rounds_total{outcome="aborted"}`))
	if !sleepCtx(ctx, o.Measure) {
		stopGen()
		return nil, ctx.Err()
	}
	cpu1, self1, dev1 := e.cpu(), selfCPU(), dp.cpu()
	to := time.Now()
	calls1 := e.samples("gateway", "mohito_gateway_calls_total")
	msgs1 := e.natsCounts()
	if o.CPUProfileDir != "" {
		e.signal(syscall.SIGUSR2)
		if usersProfile != nil {
			pprof.StopCPUProfile()
			usersProfile.Close()
		}
		<-natsProfiled
	}
	stopGen()
	drained := make(chan struct{})
	go func() { inflight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(o.Drain + timeout):
	}
	// Let the devices' last answers land before counting.
	time.Sleep(200 * time.Millisecond)
	delivered, err := dp.finish()
	if err != nil {
		return nil, err
	}

	rmu.Lock()
	st.Issued = len(recs)
	lat := st.tally(recs, delivered, from, to)
	rmu.Unlock()
	st.Saturated = int(saturated.Load())
	st.LatencyP50MS, st.LatencyP99MS = ms(pct(lat, 0.5)), ms(pct(lat, 0.99))
	st.WindowS = to.Sub(from).Seconds()
	st.ServerCPU = map[string]float64{}
	for name, c := range cpu1 {
		g := e.group(name)
		st.ServerCPU[g] += c - cpu0[name]
		st.ServerCPUS += c - cpu0[name]
	}
	st.UsersCPUS, st.DevicesCPUS = self1-self0, dev1-dev0
	st.ClientCPUS = st.UsersCPUS + st.DevicesCPUS
	st.PerRoleUS = map[string]float64{}
	if st.Answered > 0 {
		st.CPUPerCmdUS = st.ServerCPUS / float64(st.Answered) * 1e6
		for g, c := range st.ServerCPU {
			st.PerRoleUS[g] = c / float64(st.Answered) * 1e6
		}
	}
	st.GatewayCalls = map[string]float64{}
	for k, v := range calls1 {
		if d := v - calls0[k]; d > 0 {
			st.GatewayCalls[k] = d
			if st.Answered > 0 {
				st.GatewayCallsPerCmd += d / float64(st.Answered)
			}
		}
	}
	if st.Answered > 0 {
		n := float64(st.Answered)
		st.NATSInPerCmd = (msgs1["in"] - msgs0["in"]) / n
		st.NATSOutPerCmd = (msgs1["out"] - msgs0["out"]) / n
		st.StoredPerCmd = map[string]float64{}
		for k, v := range msgs1 {
			if k != "in" && k != "out" && v > msgs0[k] {
				st.StoredPerCmd[k] = (v - msgs0[k]) / n
			}
		}
	}
	aborted := int(e.scrape("coordinator", `mohito_rounds_total{outcome="aborted"}`))
	st.Aborted = aborted - aborted0
	st.Rounds = int(e.scrape("coordinator", `mohito_rounds_total{outcome="done"}`)) + aborted
	st.Admitted = e.scrape("gateway", `mohito_commands_total{stage="admitted"}`)
	st.Fakes = e.scrapeAll("mohito_fakes_total")
	if st.Admitted > 0 {
		st.FakesPerReal = st.Fakes / st.Admitted
	}
	_ = begin
	for _, p := range e.procs {
		select {
		case <-p.done:
			return st, fmt.Errorf("%s exited during the step:\n%s", p.name, e.tail(p))
		default:
		}
	}
	st.verdict()
	return st, nil
}

// startUsersProfile starts this process's CPU profile into path (nil: not started, e.g. a
// profile already running).
func startUsersProfile(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		return nil
	}
	if pprof.StartCPUProfile(f) != nil {
		f.Close()
		return nil
	}
	return f
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func waitTCP(ctx context.Context, ports ...int) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range ports {
		for {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
				return fmt.Errorf("port %d: %w", p, err)
			}
		}
	}
	return nil
}

// ready waits for every role's /readyz.
func (e *benchEnv) ready(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	hc := http.Client{Timeout: 2 * time.Second}
	for _, p := range e.procs {
		if p.health == 0 {
			continue
		}
		for {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited:\n%s", p.name, e.tail(p))
			default:
			}
			resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.health))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
				return fmt.Errorf("%s not ready:\n%s", p.name, e.tail(p))
			}
		}
	}
	return nil
}

func (e *benchEnv) signal(s syscall.Signal) {
	for _, p := range e.procs {
		if p.health != 0 {
			_ = p.cmd.Process.Signal(s)
		}
	}
}

// natsCounts reads nats-server's message counters from its monitoring port: "in" and "out"
// (/varz in_msgs, out_msgs) and, per "account/stream", the stream's last sequence (/jsz).
// Empty when the port does not answer.
func (e *benchEnv) natsCounts() map[string]float64 {
	out := map[string]float64{}
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, v any) {
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", e.natsMon, path))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(v)
	}
	var varz struct {
		In  float64 `json:"in_msgs"`
		Out float64 `json:"out_msgs"`
	}
	get("/varz", &varz)
	out["in"], out["out"] = varz.In, varz.Out
	var jsz struct {
		Accounts []struct {
			Name    string `json:"name"`
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq float64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	get("/jsz?accounts=true&streams=true", &jsz)
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			out[a.Name+"/"+s.Name] += s.State.LastSeq
		}
	}
	return out
}

// profileNATS writes nats-server's CPU profile of the next d to <cpuprofile-dir>/nats-server.pprof
// (from its prof_port); the channel closes when it is written or failed.
func (e *benchEnv) profileNATS(d time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if e.natsProf == 0 {
			return
		}
		c := &http.Client{Timeout: d + 10*time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", e.natsProf, max(int(d.Seconds()), 1)))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if b, err := io.ReadAll(resp.Body); err == nil && resp.StatusCode == http.StatusOK {
			_ = os.WriteFile(filepath.Join(e.o.CPUProfileDir, "nats-server.pprof"), b, 0o644)
		}
	}()
	return done
}

// group is a process's role: its name without a trailing instance number.
func (e *benchEnv) group(name string) string {
	for _, p := range e.procs {
		if p.name == name {
			return p.group
		}
	}
	return name
}

// cpu returns each server process's CPU-seconds so far (utime + stime).
func (e *benchEnv) cpu() map[string]float64 {
	out := map[string]float64{}
	for _, p := range e.procs {
		pid := p.cmd.Process.Pid
		if c, err := procCPU(pid); err == nil {
			out[p.name] = c
		}
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

// procCPU reads utime + stime of pid (and of its waited-for children, for taskset's exec
// this is the same process) from /proc/<pid>/stat, in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat returns utime + stime in seconds from a /proc/<pid>/stat line.
func parseProcStat(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// After the command: state(0) ppid pgrp session tty tpgid flags minflt cminflt majflt
	// cmajflt utime(11) stime(12).
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stt, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat times")
	}
	return float64(ut+stt) / clockTicks, nil
}

func selfCPU() float64 {
	c, _ := procCPU(os.Getpid())
	return c
}

// scrape sums the samples of metric (a name, or name{labels} matched exactly) on the
// processes of group.
func (e *benchEnv) scrape(group, metric string) float64 {
	sum := 0.0
	for _, p := range e.procs {
		if p.group == group && p.metrics != 0 {
			sum += scrapeMetric(p.metrics, metric)
		}
	}
	return sum
}

// samples returns every sample of metric on the processes of group, by label set.
func (e *benchEnv) samples(group, metric string) map[string]float64 {
	out := map[string]float64{}
	hc := http.Client{Timeout: 2 * time.Second}
	for _, p := range e.procs {
		if p.group != group || p.metrics == 0 {
			continue
		}
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, metric+"{") {
				continue
			}
			sp := strings.LastIndexByte(line, ' ')
			if v, err := strconv.ParseFloat(line[sp+1:], 64); err == nil {
				out[line[len(metric):sp]] += v
			}
		}
		resp.Body.Close()
	}
	return out
}

func (e *benchEnv) scrapeAll(metric string) float64 {
	sum := 0.0
	for _, p := range e.procs {
		if p.metrics != 0 {
			sum += scrapeMetric(p.metrics, metric)
		}
	}
	return sum
}

func scrapeMetric(port int, metric string) float64 {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return sumSamples(resp.Body, metric)
}

// sumSamples sums the Prometheus text samples of metric: with labels in metric, the sample
// with exactly those labels; without, every sample of the name.
func sumSamples(r io.Reader, metric string) float64 {
	sum := 0.0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if !(name == metric || (!strings.Contains(metric, "{") && strings.HasPrefix(name, metric+"{"))) {
			continue
		}
		if v, err := strconv.ParseFloat(line[sp+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

var digits = regexp.MustCompile(`[0-9.]+`)

var cpuPerRound = regexp.MustCompile(`BenchmarkFullRound/N=10000\S*\s+\d+\s+.*?\s([0-9.]+) cpu-s/round`)

// fullRoundCPUPerEntry runs the library's BenchmarkFullRound at N = 10,000 on one core in
// dir (the services module) and returns its CPU per entry in µs.
func fullRoundCPUPerEntry(ctx context.Context, dir string) (float64, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkFullRound$/^N=10000$", "-benchtime", "3x", "-cpu", "1", "./pkg/mohito/")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("go test -bench FullRound: %v\n%s", err, out)
	}
	m := cpuPerRound.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no cpu-s/round in:\n%s", out)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return 0, err
	}
	return v / 10_000 * 1e6, nil
}

// ParseRates parses "100,200,400" or "100*2..3200" (start, factor, last).
func ParseRates(s string) ([]float64, error) {
	if a, rest, ok := strings.Cut(s, "*"); ok {
		f, last, ok := strings.Cut(rest, "..")
		start, e1 := strconv.ParseFloat(a, 64)
		factor, e2 := strconv.ParseFloat(f, 64)
		end, e3 := strconv.ParseFloat(last, 64)
		if !ok || e1 != nil || e2 != nil || e3 != nil || start <= 0 || factor <= 1 || end < start {
			return nil, fmt.Errorf("rates %q: want start*factor..last, e.g. 100*2..3200", s)
		}
		var out []float64
		for r := start; r <= end*1.0001; r *= factor {
			out = append(out, math.Round(r))
		}
		return out, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("rates %q: want a list of positive commands/s", s)
		}
		out = append(out, r)
	}
	if !slices.IsSorted(out) {
		return nil, fmt.Errorf("rates %q must increase", s)
	}
	return out, nil
}

func envOrDefault(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
