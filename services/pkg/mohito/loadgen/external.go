package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// ProvisionedDevice is one line of the devices file `mohito provision`
// writes for the external driver: everything a device and its user hold
// (spec §3.4), so it is a secret of the test harness, never of a vendor.
type ProvisionedDevice struct {
	ID     string `json:"id"`
	Vendor int    `json:"vendor"`
	Secret []byte `json:"secret"` // the 32-byte device secret, base64 in JSON
}

// Credentials are what the device's user holds: its vendor and keys.
func (d *ProvisionedDevice) Credentials() (mohito.DeviceCredentials, error) {
	s, err := d.secret()
	if err != nil {
		return mohito.DeviceCredentials{}, err
	}
	return mohito.DeviceCredentials{Vendor: uint32(d.Vendor), Keys: s.Keys()}, nil
}

func (d *ProvisionedDevice) secret() (*mohito.DeviceSecret, error) {
	var s mohito.DeviceSecret
	if len(d.Secret) != len(s) {
		return nil, fmt.Errorf("device %s: secret is %d bytes, want %d", d.ID, len(d.Secret), len(s))
	}
	copy(s[:], d.Secret)
	return &s, nil
}

// DeviceLogin is one device's own user on its vendor's NATS account (MQTT listener),
// contract.DeviceUser: no two devices share one.
type DeviceLogin struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// DriveOptions configure [Drive]: a load run against an existing deployment.
type DriveOptions struct {
	Conn grpc.ClientConnInterface // to the gateway (through the TLS edge)
	// Conns, when set, are the users' connections instead: user u uses Conns[u % len(Conns)].
	// Real users each hold their own; one connection shared by hundreds of users is the
	// generator's ceiling (the edge allows 100 concurrent streams per connection, and each
	// user keeps its Rounds stream and a parked Fetch open).
	Conns        []grpc.ClientConnInterface
	Tokens       map[string]string // access token → user
	Devices      []ProvisionedDevice
	MQTTAddr     string                 // NATS's MQTT listener (host:port)
	DeviceLogins map[string]DeviceLogin // per device id
	Users        int                    // concurrent users (≤ len(Tokens)); 0: one per token
	Duration     time.Duration          // stop issuing after this long (0: no limit)
	Commands     int                    // stop after this many commands (0: no limit)
	Think        time.Duration          // per-user pause between commands
	Poll         time.Duration          // fallback polling interval per user when the gateway pushes nothing (client.User.Poll)
	PayloadSize  int
	Timeout      time.Duration // per command (default 60 s)
	Progress     time.Duration // progress line interval (default 5 s)
	Out          io.Writer
	JSONPath     string
	CSVPath      string
}

// SecondRow is the throughput of one second of an external run.
type SecondRow struct {
	Second   int     `json:"second"`
	Answered int     `json:"answered"`
	P50MS    float64 `json:"latency_p50_ms"`
	P99MS    float64 `json:"latency_p99_ms"`
}

// ErrNotExactlyOnce is returned by Drive (with the summary) when a command
// failed, was delivered twice or answered wrongly.
var ErrNotExactlyOnce = errors.New("not every command was delivered exactly once and answered")

type driveRecord struct {
	payload    string
	res        *client.Result
	err        error
	done       time.Time
	wrongReply bool
}

// roundWatch follows the gateway's open round (RoundInfo) so the report can
// name each carrying round's V* and opening time: the user API exposes no
// more (fakes and bursts are the integrator's to see, not a user's).
type roundWatch struct {
	mu      sync.Mutex
	opened  map[uint64]time.Time // rounds seen opening (not the one open at the first look)
	shuf    map[uint64]int
	last    uint64
	started bool
}

func (w *roundWatch) run(ctx context.Context, gw *client.GatewayClient, every time.Duration) {
	var after uint64
	for {
		// Rounds are pushed on the gateway's Rounds stream; every is the fallback poll.
		ri, err := gw.NextRound(ctx, after, every)
		if err != nil {
			return
		}
		after = ri.T
		w.mu.Lock()
		if _, ok := w.shuf[ri.T]; !ok {
			w.shuf[ri.T] = int(ri.Shuffler)
			// The round open at the first look opened at an unknown time.
			if w.started {
				w.opened[ri.T] = time.Now()
			}
		}
		w.started = true
		w.last = max(w.last, ri.T)
		w.mu.Unlock()
	}
}

func (w *roundWatch) current() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// period estimates T from the rounds seen open.
func (w *roundWatch) period() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lo, hi uint64
	for t := range w.opened {
		if lo == 0 || t < lo {
			lo = t
		}
		hi = max(hi, t)
	}
	if hi <= lo {
		return 0
	}
	return w.opened[hi].Sub(w.opened[lo]) / time.Duration(hi-lo)
}

// Drive runs users and devices against an existing deployment: users reach
// the gateway over opts.Conn, devices connect to the vendors' MQTT listener
// as their vendor's device user. It reports per carrying round and per
// second, and checks exactly-once: every payload sent reached its device
// once and its response came back. The summary is returned also with
// [ErrNotExactlyOnce].
func Drive(ctx context.Context, o DriveOptions) (*Summary, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.Progress == 0 {
		o.Progress = 5 * time.Second
	}
	tokens := slices.Sorted(maps.Keys(o.Tokens))
	if len(tokens) == 0 || len(o.Devices) == 0 {
		return nil, errors.New("drive: need at least one token and one device")
	}
	users := o.Users
	if users == 0 {
		users = len(tokens)
	}
	if users > len(tokens) {
		return nil, fmt.Errorf("drive: %d users but only %d tokens", users, len(tokens))
	}
	users = min(users, len(o.Devices))
	if o.Duration <= 0 && o.Commands <= 0 {
		return nil, errors.New("drive: set a duration or a number of commands")
	}
	// The round watcher follows the gateway's Rounds stream (one call per ~20 s); where the
	// gateway pushes nothing it polls, and behind an edge with a per-client rate limit it must
	// not share a user's budget, so it takes a token no user drives when there is one (and
	// polls more slowly when there is not).
	watchToken, watchEvery := tokens[len(tokens)-1], 200*time.Millisecond
	if users >= len(tokens) {
		watchToken, watchEvery = tokens[0], time.Second
	}
	probe := client.NewGatewayClient(o.Conn, watchToken)
	ri, err := firstRound(ctx, probe)
	if err != nil {
		return nil, err
	}
	p := ri.Params

	// A run id keeps this run's payloads apart from anything else in flight.
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	run := hex.EncodeToString(nonce[:])
	var deliveries sim.Deliveries
	conns, err := startDevices(ctx, o, p, run, deliveries.Ack)
	defer func() {
		for _, c := range conns {
			c.tr.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "Obscura Mohito external run %s: %d users, %d devices of %d vendors over MQTT %s, round %d open (V* = %d)\n",
		run, users, len(o.Devices), p.Vendors, o.MQTTAddr, ri.T, ri.Shuffler)

	watch := &roundWatch{opened: map[uint64]time.Time{}, shuf: map[uint64]int{}}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watch.run(wctx, probe, watchEvery)

	owned := make([][]mohito.DeviceCredentials, users)
	for i, d := range o.Devices {
		cr, err := d.Credentials()
		if err != nil {
			return nil, err
		}
		owned[i%users] = append(owned[i%users], cr)
	}
	start := time.Now()
	var issueUntil time.Time
	if o.Duration > 0 {
		issueUntil = start.Add(o.Duration)
	}
	var claimed, answered, failed atomic.Int64
	var recMu sync.Mutex
	var recs []driveRecord
	var wg sync.WaitGroup
	for u := range users {
		conn := o.Conn
		if len(o.Conns) > 0 {
			conn = o.Conns[u%len(o.Conns)]
		}
		gw := client.NewGatewayClient(conn, tokens[u])
		user := &client.User{Name: o.Tokens[tokens[u]], GW: gw, Poll: o.Poll}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				if !issueUntil.IsZero() && time.Now().After(issueUntil) {
					return
				}
				if o.Commands > 0 && claimed.Add(1) > int64(o.Commands) {
					return
				}
				dev := &owned[u][seq%len(owned[u])]
				payload := fmt.Sprintf("%s-u%d-%d;", run, u, seq)
				if len(payload) < o.PayloadSize {
					payload += strings.Repeat("x", o.PayloadSize-len(payload))
				}
				cctx, cancel := context.WithTimeout(ctx, o.Timeout)
				res, err := user.Send(cctx, dev, []byte(payload))
				cancel()
				r := driveRecord{payload: payload, res: res, err: err, done: time.Now()}
				if err == nil && string(res.Response) != "ack:"+payload {
					r.wrongReply = true
				}
				if err != nil || r.wrongReply {
					failed.Add(1)
				} else {
					answered.Add(1)
				}
				recMu.Lock()
				recs = append(recs, r)
				recMu.Unlock()
				if o.Think > 0 && !clock.Sleep(ctx, o.Think) {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(o.Progress)
	defer tick.Stop()
	var lastN int64
	lastAt := start
loop:
	for {
		select {
		case <-done:
			break loop
		case now := <-tick.C:
			n := answered.Load()
			recMu.Lock()
			var lat []time.Duration
			for _, r := range recs {
				if r.err == nil && r.done.After(lastAt) {
					lat = append(lat, r.res.Latency)
				}
			}
			recMu.Unlock()
			fmt.Fprintf(o.Out, "%7.1fs  answered %6d  failed %4d  round %d  last %.0fs: %.1f cmd/s, p50 %.0f ms, p99 %.0f ms\n",
				now.Sub(start).Seconds(), n, failed.Load(), watch.current(), now.Sub(lastAt).Seconds(),
				float64(n-lastN)/now.Sub(lastAt).Seconds(), ms(pct(lat, 0.5)), ms(pct(lat, 0.99)))
			lastN, lastAt = n, now
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	// A late duplicate would arrive in a round after the last carrying one:
	// wait until two more rounds have opened before counting deliveries.
	var lastT uint64
	for _, r := range recs {
		if r.res != nil {
			lastT = max(lastT, r.res.T)
		}
	}
	settle := time.Now().Add(o.Timeout)
	for watch.current() < lastT+2 && time.Now().Before(settle) {
		if !clock.Sleep(ctx, 50*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	stopWatch()

	s := summarize(recs, watch, start, elapsed)
	// Commands of other runs to these devices are counted apart (Foreign).
	delivered := deliveries.Counts()
	for pl, n := range delivered {
		if !strings.HasPrefix(pl, run+"-") {
			s.Foreign += n
			delete(delivered, pl)
		}
	}
	for _, r := range recs {
		switch n := delivered[r.payload]; {
		case n > 1:
			s.Duplicated++
		case n == 0 && r.err == nil:
			s.Failed++ // answered without reaching its device: impossible unless forged
		}
	}
	sent := map[string]bool{}
	for _, r := range recs {
		sent[r.payload] = true
	}
	for pl := range delivered {
		if !sent[pl] {
			s.Duplicated++ // delivered although its user gave up on it
		}
	}
	// Every device gets one M6 per round (spec C6): one that received none was deaf all run.
	var deaf []string
	for _, c := range conns {
		s.Reconnected += c.tr.Reconnects()
		if n, _ := c.dev.Stats(); n == 0 {
			deaf = append(deaf, c.dev.ID)
		}
	}
	slices.Sort(deaf)
	s.DeafDevices = len(deaf)
	s.ExactlyOnce = s.Failed == 0 && s.Duplicated == 0 && s.Commands > 0

	fmt.Fprintf(o.Out, "\n%8s %4s %7s %9s %9s %9s %10s\n", "round", "V*", "ours", "round ms", "p50 ms", "p99 ms", "cmd/s")
	for _, r := range s.Rows {
		fmt.Fprintf(o.Out, "%8d %4d %7d %9.0f %9.0f %9.0f %10.1f\n", r.T, r.Shuffler, r.Real, r.DurationMS, r.P50MS, r.P99MS, r.CmdPerSec)
	}
	fmt.Fprintf(o.Out, "\nsummary: %d commands sent, %d answered (%d retried into a later round), %d failed, %d duplicated; %d carrying rounds (period ≈ %v); %d device connections re-established\n",
		s.Sent, s.Commands, s.Retried, s.Failed, s.Duplicated, s.Rounds, watch.period().Round(time.Millisecond), s.Reconnected)
	if len(deaf) > 0 {
		fmt.Fprintf(o.Out, "  %d devices received no round (their vendor sends each one every round): %s\n", len(deaf), strings.Join(deaf[:min(len(deaf), 10)], " "))
	}
	// The first few commands that were not delivered exactly once, to debug from the output.
	shown := 0
	for _, r := range recs {
		n := deliveries.Count(r.payload)
		if (r.err == nil && !r.wrongReply && n == 1) || shown == 5 {
			continue
		}
		shown++
		why := "answered"
		if r.err != nil {
			why = r.err.Error()
		} else if r.wrongReply {
			why = "wrong reply"
		}
		fmt.Fprintf(o.Out, "  %s: delivered %d× at %s, %s\n", strings.SplitN(r.payload, ";", 2)[0], n, r.done.Format("15:04:05.000"), why)
	}
	fmt.Fprintf(o.Out, "         %.1f commands/s over %.1fs, latency p50 %.0f ms p99 %.0f ms, exactly-once delivery: %v\n",
		s.WallCommandsPerS, s.Seconds, s.LatencyP50MS, s.LatencyP99MS, s.ExactlyOnce)
	if err := write(Options{JSONPath: o.JSONPath, CSVPath: o.CSVPath}, s); err != nil {
		return s, err
	}
	if !s.ExactlyOnce {
		return s, fmt.Errorf("%w: %d failed, %d duplicated of %d sent", ErrNotExactlyOnce, s.Failed, s.Duplicated, s.Sent)
	}
	return s, nil
}

// firstRound waits (up to a minute) for the gateway to show an open round.
func firstRound(ctx context.Context, gw *client.GatewayClient) (*mohito.RoundInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ri, err := gw.RoundInfo(ctx)
		if err == nil {
			return ri, nil
		}
		if !clock.Sleep(ctx, 200*time.Millisecond) {
			return nil, fmt.Errorf("drive: no open round at the gateway: %w", err)
		}
	}
}

// summarize builds the per-round and per-second tables from the records.
func summarize(recs []driveRecord, w *roundWatch, start time.Time, elapsed time.Duration) *Summary {
	s := &Summary{Target: "external", Sent: len(recs), Seconds: elapsed.Seconds()}
	byRound := map[uint64][]time.Duration{}
	lastDone := map[uint64]time.Time{}
	bySecond := map[int][]time.Duration{}
	var all []time.Duration
	for _, r := range recs {
		if r.err != nil || r.wrongReply {
			s.Failed++
			continue
		}
		s.Commands++
		if r.res.Attempts > 1 {
			s.Retried++
		}
		s.MaxAttempts = max(s.MaxAttempts, r.res.Attempts)
		t := r.res.T
		byRound[t] = append(byRound[t], r.res.Latency)
		if r.done.After(lastDone[t]) {
			lastDone[t] = r.done
		}
		sec := int(r.done.Sub(start) / time.Second)
		bySecond[sec] = append(bySecond[sec], r.res.Latency)
		all = append(all, r.res.Latency)
	}
	period := w.period()
	w.mu.Lock()
	for _, t := range slices.Sorted(maps.Keys(byRound)) {
		l := byRound[t]
		row := RoundRow{T: t, Shuffler: -1, Real: len(l), P50MS: ms(pct(l, 0.5)), P99MS: ms(pct(l, 0.99))}
		if v, ok := w.shuf[t]; ok {
			row.Shuffler = v
		}
		if opened, ok := w.opened[t]; ok {
			row.DurationMS = ms(lastDone[t].Sub(opened))
		}
		if period > 0 {
			row.CmdPerSec = float64(row.Real) / period.Seconds()
		}
		s.Rows = append(s.Rows, row)
	}
	w.mu.Unlock()
	s.Rounds = len(s.Rows)
	secs := make([]int, 0, len(bySecond))
	for k := range bySecond {
		secs = append(secs, k)
	}
	sort.Ints(secs)
	for _, k := range secs {
		l := bySecond[k]
		s.PerSecond = append(s.PerSecond, SecondRow{Second: k, Answered: len(l), P50MS: ms(pct(l, 0.5)), P99MS: ms(pct(l, 0.99))})
	}
	s.LatencyP50MS, s.LatencyP99MS = ms(pct(all, 0.5)), ms(pct(all, 0.99))
	if s.Seconds > 0 {
		s.WallCommandsPerS = float64(s.Commands) / s.Seconds
		s.CommandsPerS = s.WallCommandsPerS
	}
	return s
}

// driveDevice is one device of the drive and its MQTT connection.
type driveDevice struct {
	dev *client.Device
	tr  *client.MQTTTransport
}

// startDevices connects every device to the MQTT listener as its own device
// user (a few at a time) and subscribes it to its command topic.
func startDevices(ctx context.Context, o DriveOptions, p mohito.Params, run string, h client.Handler) ([]driveDevice, error) {
	var mu sync.Mutex
	var conns []driveDevice
	var firstErr error
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, d := range o.Devices {
		login, ok := o.DeviceLogins[d.ID]
		if !ok {
			return conns, fmt.Errorf("device %s: no device credentials", d.ID)
		}
		s, err := d.secret()
		if err != nil {
			return conns, err
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// The client id carries the run id: a leftover session of an
			// earlier run must not take this connection over.
			var dev *client.Device
			m, err := dialMQTTRetrying(ctx, o.MQTTAddr, login.User, login.Password, func(m *client.MQTTTransport) error {
				dev = client.NewDevice(d.ID, s, p, m, h)
				return dev.Start()
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("device %s over MQTT %s: %w", d.ID, o.MQTTAddr, err)
				}
				return
			}
			conns = append(conns, driveDevice{dev: dev, tr: m})
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return conns, firstErr
}

// mqttPatience is how long a device keeps trying to reach its broker and subscribe before the
// drive gives up: a NATS node restarting for a new account (its turn, docs/chart.md) refuses
// connections for a few seconds, and a node killed under load takes its pod's recreation and
// its streams' catch-up — the cluster e2e allows 3 minutes for that — during which NATS cannot
// save MQTT sessions (it closes the connection: "connection lost before Subscribe
// completed", the full run's nats-node-kill drive gave up after one minute of it). Once
// started, a device reconnects by itself (client.MQTTTransport), as real ones do.
const mqttPatience = 3 * time.Minute

// dialMQTTRetrying dials as client.DialMQTT does and runs start on the connection (the
// device's subscriptions), retrying both with backoff for up to mqttPatience: a subscription
// fails too, refused or with its connection closed, while the session streams elect a leader
// (a node killed under load).
func dialMQTTRetrying(ctx context.Context, addr, user, password string, start func(*client.MQTTTransport) error) (*client.MQTTTransport, error) {
	deadline := time.Now().Add(mqttPatience)
	wait := 250 * time.Millisecond
	for {
		m, err := client.DialMQTT(addr, user, password)
		if err == nil {
			if err = start(m); err == nil {
				return m, nil
			}
			m.Close()
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 4*time.Second)
	}
}
