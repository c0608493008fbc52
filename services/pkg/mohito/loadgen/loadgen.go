// Package loadgen drives a simulated Mohito deployment (pkg/mohito/sim) with N
// users, devices and vendors (device counts skewed across vendors), a
// command rate and size, and reports per round: real and fake counts, round
// duration, latency percentiles and commands/s — live as a table with a
// progress bar, and as JSON and CSV files. The embedded demo is loadgen with
// small defaults.
package loadgen

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// Options configure a run.
type Options struct {
	Vendors        int
	Devices        int     // total devices
	Skew           float64 // Zipf-like exponent of device counts over vendors (0: uniform)
	Users          int
	Rounds         int
	Round          time.Duration
	CommandSize    int // L_c
	PayloadSize    int
	Think          time.Duration // per-user pause between commands (sets the rate)
	DecryptWorkers int
	Encoders       int
	Gateways       int
	Capacity       int                 // extra headroom of C_v over the expected load per vendor
	NATSURL        string              // empty: embedded server
	Password       func(string) string // with NATSURL
	Store          roundstate.Store    // nil: in-memory (demo only)
	Out            io.Writer
	JSONPath       string
	CSVPath        string
	Quiet          bool // no live table
	// Baseline also measures raw JetStream publish+consume of CommandSize
	// messages on the same server after the run (JetStreamMsgsPerS).
	Baseline bool
}

// RoundRow is one line of the per-round table.
type RoundRow struct {
	T          uint64  `json:"t"`
	Shuffler   int     `json:"shuffler"`
	Real       int     `json:"real"`
	Fake       int     `json:"fake"`
	Burst      int     `json:"burst"`
	Aborted    bool    `json:"aborted"`
	DurationMS float64 `json:"round_ms"`
	P50MS      float64 `json:"latency_p50_ms"`
	P99MS      float64 `json:"latency_p99_ms"`
	CmdPerSec  float64 `json:"commands_per_s"`
}

// Summary is the whole run.
type Summary struct {
	Rounds       int     `json:"rounds"`
	Aborted      int     `json:"aborted"`
	Commands     int     `json:"commands"`
	Failed       int     `json:"failed"`
	Fakes        int     `json:"fakes"`
	BurstRounds  int     `json:"burst_rounds"`
	Seconds      float64 `json:"seconds"`
	CommandsPerS float64 `json:"commands_per_s"`
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	ExactlyOnce  bool    `json:"exactly_once"`
	// WallCommandsPerS is commands answered over the whole wall time,
	// cluster start-up and drain included (a lower bound).
	WallCommandsPerS float64 `json:"wall_commands_per_s"`
	// JetStreamMsgsPerS is the raw JetStream publish+consume rate at the
	// same message size on the same server (with Options.Baseline), and
	// PipelineToJetStream = CommandsPerS ÷ JetStreamMsgsPerS.
	JetStreamMsgsPerS   float64    `json:"jetstream_msgs_per_s,omitempty"`
	PipelineToJetStream float64    `json:"pipeline_to_jetstream,omitempty"`
	Rows                []RoundRow `json:"per_round"`

	// Fields of an external run (Drive). Target is "external"; Rows then
	// count this run's commands by carrying round (fake and burst are
	// invisible to a user and stay 0, shuffler is -1 when the round was not
	// seen open); Duplicated counts payloads a device received more than
	// once or after its user gave up; Foreign counts commands the devices
	// received that this run did not send; Retried counts answered commands
	// that took more than one round (their first was closed or aborted, or
	// its response did not open) — still exactly once at the device.
	Target     string `json:"target,omitempty"`
	Sent       int    `json:"sent,omitempty"`
	Duplicated int    `json:"duplicated,omitempty"`
	Foreign    int    `json:"foreign,omitempty"`
	Retried    int    `json:"retried,omitempty"`
	// MaxAttempts is the most rounds one answered command took (1: none retried; 2: a retried
	// command was sent again exactly once).
	MaxAttempts int         `json:"max_attempts,omitempty"`
	PerSecond   []SecondRow `json:"per_second,omitempty"`
	// Reconnected counts the devices' MQTT connections re-established (and resubscribed)
	// after a loss during the run: a NATS node restarted, killed or drained under them.
	Reconnected int `json:"reconnected,omitempty"`
	// DeafDevices counts the devices that received no round during the run although their
	// vendor sends every device one M6 per round (spec C6): their commands cannot be answered.
	DeafDevices int `json:"deaf_devices,omitempty"`
}

type roundAcc struct {
	rep  roles.RoundReport
	done time.Time
	k    int
}

// DeviceCounts spreads total devices over vendors with a power-law skew.
func DeviceCounts(vendors, total int, skew float64) []int {
	w := make([]float64, vendors)
	sum := 0.0
	for v := range w {
		w[v] = 1 / math.Pow(float64(v+1), skew)
		sum += w[v]
	}
	out := make([]int, vendors)
	left := total
	for v := range out {
		out[v] = max(1, int(math.Round(float64(total)*w[v]/sum)))
		left -= out[v]
	}
	out[0] += max(left, 1-out[0])
	return out
}

// Run executes a load run and returns its summary.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	devices := DeviceCounts(o.Vendors, o.Devices, o.Skew)
	d := sim.SmallDeployment(devices, o.CommandSize, o.Round)
	d.Encoders = max(o.Encoders, 1)
	// C_v sized to the expected load: users spread over vendors by device share.
	for v := range devices {
		exp := float64(o.Users) * float64(devices[v]) / float64(o.Devices)
		base := uint64(math.Ceil(exp)) + uint64(o.Capacity)
		d.Policy[v].Base = base
		d.Capacity[v] = int(base+d.Delta+d.Policy[v].Width) + 4
	}
	d.OutBatch = 64
	d.ResponseDeadline = max(2*o.Round, 2*time.Second)
	url, password := o.NATSURL, o.Password
	if url == "" {
		dir, err := os.MkdirTemp("", "obscura-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		password = func(u string) string { return u + "-demo" }
		s, err := sim.EmbeddedNATS(filepath.Join(dir, "js"), sim.DeviceIDs(devices), password)
		if err != nil {
			return nil, err
		}
		defer func() { s.Shutdown(); s.WaitForShutdown() }()
		url = s.ClientURL()
	}
	store := o.Store
	if store == nil {
		store = roundstate.NewMemory(64)
	}
	var mu sync.Mutex
	acc := map[uint64]*roundAcc{}
	get := func(t uint64) *roundAcc {
		a := acc[t]
		if a == nil {
			a = &roundAcc{}
			acc[t] = a
		}
		return a
	}
	finished := make(chan uint64, 1024)
	cfg := sim.Config{
		Deployment: d, DevicesPerVendor: devices, Users: o.Users, Gateways: max(o.Gateways, 1),
		DecryptWorkers: max(o.DecryptWorkers, 1), NATSURL: url, Password: password, Store: store,
		MaxRounds: o.Rounds, AckWait: 10 * time.Second,
		OnRound: func(r roles.RoundReport) {
			mu.Lock()
			get(r.T).rep = r
			mu.Unlock()
			if r.Aborted {
				finished <- r.T
			}
		},
		OnDone: func(t uint64, k int) {
			mu.Lock()
			a := get(t)
			a.done, a.k = time.Now(), k
			mu.Unlock()
			finished <- t
		},
	}
	start := time.Now()
	c, err := sim.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	fmt.Fprintf(o.Out, "Obscura Mohito: %d vendors (devices %v), %d users, %d decrypt workers, %d encoders, round %v, L_c %d B\n",
		o.Vendors, devices, o.Users, cfg.DecryptWorkers, d.Encoders, o.Round, o.CommandSize)
	if !o.Quiet {
		fmt.Fprintf(o.Out, "%8s %4s %6s %6s %5s %9s %10s\n", "round", "V*", "real", "fake", "burst", "round ms", "cmd/s")
	}
	stop := make(chan struct{})
	var recs []sim.Record
	wdone := make(chan struct{})
	go func() {
		recs = sim.Workload{PayloadSize: o.PayloadSize, Think: o.Think, Timeout: 20*o.Round + 20*time.Second}.Run(ctx, c, stop)
		close(wdone)
	}()
	var rows []RoundRow
	seen := 0
	timeout := time.NewTimer(time.Duration(o.Rounds+20)*o.Round + 60*time.Second)
	defer timeout.Stop()
	for seen < o.Rounds {
		select {
		case <-ctx.Done():
			close(stop)
			<-wdone
			return nil, ctx.Err()
		case <-timeout.C:
			close(stop)
			<-wdone
			return nil, fmt.Errorf("only %d of %d rounds finished in time", seen, o.Rounds)
		case t := <-finished:
			seen++
			mu.Lock()
			a := get(t)
			row := RoundRow{T: t, Shuffler: a.rep.Shuffler, Real: a.rep.Valid, Fake: a.rep.N - a.rep.Valid, Burst: a.rep.S, Aborted: a.rep.Aborted}
			if !a.done.IsZero() && !a.rep.Opened.IsZero() {
				row.DurationMS = ms(a.done.Sub(a.rep.Opened))
			}
			row.CmdPerSec = float64(row.Real) / o.Round.Seconds()
			mu.Unlock()
			rows = append(rows, row)
			if !o.Quiet {
				ab := ""
				if row.Aborted {
					ab = "  ABORTED: " + a.rep.Reason
				}
				fmt.Fprintf(o.Out, "%8d %4d %6d %6d %5d %9.0f %10.0f  %s%s\n", row.T, row.Shuffler, row.Real, row.Fake, row.Burst, row.DurationMS, row.CmdPerSec, bar(seen, o.Rounds), ab)
			}
		}
	}
	close(stop)
	<-wdone
	elapsed := time.Since(start)
	// Latencies per carrying round, now that every command has finished.
	byRound := map[uint64][]time.Duration{}
	var all []time.Duration
	s := &Summary{Rounds: len(rows)}
	for _, r := range recs {
		if r.Err != nil {
			s.Failed++
			continue
		}
		s.Commands++
		byRound[r.Result.T] = append(byRound[r.Result.T], r.Result.Latency)
		all = append(all, r.Result.Latency)
	}
	for i := range rows {
		l := byRound[rows[i].T]
		rows[i].P50MS, rows[i].P99MS = ms(pct(l, 0.5)), ms(pct(l, 0.99))
		if rows[i].Aborted {
			s.Aborted++
		}
		s.Fakes += rows[i].Fake
		if rows[i].Burst > 0 {
			s.BurstRounds++
		}
	}
	s.Rows = rows
	if !o.Quiet {
		fmt.Fprintf(o.Out, "\nlatency by carrying round (submit → response opened, includes waiting for the round to open):\n%8s %7s %9s %9s\n", "round", "cmds", "p50 ms", "p99 ms")
		for _, r := range rows {
			fmt.Fprintf(o.Out, "%8d %7d %9.0f %9.0f\n", r.T, len(byRound[r.T]), r.P50MS, r.P99MS)
		}
	}
	s.Seconds = elapsed.Seconds()
	var planned float64
	if len(rows) > 0 {
		planned = float64(len(rows)) * o.Round.Seconds()
	}
	if planned > 0 {
		s.CommandsPerS = float64(s.Commands) / planned
	}
	s.LatencyP50MS, s.LatencyP99MS = ms(pct(all, 0.5)), ms(pct(all, 0.99))
	s.ExactlyOnce = sim.Check(c, okOnly(recs), 1) == nil
	if s.Seconds > 0 {
		s.WallCommandsPerS = float64(s.Commands) / s.Seconds
	}
	if o.Baseline {
		c.Stop()
		rate, err := JetStreamBaseline(ctx, url, contract.IntegratorUser, password(contract.IntegratorUser), max(5000, s.Commands), o.CommandSize)
		if err != nil {
			return s, fmt.Errorf("jetstream baseline: %w", err)
		}
		s.JetStreamMsgsPerS = rate
		if rate > 0 {
			s.PipelineToJetStream = s.CommandsPerS / rate
		}
		fmt.Fprintf(o.Out, "baseline: raw JetStream publish+consume %.0f msgs/s at %d B; pipeline %.0f commands/s = %.4f of it (wall, with start-up: %.0f/s)\n",
			rate, o.CommandSize, s.CommandsPerS, s.PipelineToJetStream, s.WallCommandsPerS)
	}
	fmt.Fprintf(o.Out, "\nsummary: %d rounds (%d aborted), %d commands answered (%d unfinished at stop), %d fakes, %d burst rounds\n",
		s.Rounds, s.Aborted, s.Commands, s.Failed, s.Fakes, s.BurstRounds)
	fmt.Fprintf(o.Out, "         %.0f commands/s, latency p50 %.0f ms p99 %.0f ms, exactly-once delivery: %v, wall %.1fs\n",
		s.CommandsPerS, s.LatencyP50MS, s.LatencyP99MS, s.ExactlyOnce, s.Seconds)
	if err := write(o, s); err != nil {
		return s, err
	}
	return s, nil
}

func okOnly(recs []sim.Record) []sim.Record {
	var out []sim.Record
	for _, r := range recs {
		if r.Err == nil {
			out = append(out, r)
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func bar(done, total int) string {
	const w = 20
	n := done * w / max(total, 1)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", w-n) + "] " + strconv.Itoa(done) + "/" + strconv.Itoa(total)
}

func write(o Options, s *Summary) error {
	if o.JSONPath != "" {
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(o.JSONPath, b, 0o644); err != nil {
			return err
		}
	}
	if o.CSVPath != "" {
		f, err := os.Create(o.CSVPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w := csv.NewWriter(f)
		w.Write([]string{"t", "shuffler", "real", "fake", "burst", "aborted", "round_ms", "p50_ms", "p99_ms", "commands_per_s"})
		for _, r := range s.Rows {
			w.Write([]string{strconv.FormatUint(r.T, 10), strconv.Itoa(r.Shuffler), strconv.Itoa(r.Real), strconv.Itoa(r.Fake), strconv.Itoa(r.Burst),
				strconv.FormatBool(r.Aborted), f1(r.DurationMS), f1(r.P50MS), f1(r.P99MS), f1(r.CmdPerSec)})
		}
		w.Flush()
		return w.Error()
	}
	return nil
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// Defaults are a run's default size: the demo's is small, the load generator's larger.
type Defaults struct{ Rounds, Users, Devices, Vendors int }

var (
	DemoDefaults    = Defaults{Rounds: 20, Users: 24, Devices: 60, Vendors: 3}
	LoadgenDefaults = Defaults{Rounds: 200, Users: 200, Devices: 600, Vendors: 5}
)

// Bind registers the flags of a run (`obscura demo`, `mohito loadgen`) on f.
func (o *Options) Bind(f *envflag.Set, d Defaults) {
	f.Int(&o.Vendors, "vendors", d.Vendors, "number of vendors")
	f.Int(&o.Devices, "devices", d.Devices, "total devices")
	f.Float64(&o.Skew, "skew", 1.0, "power-law skew of device counts over vendors (0 = uniform)")
	f.Int(&o.Users, "users", d.Users, "number of users")
	f.Int(&o.Rounds, "rounds", d.Rounds, "rounds to run before the summary")
	f.Duration(&o.Round, "round", 500*time.Millisecond, "round period T")
	f.Int(&o.CommandSize, "command-size", 1024, "padded command size L_c (bytes)")
	f.Int(&o.PayloadSize, "payload", 64, "command payload bytes")
	f.Duration(&o.Think, "think", 0, "pause between a user's commands (sets the rate)")
	f.Int(&o.DecryptWorkers, "decrypt-workers", 2, "decrypt workers")
	f.Int(&o.Encoders, "encoders", 2, "OKVS encoder partitions")
	f.Int(&o.Gateways, "gateways", 2, "gateway replicas")
	f.Int(&o.Capacity, "headroom", 2, "C_v headroom over the expected per-round load")
	f.String(&o.NATSURL, "nats-url", "", "external NATS with the Obscura accounts (empty: embedded)")
	f.String(&o.JSONPath, "json", "", "write the summary as JSON here")
	f.String(&o.CSVPath, "csv", "", "write the per-round table as CSV here")
	f.Bool(&o.Baseline, "jetstream-baseline", false, "after the run, measure raw JetStream publish+consume at --command-size on the same server")
}

// Validate lists what is wrong with the run's size, one phrase each.
func (o *Options) Validate() []string {
	var bad []string
	if o.Vendors < 1 || o.Vendors > 64 {
		bad = append(bad, "--vendors must be in [1, 64]")
	}
	if o.Devices < o.Vendors {
		bad = append(bad, "--devices must be ≥ --vendors")
	}
	if o.Users < 1 || o.Rounds < 1 || o.Round < 50*time.Millisecond {
		bad = append(bad, "--users ≥ 1, --rounds ≥ 1 and --round ≥ 50ms are required")
	}
	if o.CommandSize < 128 || o.CommandSize > 4000 || o.PayloadSize > o.CommandSize-90 {
		bad = append(bad, "--command-size must be in [128, 4000] and --payload ≤ --command-size − 90")
	}
	return bad
}
