package roles

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
)

// HelloPolicy is what a device's HELLO may ask for (spec §3.2): the cloud's services, up to
// MaxN keystreams per service and direction (N when it names none), the epoch lifetime and
// the SI partition count.
type HelloPolicy struct {
	Services   []uint16
	N, MaxN    uint32
	Lifetime   time.Duration
	Partitions int
}

// RegistrarMetrics count the registrar daemon's control requests and open sessions.
type RegistrarMetrics struct {
	Requests *prometheus.CounterVec // kind (hello, epoch, rehello, lowwater), result
	Sessions prometheus.Gauge
}

// Metric names of the registrar daemon.
const (
	MetricRegistrarRequests = "lois_registrar_requests_total"
	MetricRegistrarSessions = "lois_registrar_sessions"
)

// NewRegistrarMetrics registers the registrar's metrics with reg (nil: unregistered).
func NewRegistrarMetrics(reg prometheus.Registerer) *RegistrarMetrics {
	m := &RegistrarMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRegistrarRequests,
			Help: "Control requests the LOIS registrar answered, by kind (hello, epoch, rehello, ready, lowwater) and result (ok, rekey_due, unknown_session, refused, error)."},
			[]string{"kind", "result"}),
		Sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricRegistrarSessions,
			Help: "Device sessions the LOIS registrar holds open (their seeds wrapped in its store)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Sessions)
	}
	return m
}

func (r *Registrar) count(kind, result string) {
	if r.Served == nil {
		return
	}
	r.Served.Requests.WithLabelValues(kind, result).Inc()
	r.mu.Lock()
	r.Served.Sessions.Set(float64(len(r.sessions)))
	r.mu.Unlock()
}

// Sessions is the number of open sessions.
func (r *Registrar) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// controlKey returns a copy of session's control key, nil if the session is unknown.
func (r *Registrar) controlKey(session string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.sessions[session]
	if ss == nil {
		return nil
	}
	return slices.Clone(ss.ctl[:])
}

// errorCode maps a registrar error to its wire form.
func errorCode(err error) string {
	switch {
	case errors.Is(err, ErrRekeyDue):
		return contract.ErrorRekeyDue
	case errors.Is(err, ErrUnknownSession):
		return contract.ErrorUnknownSession
	default:
		return err.Error()
	}
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrRekeyDue):
		return contract.ErrorRekeyDue
	case errors.Is(err, ErrUnknownSession):
		return contract.ErrorUnknownSession
	case errors.Is(err, errRefused):
		return "refused"
	default:
		return "error"
	}
}

var errRefused = errors.New("lois registrar: HELLO refused")

// ServeControl answers the devices' HELLO, EPOCH_REQ and full-rekey requests and the SIs'
// low-water events of the cloud until ctx ends (each request in its own goroutine, at most
// 64 at once: a request waits for every replica's install ack). Sessions it opens get a link
// to their DI over NATS for download grants. ready, if set, is called once every subscription
// is in place. When ctx ends it unsubscribes, then lets the requests it took finish.
func (r *Registrar) ServeControl(ctx context.Context, timeout time.Duration, log *slog.Logger, ready func()) error {
	nc := r.JS.Conn()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	handle := func(kind string, f func(context.Context, []byte) (any, error)) nats.MsgHandler {
		return func(m *nats.Msg) {
			select {
			case sem <- struct{}{}:
			default:
				r.count(kind, "error")
				_ = m.Respond(mustJSON(contract.ControlReply{Error: "registrar busy"}))
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				// Not cancelled by shutdown: a request taken finishes (bounded by timeout).
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
				reply, err := f(rctx, m.Data)
				cancel()
				r.count(kind, resultOf(err))
				if err != nil && !errors.Is(err, ErrRekeyDue) {
					log.Warn("control request refused", "kind", kind, "err", err)
				}
				_ = m.Respond(mustJSON(reply))
			}()
		}
	}
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for subject, h := range map[string]nats.MsgHandler{
		contract.SubjectHello(r.Cloud):        handle("hello", r.serveHello),
		contract.SubjectEpochRequest(r.Cloud): handle("epoch", r.serveEpoch),
		contract.SubjectRehello(r.Cloud):      handle("rehello", r.serveRehello),
		contract.SubjectReady(r.Cloud):        handle("ready", r.serveReady),
	} {
		s, err := nc.QueueSubscribe(subject, contract.RegistrarQueue, h)
		if err != nil {
			return err
		}
		subs = append(subs, s)
	}
	low, err := nc.QueueSubscribe(contract.SubjectLowWaters(r.Cloud), contract.RegistrarQueue, func(m *nats.Msg) {
		session, sid, err := contract.ParseLowWater(r.Cloud, m.Subject)
		if err != nil {
			r.count("lowwater", "refused")
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			r.count("lowwater", "error")
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			err := r.GrantDownload(rctx, session, sid)
			cancel()
			r.count("lowwater", resultOf(err))
			if err != nil && ctx.Err() == nil {
				log.Warn("download epoch not granted", "err", err)
			}
		}()
	})
	if err != nil {
		return err
	}
	subs = append(subs, low)
	if err := nc.Flush(); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: never
	}
	return b
}

// sealKeys seals a device's Keys for the wire.
func sealKeys(key []byte, kind, session string, k *contract.Keys) ([]byte, error) {
	b, err := json.Marshal(k)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return contract.Seal(key, kind, session, b)
}

// serveHello opens a session for a HELLO within the policy and seals the device's keys
// under an X25519 exchange with the device's ephemeral key.
func (r *Registrar) serveHello(ctx context.Context, data []byte) (any, error) {
	var req contract.HelloRequest
	fail := func(err error) (any, error) { return contract.HelloReply{Error: err.Error()}, err }
	if err := json.Unmarshal(data, &req); err != nil {
		return fail(fmt.Errorf("%w: %v", errRefused, err))
	}
	p, err := r.Policy.provision(&req)
	if err != nil {
		return fail(err)
	}
	peer, err := ecdh.X25519().NewPublicKey(req.Pub)
	if err != nil {
		return fail(fmt.Errorf("%w: device key: %v", errRefused, err))
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return fail(err)
	}
	shared, err := priv.ECDH(peer)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", errRefused, err))
	}
	key, err := contract.HelloKey(shared, req.Pub, priv.PublicKey().Bytes())
	clear(shared)
	if err != nil {
		return fail(err)
	}
	defer clear(key)
	k, err := r.Open(ctx, p)
	if err != nil {
		return fail(err)
	}
	sealed, err := sealKeys(key, contract.SealHello, "", k)
	if err != nil {
		r.Close(k.Session)
		return fail(err)
	}
	return contract.HelloReply{Pub: priv.PublicKey().Bytes(), Sealed: sealed}, nil
}

// provision checks a HELLO against the policy.
func (pol HelloPolicy) provision(req *contract.HelloRequest) (Provision, error) {
	var p Provision
	if req.Version != contract.KeysVersion {
		return p, fmt.Errorf("%w: version %d", errRefused, req.Version)
	}
	ip, err := netip.ParseAddr(req.DeviceIP)
	if err != nil || !ip.Is4() {
		return p, fmt.Errorf("%w: device_ip %q", errRefused, req.DeviceIP)
	}
	wire, err := netip.ParseAddrPort(req.DeviceWire)
	if err != nil {
		return p, fmt.Errorf("%w: device_wire %q", errRefused, req.DeviceWire)
	}
	if len(req.Services) == 0 {
		return p, fmt.Errorf("%w: no services", errRefused)
	}
	seen := map[uint16]bool{}
	for _, s := range req.Services {
		if !slices.Contains(pol.Services, s) || seen[s] {
			return p, fmt.Errorf("%w: service %d is not offered (or named twice)", errRefused, s)
		}
		seen[s] = true
	}
	n := req.N
	if n == 0 {
		n = pol.N
	}
	if n == 0 || n > max(pol.MaxN, pol.N) {
		return p, fmt.Errorf("%w: %d keystreams per epoch (at most %d)", errRefused, n, max(pol.MaxN, pol.N))
	}
	return Provision{Services: slices.Sorted(slices.Values(req.Services)), N: n, Lifetime: pol.Lifetime, Epoch: 1,
		DeviceIP: ip, DeviceWire: wire, Replicas: max(1, pol.Partitions)}, nil
}

// openControl opens a ControlRequest of kind: the session's key and the sealed body.
func (r *Registrar) openControl(data []byte, kind string) (contract.ControlRequest, []byte, []byte, error) {
	var req contract.ControlRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return req, nil, nil, fmt.Errorf("%w: %v", ErrUnknownSession, err)
	}
	key := r.controlKey(req.Session)
	if key == nil || !sessionHex(req.Session) {
		return req, nil, nil, ErrUnknownSession
	}
	body, err := contract.Open(key, kind, req.Session, req.Sealed)
	if err != nil { // answered as an unknown session: the asker learns nothing of the session
		clear(key)
		return req, nil, nil, fmt.Errorf("%w: %v", ErrUnknownSession, err)
	}
	return req, key, body, nil
}

// serveEpoch answers an EPOCH_REQ: the device's copy of a new upload epoch, installed at
// every replica first (RequestEpoch), sealed under the session's control key.
func (r *Registrar) serveEpoch(ctx context.Context, data []byte) (any, error) {
	req, key, body, err := r.openControl(data, contract.SealEpoch)
	if err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	defer clear(key)
	var ask contract.EpochAsk
	if err := json.Unmarshal(body, &ask); err != nil || ask.Dir != lois.Up.String() {
		err = fmt.Errorf("%w: an EPOCH_REQ names an upload pool", errRefused)
		return contract.ControlReply{Error: err.Error()}, err
	}
	k, err := r.RequestEpoch(ctx, req.Session, ask.SID)
	if err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	sealed, err := sealKeys(key, contract.SealGrant, req.Session, k)
	if err != nil {
		return contract.ControlReply{Error: err.Error()}, err
	}
	return contract.ControlReply{Sealed: sealed}, nil
}

// serveRehello answers a full rekey: the new session's keys, sealed under the old session's
// control key.
func (r *Registrar) serveRehello(ctx context.Context, data []byte) (any, error) {
	req, key, _, err := r.openControl(data, contract.SealRehello)
	if err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	defer clear(key)
	k, err := r.Rehello(ctx, req.Session)
	if err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	sealed, err := sealKeys(key, contract.SealRehello, req.Session, k)
	if err != nil {
		return contract.ControlReply{Error: err.Error()}, err
	}
	return contract.ControlReply{Sealed: sealed}, nil
}

// serveReady records a DI's READY (sealed under its session's control key).
func (r *Registrar) serveReady(ctx context.Context, data []byte) (any, error) {
	req, key, _, err := r.openControl(data, contract.SealReady)
	if err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	clear(key)
	if err := r.Ready(ctx, req.Session); err != nil {
		return contract.ControlReply{Error: errorCode(err)}, err
	}
	return contract.ControlReply{}, nil
}

// natsLink is the registrar's link to a DI over NATS: a download grant sealed under the
// session's control key; the DI's empty answer is its ack.
type natsLink struct {
	nc      *nats.Conn
	cloud   string
	session string
	ctl     [contract.ControlKeySize]byte
}

// deviceGrantTimeout bounds the wait for a DI's ack of a download grant.
const deviceGrantTimeout = 5 * time.Second

func (l *natsLink) InstallGrant(k *contract.Keys) error {
	sealed, err := sealKeys(l.ctl[:], contract.SealGrant, l.session, k)
	if err != nil {
		return err
	}
	m, err := l.nc.Request(contract.SubjectDeviceGrant(l.cloud, l.session),
		mustJSON(contract.ControlRequest{Session: l.session, Sealed: sealed}), deviceGrantTimeout)
	if err != nil {
		return err
	}
	if len(m.Data) > 0 {
		return fmt.Errorf("device refused the grant: %s", m.Data)
	}
	return nil
}

// Hello is a device's HELLO to the registrar daemon over NATS: it returns the device's keys
// (with the session's control key) once the session is installed at every replica.
func Hello(ctx context.Context, nc *nats.Conn, cloud string, req contract.HelloRequest) (*contract.Keys, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	req.Version = contract.KeysVersion
	req.Pub = priv.PublicKey().Bytes()
	m, err := nc.RequestWithContext(ctx, contract.SubjectHello(cloud), mustJSON(req))
	if err != nil {
		return nil, fmt.Errorf("lois HELLO: %w", err)
	}
	var rep contract.HelloReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("lois HELLO: answer: %w", err)
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("lois HELLO refused: %s", rep.Error)
	}
	peer, err := ecdh.X25519().NewPublicKey(rep.Pub)
	if err != nil {
		return nil, fmt.Errorf("lois HELLO: registrar key: %w", err)
	}
	shared, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	key, err := contract.HelloKey(shared, req.Pub, rep.Pub)
	clear(shared)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	return openKeys(key, contract.SealHello, "", rep.Sealed)
}

func openKeys(key []byte, kind, session string, sealed []byte) (*contract.Keys, error) {
	b, err := contract.Open(key, kind, session, sealed)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return contract.ParseKeys(b)
}

// NATSControl is a DI's side of the registrar daemon over NATS (EpochClient): sealed
// EPOCH_REQs and full rekeys, and the download grants the registrar sends it (ServeGrants).
type NATSControl struct {
	nc    *nats.Conn
	cloud string
	mu    sync.Mutex
	ctl   map[string][]byte // session → control key
	subs  map[string]*nats.Subscription
	dev   DeviceLink
}

// NewNATSControl is the control channel of the session in k (its keys from Hello).
func NewNATSControl(nc *nats.Conn, cloud string, k *contract.Keys) (*NATSControl, error) {
	key := k.ControlKey()
	if key == nil {
		return nil, errors.New("lois device: the keys carry no control key (they come from the registrar's HELLO)")
	}
	return &NATSControl{nc: nc, cloud: cloud, ctl: map[string][]byte{k.Session: key}, subs: map[string]*nats.Subscription{}}, nil
}

func (c *NATSControl) key(session string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ctl[session])
}

func (c *NATSControl) request(ctx context.Context, subject, kind, session string, body []byte) (*contract.Keys, error) {
	key := c.key(session)
	if key == nil {
		return nil, ErrUnknownSession
	}
	sealed, err := contract.Seal(key, kind, session, body)
	if err != nil {
		return nil, err
	}
	m, err := c.nc.RequestWithContext(ctx, subject, mustJSON(contract.ControlRequest{Session: session, Sealed: sealed}))
	if err != nil {
		return nil, err
	}
	var rep contract.ControlReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, err
	}
	switch rep.Error {
	case "":
	case contract.ErrorRekeyDue:
		return nil, ErrRekeyDue
	case contract.ErrorUnknownSession:
		return nil, ErrUnknownSession
	default:
		return nil, fmt.Errorf("lois registrar: %s", rep.Error)
	}
	ansKind := contract.SealGrant
	if kind == contract.SealRehello {
		ansKind = contract.SealRehello
	}
	return openKeys(key, ansKind, session, rep.Sealed)
}

// Ready sends the DI's READY for session once it installed the session's keys: from then on
// the SIs send downloads with it.
func (c *NATSControl) Ready(ctx context.Context, session string) error {
	key := c.key(session)
	if key == nil {
		return ErrUnknownSession
	}
	defer clear(key)
	sealed, err := contract.Seal(key, contract.SealReady, session, []byte("{}"))
	if err != nil {
		return err
	}
	m, err := c.nc.RequestWithContext(ctx, contract.SubjectReady(c.cloud), mustJSON(contract.ControlRequest{Session: session, Sealed: sealed}))
	if err != nil {
		return fmt.Errorf("lois READY: %w", err)
	}
	var rep contract.ControlReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		return fmt.Errorf("lois READY refused: %s", rep.Error)
	}
	return nil
}

// RequestEpoch implements EpochClient.
func (c *NATSControl) RequestEpoch(ctx context.Context, session string, sid uint16) (*contract.Keys, error) {
	return c.request(ctx, contract.SubjectEpochRequest(c.cloud), contract.SealEpoch, session,
		mustJSON(contract.EpochAsk{SID: sid, Dir: lois.Up.String()}))
}

// Rehello implements EpochClient: the new session's control key replaces the old one, and
// its download grants are served from then on.
func (c *NATSControl) Rehello(ctx context.Context, session string) (*contract.Keys, error) {
	k, err := c.request(ctx, contract.SubjectRehello(c.cloud), contract.SealRehello, session, []byte("{}"))
	if err != nil {
		return nil, err
	}
	key := k.ControlKey()
	if key == nil {
		return nil, errors.New("lois registrar: rekey answer without a control key")
	}
	c.mu.Lock()
	c.ctl[k.Session] = key
	dev := c.dev
	c.mu.Unlock()
	if dev != nil {
		if err := c.subscribe(k.Session); err != nil {
			return nil, err
		}
	}
	c.forget(session)
	return k, nil
}

// ServeGrants installs the download grants the registrar sends for the sessions into dev
// (the *Device).
func (c *NATSControl) ServeGrants(dev DeviceLink) error {
	c.mu.Lock()
	c.dev = dev
	var sessions []string
	for s := range c.ctl {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	for _, s := range sessions {
		if err := c.subscribe(s); err != nil {
			return err
		}
	}
	return c.nc.Flush()
}

func (c *NATSControl) subscribe(session string) error {
	sub, err := c.nc.Subscribe(contract.SubjectDeviceGrant(c.cloud, session), func(m *nats.Msg) {
		var req contract.ControlRequest
		err := json.Unmarshal(m.Data, &req)
		var k *contract.Keys
		if err == nil && req.Session == session {
			k, err = openKeys(c.key(session), contract.SealGrant, session, req.Sealed)
		} else if err == nil {
			err = ErrUnknownSession
		}
		if err == nil {
			c.mu.Lock()
			dev := c.dev
			c.mu.Unlock()
			err = dev.InstallGrant(k)
		}
		reply := []byte{}
		if err != nil {
			reply = []byte(err.Error())
		}
		_ = m.Respond(reply)
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.subs[session] = sub
	c.mu.Unlock()
	return c.nc.Flush()
}

// forget drops an old session's key and grant subscription.
func (c *NATSControl) forget(session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.subs[session]; s != nil {
		_ = s.Unsubscribe()
		delete(c.subs, session)
	}
	clear(c.ctl[session])
	delete(c.ctl, session)
}

// Close ends the grant subscriptions and wipes the control keys.
func (c *NATSControl) Close() {
	c.mu.Lock()
	var sessions []string
	for s := range c.ctl {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	for _, s := range sessions {
		c.forget(s)
	}
}

// sessionHex reports whether s is a session id (32 lowercase hex digits).
func sessionHex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 16 && hex.EncodeToString(b) == s
}
