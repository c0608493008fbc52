// Package sim is the SDDR discrete-event simulator (spec §6.2, issue 18 item 2): many devices
// with mobility and encounter schedules, each running the real protocol engine of package sddr
// (beacons, key derivation, Bloom recognition, revocation) on a virtual clock over a simulated
// medium, with the energy model of spec §5.5 for battery use. A run is deterministic from its
// seed, and can be split in shards (devices partitioned in contiguous id ranges) that exchange
// the adverts of devices meeting across shards through a Transport (in-process or NATS); the
// shards' merged result equals the one-shard result of the same seed.
//
// # Time and the medium
//
// Device X beacons at τ_k = φ_X + k·I + j_k (φ_X ∈ [1 s, I+1 s), jitter j_k ∈ [−1 s, 1 s), all
// from the seed): NextBeacon(τ_k), then an inquiry of 10.24 s. Every device in X's cell (see
// Mobility) answers with probability PDet at τ_k + U[0, 10.24 s) with the advert it serves at
// that moment (spec §6.2: the frame installed at the moment of the response), and X's engine
// processes the answers in time order (at most 255 new peers per inquiry: the engine's bound).
// The medium passes only the 6-byte address and the 240-byte frame.
//
// Virtual time advances in steps of Δ = (I − 2 s)/2. Iteration s runs, in every shard:
//
//	A(s): each device that is in a multi-device cell at step s−1 or s installs the beacons
//	      (and revocations) falling in step s; its adverts go into a timeline;
//	exchange: adverts of devices whose step-(s−1) cell holds devices of another shard go to
//	      those shards (Transport, one batch per shard pair and step: the barrier);
//	B(s): each device that inquired in step s−1 with neighbours processes their responses,
//	      reading each responder's timeline at the response time.
//
// Δ ≤ (I − 2 s)/2 guarantees a device's next beacon falls at least two steps after its inquiry,
// so its engine sees NextBeacon and OnBeacon calls in true time order; Δ > 10.24 s keeps every
// response within the next step. Placement is evaluated at the start of each step.
//
// # Aggregation (the approximation that makes a city fit)
//
// A device alone in its cell is not simulated beacon by beacon: nobody can hear it, and its own
// inquiries find nobody. Its engine sleeps; when it next shares a cell it wakes with the beacon
// of its last scheduled time (rotating if its epoch ended meanwhile, applying a revocation due
// meanwhile with RevokeNow). Its energy is accounted per time step instead: every device,
// awake or not, pays Equation 1's idle-with-Bluetooth and epoch-change terms per simulated
// second and the 0-device discovery cost for each scheduled inquiry; responses received and
// inquiries answered add the per-device terms. The beacon counter of a sleeping device does
// not advance (a woken device's counts start where they stopped); epoch changes are charged at
// the nominal rate (one per Config.Epoch) rather than counted.
package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
)

// InquiryDuration is a BT2.1 inquiry (spec §6.2).
const InquiryDuration = 10240 * time.Millisecond

// Config is one run (or one shard of it).
type Config struct {
	RunID    string
	Scenario string // ScenarioCity (default), ScenarioCrowd or ScenarioGroups
	Devices  int
	Duration time.Duration
	Seed     uint64
	Interval time.Duration // discovery interval
	// Epoch is every device's nominal epoch length (sddr.Config.Epoch; default 15 min) and
	// EpochJitter its uniform extra length per epoch (default 60 s, negative: none).
	Epoch       time.Duration
	EpochJitter time.Duration
	// Friends is each device's number of friends: its clique of Friends+1 consecutive ids,
	// one link value per pair, advertised and listened for.
	Friends   int
	GroupSize int // ScenarioGroups: devices per fixed group
	Shards    int
	Shard     int
	// PDet is the per-inquiry detection probability of a device in range (default 0.95).
	PDet float64
	// RevokeFraction of devices revoke one friend (RevokeNow) at RevokeAt·Duration plus up to
	// one interval (defaults 0.1 and 0.5; a negative fraction: nobody).
	RevokeFraction float64
	RevokeAt       float64
	// Energy is the coefficients of Equation 1 (spec §5.5); each zero one is the paper's
	// (contract.PaperEnergy, the calibration of sddr.PaperEnergyModel).
	Energy contract.Energy
	// Mobility overrides the scenario's.
	Mobility Mobility
	// Progress, if set, is called after each step.
	Progress func(step, steps int64)
}

// Limits of a configuration.
const (
	MaxDevices  = 1 << 24
	MaxShards   = 1024
	MinInterval = 23 * time.Second
	MaxInterval = 15 * time.Minute
	// MinEpoch and MaxEpoch bound Config.Epoch; an epoch holds at most MaxBeaconsPerEpoch
	// discovery intervals (the beacon counter is one byte, sddr.Config.CountMax).
	MinEpoch           = time.Minute
	MaxEpoch           = 24 * time.Hour
	MaxBeaconsPerEpoch = 255
)

func (c *Config) defaults() {
	if c.Scenario == "" {
		c.Scenario = ScenarioCity
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.Epoch == 0 {
		c.Epoch = sddr.DefaultEpoch
	}
	if c.EpochJitter == 0 {
		c.EpochJitter = sddr.DefaultEpochJitter
	}
	if c.PDet == 0 {
		c.PDet = 0.95
	}
	if c.RevokeFraction == 0 {
		c.RevokeFraction = 0.1
	}
	if c.RevokeAt == 0 {
		c.RevokeAt = 0.5
	}
	c.Energy = c.Energy.WithDefaults()
	if c.GroupSize == 0 {
		c.GroupSize = 5
	}
}

// Validate checks a configuration (after defaults), naming every bad setting.
func (c *Config) Validate() error {
	c.defaults()
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	switch c.Scenario {
	case ScenarioCity, ScenarioCrowd, ScenarioGroups:
	default:
		bad("scenario %q must be city, crowd or groups", c.Scenario)
	}
	if c.Devices < 2 || c.Devices > MaxDevices {
		bad("devices %d outside 2..%d", c.Devices, MaxDevices)
	}
	if c.Duration < time.Minute || c.Duration%time.Second != 0 {
		bad("duration %v must be at least a minute, in whole seconds", c.Duration)
	}
	if c.Interval < MinInterval || c.Interval > MaxInterval || c.Interval%time.Millisecond != 0 {
		bad("interval %v outside %v..%v (whole milliseconds): an inquiry (10.24 s) and the ±1 s jitter must fit twice in a step", c.Interval, MinInterval, MaxInterval)
	}
	if c.Epoch < MinEpoch || c.Epoch > MaxEpoch || c.Epoch%time.Second != 0 {
		bad("epoch %v outside %v..%v (whole seconds)", c.Epoch, MinEpoch, MaxEpoch)
	} else if c.Epoch < c.Interval || c.Epoch > MaxBeaconsPerEpoch*c.Interval {
		bad("epoch %v must hold 1..%d discovery intervals of %v (a beacon count is one byte)", c.Epoch, MaxBeaconsPerEpoch, c.Interval)
	}
	if c.EpochJitter > c.Epoch || max(c.EpochJitter, 0)%time.Second != 0 {
		bad("epoch jitter %v outside 0..epoch %v (whole seconds)", c.EpochJitter, c.Epoch)
	}
	if c.Friends < 0 || c.Friends > sddr.MaxAdvertised {
		bad("friends %d outside 0..%d (the Bloom filter's advertised capacity)", c.Friends, sddr.MaxAdvertised)
	}
	if c.Shards < 1 || c.Shards > MaxShards || c.Shards > c.Devices {
		bad("shards %d outside 1..min(%d, devices)", c.Shards, MaxShards)
	}
	if c.Shard < 0 || c.Shard >= c.Shards {
		bad("shard index %d outside 0..%d", c.Shard, c.Shards-1)
	}
	if !(c.PDet > 0 && c.PDet <= 1) {
		bad("detection probability %v outside (0, 1]", c.PDet)
	}
	if c.RevokeFraction > 1 || !(c.RevokeAt > 0 && c.RevokeAt < 1) {
		bad("revoke fraction %v must be ≤ 1 and revoke-at %v inside (0, 1)", c.RevokeFraction, c.RevokeAt)
	}
	if c.GroupSize < 1 || c.GroupSize > 4096 {
		bad("group size %d outside 1..4096", c.GroupSize)
	}
	if err := c.Energy.Validate(); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// EnergyModel is Equation 1 with the coefficients e (zero ones the paper's), in joules.
func EnergyModel(e contract.Energy) sddr.EnergyModel {
	e = e.WithDefaults()
	return sddr.EnergyModel{
		IdleBTJoulesPerDay: e.IdleBluetoothJoulesPerDay,
		EpochChangeJoules:  e.EpochChangeMillijoules / 1000,
		Epoch:              sddr.DefaultEpoch, // a run charges its own epoch (Config.Epoch)
		DiscoveryJoules:    e.DiscoveryMillijoules / 1000,
		PerDeviceJoules:    e.RecognitionMillijoules / 1000,
		ResponderJoules:    e.AnswerMillijoules / 1000,
		BatteryJoules:      e.BatteryJoules,
	}
}

// ShardRange is the contiguous device range [lo, hi) of a shard.
func ShardRange(devices, shards, shard int) (lo, hi int) {
	return shard * devices / shards, (shard + 1) * devices / shards
}

func (c *Config) mobility() Mobility {
	if c.Mobility != nil {
		return c.Mobility
	}
	switch c.Scenario {
	case ScenarioCrowd:
		return &Crowd{Seed: c.Seed, Devices: c.Devices, Friends: c.Friends, Interval: c.Interval}
	case ScenarioGroups:
		return &Groups{Devices: c.Devices, Friends: c.Friends, Size: c.GroupSize}
	}
	return NewCity(c.Seed, c.Devices, c.Friends)
}

// t0 is virtual time zero (a midnight): engines get T0 + offset.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type tlEntry struct {
	t int64
	a *sddr.Advert
}

// timeline holds a device's recent adverts in time order.
type timeline struct{ e []tlEntry }

const timelineKeep = 8

func (tl *timeline) add(t int64, a *sddr.Advert) {
	if n := len(tl.e); n > 0 && tl.e[n-1].t >= t {
		if tl.e[n-1].t == t {
			tl.e[n-1].a = a
		}
		return
	}
	if len(tl.e) == timelineKeep {
		copy(tl.e, tl.e[1:])
		tl.e = tl.e[:timelineKeep-1]
	}
	tl.e = append(tl.e, tlEntry{t, a})
}

func (tl *timeline) at(t int64) *sddr.Advert {
	for i := len(tl.e) - 1; i >= 0; i-- {
		if tl.e[i].t <= t {
			return tl.e[i].a
		}
	}
	return nil
}

type heardRec struct {
	first, last int64
	rot         int
	n           int
}

type devState struct {
	d        *sddr.Device
	tl       timeline
	last     int64 // virtual time of the engine's last call
	heard    map[[sddr.PublicKeySize]byte]*heardRec
	lastSent []int64
	revoked  bool // its revocation is applied
	resp     int64
	ans      int64
}

type grouping struct {
	members []member // cells with ≥ 2 devices, sorted by (cell, dev)
	spans   []span
	of      []int32 // device → index in spans, −1 alone
}

type member struct {
	cell uint64
	dev  int32
}

type span struct{ lo, hi int32 }

type shard struct {
	cfg         Config
	mob         Mobility
	lo, hi      int
	ival, delta int64
	dur         int64
	steps       int64
	pdet        uint64
	devs        []*devState
	lastNeeded  []int64
	groups      [2]*grouping // [0]: step s−1, [1]: step s
	remote      map[int32]*timeline
	res         contract.Result
	hist        []int64
	tr          Transport
	scratchResp []resp
	scratchInq  []inquirer
	out         [][]byte
	classResp   []int64
	classAns    []int64
	classInq    []int64
	classDevs   []int64
}

type resp struct {
	t   int64
	dev int32
}

type inquirer struct {
	dev int32
	k   int64
	tau int64
}

// Run simulates one shard (cfg.Shard of cfg.Shards) and returns its result. tr carries the
// adverts between shards (nil only with one shard). CPUSeconds is the process's CPU time
// during the run, so run one shard per process to measure a shard.
func Run(ctx context.Context, cfg Config, tr Transport) (*contract.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tr == nil && cfg.Shards > 1 {
		return nil, errors.New("sim: a sharded run needs a transport")
	}
	start, cpu0 := time.Now(), cpuSeconds()
	s := newShard(cfg, tr)
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	r, err := s.result()
	if err != nil {
		return nil, err
	}
	r.CPUSeconds = cpuSeconds() - cpu0
	r.WallSeconds = time.Since(start).Seconds()
	return r, nil
}

// RunLocal runs every shard of cfg in this process (goroutines over an in-process Hub) and
// returns the merged result; CPUSeconds is the whole process's.
func RunLocal(ctx context.Context, cfg Config) (*contract.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start, cpu0 := time.Now(), cpuSeconds()
	hub := NewHub(cfg.Shards)
	parts := make([]*contract.Result, cfg.Shards)
	errs := make([]error, cfg.Shards)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, cfg.Shards)
	for i := range cfg.Shards {
		go func() {
			c := cfg
			c.Shard = i
			var tr Transport
			if cfg.Shards > 1 {
				tr = hub.Transport(i)
			}
			parts[i], errs[i] = Run(ctx, c, tr)
			if errs[i] != nil {
				cancel()
			}
			done <- i
		}()
	}
	for range cfg.Shards {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := contract.Merge(parts...)
	if err != nil {
		return nil, err
	}
	m.CPUSeconds = cpuSeconds() - cpu0
	m.WallSeconds = time.Since(start).Seconds()
	return m, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func newShard(cfg Config, tr Transport) *shard {
	s := &shard{cfg: cfg, mob: cfg.mobility(), tr: tr, remote: map[int32]*timeline{}}
	s.lo, s.hi = ShardRange(cfg.Devices, cfg.Shards, cfg.Shard)
	s.ival = int64(cfg.Interval)
	s.delta = (s.ival - int64(2*time.Second)) / 2
	s.dur = int64(cfg.Duration)
	s.steps = (s.dur + s.delta - 1) / s.delta
	s.pdet = uint64(cfg.PDet * (1 << 63))
	if cfg.PDet >= 1 {
		s.pdet = 1 << 63
	}
	s.devs = make([]*devState, s.hi-s.lo)
	s.lastNeeded = make([]int64, s.hi-s.lo)
	for i := range s.lastNeeded {
		s.lastNeeded[i] = -10
	}
	for i := range s.groups {
		s.groups[i] = &grouping{of: make([]int32, cfg.Devices)}
	}
	s.out = make([][]byte, cfg.Shards)
	n := len(s.mob.Classes())
	s.classResp, s.classAns, s.classInq, s.classDevs = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	return s
}

func (s *shard) owned(dev int32) bool  { return int(dev) >= s.lo && int(dev) < s.hi }
func (s *shard) shardOf(dev int32) int { return ownerOf(int(dev), s.cfg.Devices, s.cfg.Shards) }

func ownerOf(dev, devices, shards int) int {
	// The largest j with j·devices/shards ≤ dev.
	j := int((int64(dev)*int64(shards) + int64(shards) - 1) / int64(devices))
	for j > 0 && j*devices/shards > dev {
		j--
	}
	for j+1 < shards && (j+1)*devices/shards <= dev {
		j++
	}
	return j
}

// Schedules.

func (s *shard) phase(dev int32) int64 {
	return int64(time.Second) + int64(mix(s.cfg.Seed, saltPhase, uint64(dev), 0, 0)%uint64(s.ival))
}

func (s *shard) tau(dev int32, k int64) int64 {
	j := int64(mix(s.cfg.Seed, saltJitter, uint64(dev), uint64(k), 0)%uint64(2*time.Second)) - int64(time.Second)
	return s.phase(dev) + k*s.ival + j
}

// beaconIn returns dev's beacon in [lo, hi), if any (at most one: hi − lo ≤ (I − 2 s)/2).
func (s *shard) beaconIn(dev int32, lo, hi int64) (int64, int64, bool) {
	k0 := floorDiv(lo-s.phase(dev), s.ival)
	for k := k0 - 1; k <= k0+2; k++ {
		if k < 0 {
			continue
		}
		if t := s.tau(dev, k); t >= lo && t < hi && t < s.dur {
			return k, t, true
		}
	}
	return 0, 0, false
}

// lastBefore is dev's latest beacon time before t (−1 if none).
func (s *shard) lastBefore(dev int32, t int64) int64 {
	k0 := floorDiv(t-s.phase(dev), s.ival)
	for k := k0 + 2; k >= 0 && k >= k0-2; k-- {
		if tt := s.tau(dev, k); tt < t {
			return tt
		}
	}
	return -1
}

// inquiries counts dev's scheduled inquiries in [0, dur).
func (s *shard) inquiries(dev int32) int64 {
	k0 := floorDiv(s.dur-s.phase(dev), s.ival)
	for k := k0 + 2; k >= 0; k-- {
		if s.tau(dev, k) < s.dur {
			return k + 1
		}
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Revocation ground truth: a pure function, so every shard knows who revoked whom and when.
func (s *shard) revocation(dev int32) (target int32, at int64, ok bool) {
	if s.cfg.RevokeFraction <= 0 || float64(mix(s.cfg.Seed, saltRevoke, uint64(dev), 0, 0)>>11)/(1<<53) >= s.cfg.RevokeFraction {
		return 0, 0, false
	}
	first, size := s.mob.Clique(int(dev))
	if size < 2 {
		return 0, 0, false
	}
	i := first + int(mix(s.cfg.Seed, saltRevokeWho, uint64(dev), 0, 0)%uint64(size-1))
	if i >= int(dev) {
		i++
	}
	at = int64(s.cfg.RevokeAt*float64(s.dur)) + int64(mix(s.cfg.Seed, saltRevokeTime, uint64(dev), 0, 0)%uint64(s.ival))
	return int32(i), at, true
}

func (s *shard) friends(a, b int32) bool {
	if a == b {
		return false
	}
	fa, sa := s.mob.Clique(int(a))
	return int(b) >= fa && int(b) < fa+sa
}

func (s *shard) detects(x int32, k int64, b int32) bool {
	return mix(s.cfg.Seed, saltDetect, uint64(x), uint64(k), uint64(b))>>1 < s.pdet
}

func (s *shard) delay(x int32, k int64, b int32) int64 {
	return int64(mix(s.cfg.Seed, saltDelay, uint64(x), uint64(k), uint64(b)) % uint64(InquiryDuration))
}

// LinkValue is the link value of the pair (a, b), the same on both sides and in every shard.
func linkValue(seed uint64, a, b int32) sddr.LinkValue {
	a, b = min(a, b), max(a, b)
	var v sddr.LinkValue
	for i := range 4 {
		binary.LittleEndian.PutUint64(v[8*i:], mix(seed, saltLink, uint64(a), uint64(b), uint64(i)))
	}
	return v
}

func label(friend int32) string { return "f" + strconv.Itoa(int(friend)) }

// device returns dev's state, creating the engine (first epoch at t) on first use.
func (s *shard) device(dev int32, t int64) (*devState, error) {
	ds := s.devs[int(dev)-s.lo]
	if ds != nil {
		return ds, nil
	}
	var seed [32]byte
	for i := range 4 {
		binary.LittleEndian.PutUint64(seed[8*i:], mix(s.cfg.Seed, saltRand, uint64(dev), uint64(i), 0))
	}
	d, err := sddr.New(sddr.Config{Interval: s.cfg.Interval, Epoch: s.cfg.Epoch, EpochJitter: s.cfg.EpochJitter, Rand: rand.NewChaCha8(seed)})
	if err != nil {
		return nil, err
	}
	first, size := s.mob.Clique(int(dev))
	for f := first; f < first+size; f++ {
		if f == int(dev) {
			continue
		}
		err := d.AddLink(label(int32(f)), linkValue(s.cfg.Seed, dev, int32(f)), sddr.Advertise|sddr.Listen)
		if err != nil && !errors.Is(err, sddr.ErrWeakLinkValue) {
			return nil, err
		}
	}
	if err := d.StartEpoch(t0.Add(time.Duration(t))); err != nil {
		return nil, err
	}
	ds = &devState{d: d, last: t, heard: map[[sddr.PublicKeySize]byte]*heardRec{}, lastSent: make([]int64, s.cfg.Shards)}
	for i := range ds.lastSent {
		ds.lastSent[i] = -1 << 62
	}
	ds.tl.add(t, d.Advert())
	s.devs[int(dev)-s.lo] = ds
	return ds, nil
}

func (s *shard) place(g *grouping, t int64) {
	g.members = g.members[:0]
	g.spans = g.spans[:0]
	for i := range g.of {
		g.of[i] = -1
	}
	for dev := range s.cfg.Devices {
		if c := s.mob.Cell(dev, t); c != 0 {
			g.members = append(g.members, member{c, int32(dev)})
		}
	}
	slices.SortFunc(g.members, func(a, b member) int {
		if a.cell != b.cell {
			if a.cell < b.cell {
				return -1
			}
			return 1
		}
		return int(a.dev - b.dev)
	})
	kept := g.members[:0]
	for i := 0; i < len(g.members); {
		j := i + 1
		for j < len(g.members) && g.members[j].cell == g.members[i].cell {
			j++
		}
		if j-i >= 2 {
			sp := span{int32(len(kept)), int32(len(kept) + j - i)}
			for _, m := range g.members[i:j] {
				g.of[m.dev] = int32(len(g.spans))
			}
			kept = append(kept, g.members[i:j]...)
			g.spans = append(g.spans, sp)
		}
		i = j
	}
	g.members = kept
}

func (s *shard) run(ctx context.Context) error {
	s.place(s.groups[1], 0)
	for step := int64(0); step <= s.steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if step > 0 {
			s.groups[0], s.groups[1] = s.groups[1], s.groups[0]
			if step < s.steps {
				s.place(s.groups[1], step*s.delta)
			} else {
				g := s.groups[1]
				g.members, g.spans = g.members[:0], g.spans[:0]
				for i := range g.of {
					g.of[i] = -1
				}
			}
		} else {
			g := s.groups[0]
			for i := range g.of {
				g.of[i] = -1
			}
		}
		if step < s.steps {
			if err := s.phaseA(step); err != nil {
				return err
			}
		}
		if s.cfg.Shards > 1 {
			if err := s.exchange(ctx, step); err != nil {
				return err
			}
		}
		if step > 0 {
			if err := s.phaseB(step); err != nil {
				return err
			}
		}
		if s.cfg.Progress != nil {
			s.cfg.Progress(step, s.steps)
		}
	}
	s.res.Steps = s.steps
	return nil
}

// phaseA installs the beacons and revocations of step for every owned device within reach.
func (s *shard) phaseA(step int64) error {
	lo, hi := step*s.delta, (step+1)*s.delta
	for gi := range 2 {
		g := s.groups[gi]
		for _, m := range g.members {
			if !s.owned(m.dev) {
				continue
			}
			li := int(m.dev) - s.lo
			if s.lastNeeded[li] == step {
				continue
			}
			awake := s.lastNeeded[li] == step-1
			s.lastNeeded[li] = step
			s.res.AwakeDeviceSteps++
			if err := s.advance(m.dev, lo, hi, awake, step); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *shard) advance(dev int32, lo, hi int64, awake bool, step int64) error {
	ds := s.devs[int(dev)-s.lo]
	if !awake {
		wake := max(s.lastBefore(dev, lo), 0)
		if ds == nil {
			var err error
			if ds, err = s.device(dev, wake); err != nil {
				return err
			}
		} else if wake > ds.last {
			if err := ds.d.NextBeacon(t0.Add(time.Duration(wake))); err != nil {
				return err
			}
			ds.last = wake
			ds.tl.add(wake, ds.d.Advert())
		}
		s.prune(ds, lo)
	} else if (int64(dev)+step)%64 == 0 {
		s.prune(ds, lo)
	}
	target, at, revokes := s.revocation(dev)
	revokeDue := revokes && !ds.revoked && at < hi
	revokeNow := func() error {
		t := max(at, ds.last)
		if err := ds.d.RevokeNow(label(target), t0.Add(time.Duration(t))); err != nil && !errors.Is(err, sddr.ErrUnknownLink) {
			return err
		}
		ds.revoked = true
		ds.last = t
		ds.tl.add(t, ds.d.Advert())
		return nil
	}
	_, tau, ok := s.beaconIn(dev, lo, hi)
	if revokeDue && (!ok || at <= tau) {
		if err := revokeNow(); err != nil {
			return err
		}
		revokeDue = false
	}
	if ok && tau > ds.last {
		if err := ds.d.NextBeacon(t0.Add(time.Duration(tau))); err != nil {
			return err
		}
		ds.last = tau
		ds.tl.add(tau, ds.d.Advert())
	}
	if revokeDue {
		return revokeNow()
	}
	return nil
}

func (s *shard) prune(ds *devState, now int64) {
	horizon := now - 2*int64(s.cfg.Epoch+max(s.cfg.EpochJitter, 0))
	for k, h := range ds.heard {
		if h.last < horizon {
			delete(ds.heard, k)
		}
	}
}

// Wire format of one exchanged advert: device (4), time (8), address (6), frame (240).
const advertBytes = 4 + 8 + 6 + sddr.FrameSize

func (s *shard) exchange(ctx context.Context, step int64) error {
	for j := range s.out {
		s.out[j] = s.out[j][:0]
	}
	g := s.groups[0]
	if step > 0 {
		dest := make([]bool, s.cfg.Shards)
		for _, sp := range g.spans {
			ms := g.members[sp.lo:sp.hi]
			clear(dest)
			cross := false
			for _, m := range ms {
				if j := s.shardOf(m.dev); j != s.cfg.Shard {
					dest[j] = true
					cross = true
				}
			}
			if !cross {
				continue
			}
			for _, m := range ms {
				if !s.owned(m.dev) {
					continue
				}
				ds := s.devs[int(m.dev)-s.lo]
				for j, want := range dest {
					if !want {
						continue
					}
					for _, e := range ds.tl.e {
						if e.t <= ds.lastSent[j] {
							continue
						}
						var hdr [12]byte
						binary.BigEndian.PutUint32(hdr[:], uint32(m.dev))
						binary.BigEndian.PutUint64(hdr[4:], uint64(e.t))
						s.out[j] = append(append(append(s.out[j], hdr[:]...), e.a.Addr[:]...), e.a.Frame[:]...)
						ds.lastSent[j] = e.t
						s.res.CrossAdverts++
						s.res.CrossBytes += advertBytes
					}
				}
			}
		}
	}
	in, err := s.tr.Exchange(ctx, step, s.out)
	if err != nil {
		return err
	}
	for j, b := range in {
		if j == s.cfg.Shard {
			continue
		}
		if len(b)%advertBytes != 0 {
			return fmt.Errorf("sim: batch of %d bytes from shard %d", len(b), j)
		}
		for ; len(b) > 0; b = b[advertBytes:] {
			dev := int32(binary.BigEndian.Uint32(b))
			if s.shardOf(dev) != j {
				return fmt.Errorf("sim: shard %d sent an advert of device %d", j, dev)
			}
			a := &sddr.Advert{}
			copy(a.Addr[:], b[12:18])
			copy(a.Frame[:], b[18:advertBytes])
			tl := s.remote[dev]
			if tl == nil {
				tl = &timeline{}
				s.remote[dev] = tl
			}
			tl.add(int64(binary.BigEndian.Uint64(b[4:])), a)
		}
	}
	return nil
}

func (s *shard) advertOf(dev int32, t int64) *sddr.Advert {
	if s.owned(dev) {
		if ds := s.devs[int(dev)-s.lo]; ds != nil {
			return ds.tl.at(t)
		}
		return nil
	}
	if tl := s.remote[dev]; tl != nil {
		return tl.at(t)
	}
	return nil
}

// phaseB processes the inquiries of step−1.
func (s *shard) phaseB(step int64) error {
	lo, hi := (step-1)*s.delta, step*s.delta
	g := s.groups[0]
	for _, sp := range g.spans {
		ms := g.members[sp.lo:sp.hi]
		hasOwned := false
		for _, m := range ms {
			if s.owned(m.dev) {
				hasOwned = true
				break
			}
		}
		if !hasOwned {
			continue
		}
		inq := s.scratchInq[:0]
		for _, m := range ms {
			if k, tau, ok := s.beaconIn(m.dev, lo, hi); ok {
				inq = append(inq, inquirer{m.dev, k, tau})
			}
		}
		s.scratchInq = inq
		for _, m := range ms {
			if !s.owned(m.dev) {
				continue
			}
			ds := s.devs[int(m.dev)-s.lo]
			for _, x := range inq {
				if x.dev != m.dev && s.detects(x.dev, x.k, m.dev) {
					ds.ans++
				}
			}
		}
		for _, x := range inq {
			if !s.owned(x.dev) {
				continue
			}
			if err := s.inquire(x, ms); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *shard) inquire(x inquirer, ms []member) error {
	ds := s.devs[int(x.dev)-s.lo]
	rs := s.scratchResp[:0]
	for _, m := range ms {
		if m.dev != x.dev && s.detects(x.dev, x.k, m.dev) {
			rs = append(rs, resp{x.tau + s.delay(x.dev, x.k, m.dev), m.dev})
		}
	}
	s.scratchResp = rs
	slices.SortFunc(rs, func(a, b resp) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		return int(a.dev - b.dev)
	})
	s.res.Inquiries++
	d := ds.d
	for _, r := range rs {
		a := s.advertOf(r.dev, r.t)
		if a == nil {
			return fmt.Errorf("sim: no advert of device %d at %v (bug)", r.dev, time.Duration(r.t))
		}
		ds.resp++
		s.res.Responses++
		sg, err := d.OnBeacon(a.Frame[:], a.Addr, t0.Add(time.Duration(r.t)))
		switch {
		case err == nil:
		case errors.Is(err, sddr.ErrInquiryFull):
			s.res.Dropped++
			continue
		case errors.Is(err, sddr.ErrDuplicate):
			continue
		default:
			return fmt.Errorf("sim: device %d on a beacon of %d: %w", x.dev, r.dev, err)
		}
		if sg.NewEncounter {
			s.res.Encounters++
		}
		var pk [sddr.PublicKeySize]byte
		copy(pk[:], a.Frame[4:4+sddr.PublicKeySize])
		h := ds.heard[pk]
		if h == nil {
			h = &heardRec{first: r.t, rot: d.Rotations()}
			ds.heard[pk] = h
		}
		h.n++
		h.last = r.t
		need := d.RecognitionHits()
		recognised := false
		for _, mt := range sg.Matches {
			if !mt.Recognized || mt.Hits != need {
				continue
			}
			f, err := strconv.Atoi(mt.Label[1:])
			if err != nil {
				return fmt.Errorf("sim: label %q", mt.Label)
			}
			if int32(f) == r.dev {
				recognised = true
			} else {
				s.res.FalseRecognitions++
			}
		}
		if h.n != need {
			continue
		}
		if !s.friends(x.dev, r.dev) {
			s.res.StrangerKeys++
			continue
		}
		if target, at, ok := s.revocation(r.dev); ok && target == x.dev && r.t >= at {
			s.res.RevokedEncounters++
			if recognised {
				s.res.RevokedRecognitions++
			}
			continue
		}
		s.res.FriendEncounters++
		if !recognised {
			s.res.Missed++
			continue
		}
		s.res.Recognitions++
		n := min(h.n, 7)
		for len(s.hist) <= n {
			s.hist = append(s.hist, 0)
		}
		s.hist[n]++
		ms := (r.t - h.first) / int64(time.Millisecond)
		s.res.Latency.MillisSum += ms
		s.res.Latency.MillisMax = max(s.res.Latency.MillisMax, ms)
		s.res.Latency.EpochsSum += int64(d.Rotations() - h.rot + 1)
	}
	return nil
}

func (s *shard) result() (*contract.Result, error) {
	c := s.cfg
	r := &s.res
	r.Version = contract.Version
	r.RunID, r.Scenario, r.Seed = c.RunID, c.Scenario, c.Seed
	r.Shard, r.Shards, r.ShardsMerged = c.Shard, c.Shards, 1
	r.Devices, r.ShardDevices = int64(c.Devices), int64(s.hi-s.lo)
	r.Hours = c.Duration.Hours()
	r.IntervalSeconds = c.Interval.Seconds()
	r.Friends = c.Friends
	r.DeviceHours = float64(s.hi-s.lo) * r.Hours
	r.Energy, r.BatteryJoules = c.Energy, c.Energy.BatteryJoules
	r.EpochSeconds, r.EpochJitterSeconds = c.Epoch.Seconds(), max(c.EpochJitter, 0).Seconds()
	r.RevokeFraction, r.RevokeAt = max(c.RevokeFraction, 0), c.RevokeAt
	r.Latency.Beacons = s.hist
	if r.Latency.Beacons == nil {
		r.Latency.Beacons = []int64{}
	}
	for dev := s.lo; dev < s.hi; dev++ {
		cl := s.mob.Class(dev)
		s.classDevs[cl]++
		s.classInq[cl] += s.inquiries(int32(dev))
		if ds := s.devs[dev-s.lo]; ds != nil {
			s.classResp[cl] += ds.resp
			s.classAns[cl] += ds.ans
			r.EpochKeys += int64(ds.d.Rotations())
		}
	}
	secs := int64(c.Duration / time.Second)
	m := EnergyModel(c.Energy)
	m.Epoch = c.Epoch // epoch changes are charged at the run's nominal rate
	for i, name := range s.mob.Classes() {
		cl := contract.Class{
			Name: name, Devices: s.classDevs[i], DeviceSeconds: s.classDevs[i] * secs,
			Inquiries: s.classInq[i], Responses: s.classResp[i], Answers: s.classAns[i],
		}
		ds := float64(cl.DeviceSeconds)
		cl.Joules = ds/86400*m.IdleBTJoulesPerDay + ds/m.Epoch.Seconds()*m.EpochChangeJoules +
			float64(cl.Inquiries)*m.DiscoveryJoules + float64(cl.Responses)*m.PerDeviceJoules + float64(cl.Answers)*m.ResponderJoules
		cl.BatteryPercentPerDay = contract.BatteryPercentPerDay(cl.Joules, cl.DeviceSeconds, m.BatteryJoules)
		r.Classes = append(r.Classes, cl)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("sim: invalid result: %w", err)
	}
	return r, nil
}
