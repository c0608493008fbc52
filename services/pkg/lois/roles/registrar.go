package roles

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// EnsureSessionStream creates the session record stream (memory storage: see
// contract.StreamSessions).
func EnsureSessionStream(ctx context.Context, js jetstream.JetStream, replicas int, maxAge time.Duration) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: contract.StreamSessions,
		Subjects: []string{contract.SubjectSessions(), contract.SubjectEpochs()}, Storage: jetstream.MemoryStorage, Replicas: max(1, replicas),
		MaxAge: maxAge, Duplicates: 2 * time.Minute, MaxMsgSize: 8 << 20})
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", contract.StreamSessions, err)
	}
	return nil
}

// Registrar is the cloud's single writer (spec §10): it runs the registration step of a
// session on its deduplicating table, publishes the session record, and hands the device its
// keys only after every replica that must hold the session acknowledged installing it
// (install before use, §3.2).
type Registrar struct {
	JS    jetstream.JetStream
	Cloud string
	// Table is the deduplicating table (DVTConfig.Dedup) of every live session.
	Table *lois.DVT
	// Replicas names the CI replicas and SIs whose acks a session waits for.
	Replicas []string
	// Rekey bounds each session's seed (spec §3.12: 24 h or 2³² keystreams by default); a
	// grant that would pass them is refused with ErrRekeyDue.
	Rekey lois.RekeyLimits
	// Metrics, if set, counts grants and refusals (role "registrar").
	Metrics *Metrics
	// Records, if set, seals every session record it publishes (recordseal.go): the replicas
	// must hold the same record key. Nil publishes them in clear.
	Records *RecordSeal
	// Store, if set, keeps each open session (its wrapped seed, device fields, epoch counter
	// and live epochs) so that a restarted registrar carries on (Restore); Wrapper wraps the
	// seeds first — the store never holds a seed in clear, and without a Wrapper Open refuses
	// to store one.
	Store   jetstream.KeyValue
	Wrapper SeedWrapper
	// DeviceLinksOverNATS gives every session opened here a link to its DI over NATS
	// (SubjectDeviceGrant) for download grants.
	DeviceLinksOverNATS bool
	// Policy is what a HELLO may ask for (ServeControl).
	Policy HelloPolicy
	// AwaitReady marks the session records: SIs send downloads with a session only after its
	// DI's READY (Ready), not as soon as they installed it (spec §3.2).
	AwaitReady bool
	// Served, if set, counts the control requests ServeControl answers.
	Served   *RegistrarMetrics
	mu       sync.Mutex
	sessions map[string]*regSession
}

// regSession is what the registrar keeps of an open session to derive its later epochs: the
// seed (in memory only, never in a record), the record's device fields, the epoch counter
// and the seed's use (spec §3.12).
type regSession struct {
	seed     [lois.SeedSize]byte
	base     contract.Keys // no streams
	services map[uint16]bool
	n        uint32
	lifetime time.Duration
	epoch    uint32 // the newest epoch derived; each grant takes the next
	rekey    lois.Rekey
	device   DeviceLink
	ctl      [contract.ControlKeySize]byte // the session's control key (ControlKey)
	live     []storedStream                // the epochs registered and not expired (Restore re-registers them)
	wrapped  string                        // the seed wrapped by Wrapper, once stored
}

// DeviceLink carries a download EPOCH_GRANT to the session's DI and returns once the DI has
// installed it (its ack, spec §3.12). The HELLO/EPOCH API over mutual TLS (§10) is not built:
// in process a *Device is the link.
type DeviceLink interface {
	InstallGrant(k *contract.Keys) error
}

// EpochClient is the DI's side of EPOCH_REQ: it returns the device's copy of a new upload
// epoch of (session, sid) once every replica installed it. *Registrar implements it.
type EpochClient interface {
	RequestEpoch(ctx context.Context, session string, sid uint16) (*contract.Keys, error)
	// Rehello replaces a session whose seed is due (ErrRekeyDue) by a new one.
	Rehello(ctx context.Context, session string) (*contract.Keys, error)
}

// Replenishment errors.
var (
	ErrRekeyDue       = errors.New("lois registrar: the session's seed is due for a new HELLO (24 h or its keystream limit)")
	ErrUnknownSession = errors.New("lois registrar: unknown session or service")
)

// ErrNotInstalled: a replica did not acknowledge in time; the device must not use the
// session.
var ErrNotInstalled = errors.New("lois registrar: session not installed by every replica")

// Open registers a session and returns the device's keys once it is installed everywhere.
func (r *Registrar) Open(ctx context.Context, p Provision) (*contract.Keys, error) {
	r.mu.Lock()
	p.Registrar = r.Table
	p.KeepSeed = true
	now := time.Now()
	prov, err := p.Run(now)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	rec := *prov.Server[0]
	rec.Replica = 0
	rec.AwaitReady = r.AwaitReady
	ss := &regSession{seed: *prov.Seed, base: rec, services: map[uint16]bool{}, n: p.N, lifetime: p.Lifetime, epoch: p.Epoch,
		rekey: lois.Rekey{Start: now.Unix(), Used: 2 * uint64(p.N) * uint64(len(p.Services))}}
	clear(prov.Seed[:])
	ss.base.Streams = nil
	ss.ctl = ControlKey(&ss.seed)
	for _, sid := range p.Services {
		ss.services[sid] = true
		for _, d := range []lois.Dir{lois.Up, lois.Down} {
			ss.live = append(ss.live, storedStream{Dir: d.String(), SID: sid, Epoch: p.Epoch, Expiry: now.Add(p.Lifetime).Unix()})
		}
	}
	if r.DeviceLinksOverNATS {
		ss.device = &natsLink{nc: r.JS.Conn(), cloud: r.Cloud, session: rec.Session, ctl: ss.ctl}
	}
	if r.sessions == nil {
		r.sessions = map[string]*regSession{}
	}
	r.sessions[rec.Session] = ss
	r.mu.Unlock()
	if err := r.storeNew(ctx, rec.Session, ss); err != nil {
		r.Close(rec.Session)
		return nil, err
	}
	if err := r.publishAndWait(ctx, contract.SubjectSessionOpen(r.Cloud), &rec, p.Epoch); err != nil {
		r.Close(rec.Session)
		return nil, err
	}
	prov.Device.Control = hex.EncodeToString(ss.ctl[:])
	return prov.Device, nil
}

// Rehello is the full rekey (spec §3.12): a new session with fresh r_d, r_c and k_c — a new
// seed — for the device and services of session old, installed at every replica before the
// DI gets its keys (as Open); the old session is forgotten (its seed wiped) and its epochs
// expire at the replicas. The DI link carries over.
func (r *Registrar) Rehello(ctx context.Context, old string) (*contract.Keys, error) {
	r.mu.Lock()
	ss := r.sessions[old]
	if ss == nil {
		r.mu.Unlock()
		return nil, ErrUnknownSession
	}
	p := Provision{N: ss.n, Lifetime: ss.lifetime, Epoch: 1, Replicas: ss.base.Replicas}
	for sid := range ss.services {
		p.Services = append(p.Services, sid)
	}
	slices.Sort(p.Services)
	p.DeviceIP, _ = netip.ParseAddr(ss.base.DeviceIP)
	p.DeviceWire, _ = netip.ParseAddrPort(ss.base.DeviceWire)
	link := ss.device
	r.mu.Unlock()
	k, err := r.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	if !r.DeviceLinksOverNATS { // a NATS link names its session: Open made the new one
		r.Attach(k.Session, link)
	}
	r.Close(old)
	return k, nil
}

// Attach names the DI link of a session for its download grants.
func (r *Registrar) Attach(session string, link DeviceLink) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ss := r.sessions[session]; ss != nil {
		ss.device = link
	}
}

// RequestEpoch is EPOCH_REQ for an upload pool (spec §3.12): the next epoch of the session's
// seed for (sid, up) — a new stream key, so fresh indices; a pool is never refilled by
// reusing any — is deduplicated, published and installed at every replica before the DI gets
// it (install before use, §3.2).
func (r *Registrar) RequestEpoch(ctx context.Context, session string, sid uint16) (*contract.Keys, error) {
	rec, epoch, _, err := r.derive(ctx, session, sid, lois.Up)
	if err != nil {
		return nil, err
	}
	if err := r.publishAndWait(ctx, contract.SubjectEpochGrant(r.Cloud), rec, epoch); err != nil {
		return nil, err
	}
	r.granted(lois.Up)
	dev := *rec
	dev.Replicas, dev.Replica = 0, 0
	return &dev, nil
}

// GrantDownload answers an SI's low-water event (spec §3.12): the next download epoch of
// (session, sid) goes to the DI first (EPOCH_GRANT; the link returns on the DI's ack), and
// only then to the SIs, which activate it when they install it: no SI sends with an epoch
// the DI has not installed.
func (r *Registrar) GrantDownload(ctx context.Context, session string, sid uint16) error {
	rec, epoch, link, err := r.derive(ctx, session, sid, lois.Down)
	if err != nil {
		return err
	}
	if link == nil {
		return fmt.Errorf("%w: no device link for session", ErrUnknownSession)
	}
	dev := *rec
	dev.Replicas, dev.Replica = 0, 0
	if err := link.InstallGrant(&dev); err != nil {
		return fmt.Errorf("device did not install the grant: %w", err)
	}
	if err := r.publishAndWait(ctx, contract.SubjectEpochGrant(r.Cloud), rec, epoch); err != nil {
		return err
	}
	r.granted(lois.Down)
	return nil
}

// ServeLowWater answers the SIs' low-water events of the cloud until ctx ends.
func (r *Registrar) ServeLowWater(ctx context.Context, log *slog.Logger) error {
	sub, err := r.JS.Conn().SubscribeSync(contract.SubjectLowWaters(r.Cloud))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		session, sid, err := contract.ParseLowWater(r.Cloud, m.Subject)
		if err != nil {
			log.Warn("low-water event dropped", "err", err)
			continue
		}
		if err := r.GrantDownload(ctx, session, sid); err != nil && ctx.Err() == nil {
			log.Warn("download epoch not granted", "err", err)
		}
	}
}

func (r *Registrar) granted(d lois.Dir) {
	if r.Metrics != nil {
		r.Metrics.EpochsGranted.WithLabelValues("registrar", d.String()).Inc()
	}
}

// derive registers the next epoch of (session, sid, dir) on the deduplicating table and
// returns its record (the session's fields, Grant set, the one stream).
func (r *Registrar) derive(ctx context.Context, session string, sid uint16, d lois.Dir) (*contract.Keys, uint32, DeviceLink, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.sessions[session]
	if ss == nil || !ss.services[sid] {
		return nil, 0, nil, ErrUnknownSession
	}
	now := time.Now()
	if !ss.rekey.Allows(now.Unix(), uint64(ss.n), r.Rekey) {
		if r.Metrics != nil {
			r.Metrics.RekeysDue.WithLabelValues("registrar").Inc()
		}
		return nil, 0, nil, ErrRekeyDue
	}
	ss.epoch++
	st := lois.Stream{Key: lois.StreamKey(ss.seed, d, sid, ss.epoch), Dir: d, SID: sid, Epoch: ss.epoch, N: ss.n,
		Expiry: now.Add(ss.lifetime).Unix()}
	defer clear(st.Key[:])
	r.Table.GC(now.Unix()) // expired sessions' entries leave the dedup set
	if _, err := r.Table.Register(&st); err != nil {
		return nil, 0, nil, fmt.Errorf("register %v epoch %d of sid %d: %w", d, st.Epoch, sid, err)
	}
	ss.rekey.Used += uint64(ss.n)
	ss.live = append(slices.DeleteFunc(ss.live, func(s storedStream) bool { return s.Expiry < now.Unix() }),
		storedStream{Dir: d.String(), SID: sid, Epoch: st.Epoch, Expiry: st.Expiry})
	// The epoch counter is stored before the epoch leaves: a restarted registrar never derives
	// the same epoch (the same keystreams) twice.
	if err := r.put(ctx, session, ss); err != nil {
		return nil, 0, nil, err
	}
	rec := ss.base
	if r.Policy.Partitions > 0 && d == lois.Down {
		// The SI replica count of now (the policy's): a change of R — the registrar
		// restarted with another --partitions, its sessions restored — takes effect at this
		// epoch, never inside one (§3.11).
		rec.Replicas = r.Policy.Partitions
	}
	rec.Grant = true
	rec.Created = now.Unix()
	rec.Streams = []contract.Stream{contract.FromCore(&st)}
	return &rec, st.Epoch, ss.device, nil
}

// Ready publishes a session's READY record: its DI installed the session, so SIs may send
// downloads with it (the SIs act on it as it comes; the DI need not wait for them).
func (r *Registrar) Ready(ctx context.Context, session string) error {
	r.mu.Lock()
	ss := r.sessions[session]
	var rec contract.Keys
	if ss != nil {
		rec = contract.Keys{Version: contract.KeysVersion, Session: session, DeviceIP: ss.base.DeviceIP, Ready: true,
			Created: time.Now().Unix()}
	}
	r.mu.Unlock()
	if ss == nil {
		return ErrUnknownSession
	}
	data, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	subject := contract.SubjectSessionReady(r.Cloud)
	return natsx.Publish(ctx, r.JS, subject, session+".ready", r.Records.Seal(subject, data), nil)
}

// Close forgets a session (its seed is wiped); its entries expire at the replicas.
func (r *Registrar) Close(session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ss := r.sessions[session]; ss != nil {
		clear(ss.seed[:])
		clear(ss.ctl[:])
		delete(r.sessions, session)
		if r.Store != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.Store.Delete(ctx, r.storeKey(session))
		}
	}
}

// publishAndWait publishes a record (Nats-Msg-Id session.epoch) and returns once every
// replica acknowledged installing it.
func (r *Registrar) publishAndWait(ctx context.Context, subject string, rec *contract.Keys, epoch uint32) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	defer clear(data)
	sub, err := r.JS.Conn().SubscribeSync(contract.SubjectAcks(r.Cloud, rec.Session, epoch))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	sealed := r.Records.Seal(subject, data)
	if r.Records != nil {
		defer clear(sealed)
	}
	if err := natsx.Publish(ctx, r.JS, subject, fmt.Sprintf("%s.%d", rec.Session, epoch), sealed, nil); err != nil {
		return err
	}
	pending := map[string]bool{}
	for _, n := range r.Replicas {
		pending[n] = true
	}
	for len(pending) > 0 {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("%w: %d waiting (%v)", ErrNotInstalled, len(pending), err)
		}
		delete(pending, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	}
	return nil
}

// Installer is a replica's side of a session record.
type Installer interface {
	// InstallSession installs the record's streams this replica holds; a session installed
	// before (a redelivery, a replay at start) is a no-op.
	InstallSession(k *contract.Keys) error
}

// Follow replays and follows the session records of cloud for replica name (index replica
// of its service's SIs; 0 for CI replicas), installs each and acknowledges it, until ctx
// ends. Each start replays the whole stream (a fresh consumer): a restarted replica rebuilds
// its table (§3.10 session loss).
func Follow(ctx context.Context, js jetstream.JetStream, cloud, name string, replica int, inst Installer, log *slog.Logger) error {
	return FollowSealed(ctx, js, cloud, name, replica, nil, inst, log)
}

// unknownKeyRetries bounds the deliveries of a record whose record key id this replica
// lacks (natsx retries 200 ms apart: ≈ 2 minutes, a Secret's update time in a pod).
const unknownKeyRetries = 600

// FollowSealed is Follow for records sealed under seal's record key (nil: records in clear);
// a record that does not open is dropped and logged, never installed.
func FollowSealed(ctx context.Context, js jetstream.JetStream, cloud, name string, replica int, seal *RecordSeal, inst Installer, log *slog.Logger) error {
	durable := fmt.Sprintf("lois-%s-%d", name, time.Now().UnixNano())
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, contract.StreamSessions, durable)
	}()
	return natsx.Consume(ctx, js, natsx.ConsumerSpec{Stream: contract.StreamSessions, Durable: durable,
		Filters: []string{contract.SubjectSessionOpen(cloud), contract.SubjectEpochGrant(cloud), contract.SubjectSessionReady(cloud)}}, log, func(ctx context.Context, m jetstream.Msg) natsx.Outcome {
		data, err := seal.Open(m.Subject(), m.Data())
		if errors.Is(err, ErrUnknownRecordKey) {
			// A record under a key rotated in at the registrar before this replica's key
			// file has it (a Secret reaches running pods late): wait for the file, a while.
			if md, merr := m.Metadata(); merr == nil && md.NumDelivered < unknownKeyRetries {
				log.Warn("session record waits for its record key", "err", err)
				return natsx.Retry
			}
		}
		if err != nil {
			log.Warn("session record dropped", "err", err)
			return natsx.Drop
		}
		rec, err := contract.ParseKeys(data)
		if seal != nil {
			clear(data)
		}
		if err != nil {
			log.Warn("session record dropped", "err", err)
			return natsx.Drop
		}
		k := *rec
		k.Replica = replica
		if k.Replicas > 0 && replica >= k.Replicas {
			k.Replica = -1 // outside the record's partition: upload only
		}
		if err := inst.InstallSession(&k); err != nil {
			log.Warn("session not installed", "err", err)
			return natsx.Drop
		}
		epoch := uint32(0)
		if len(k.Streams) > 0 {
			epoch = k.Streams[0].Epoch
		}
		if err := js.Conn().Publish(contract.SubjectAck(cloud, k.Session, epoch, name), nil); err != nil {
			return natsx.Retry
		}
		return natsx.Ack
	})
}
