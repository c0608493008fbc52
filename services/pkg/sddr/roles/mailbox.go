// Package roles holds the SDDR services. The encounter mailbox (Mailbox) is the untrusted
// rendezvous of spec §2.1/§7.1: devices that met leave each other AEAD-sealed messages under an
// opaque address derived from their encounter (package client). The server stores the sealed
// messages in its own Redis with a TTL and learns no identity and no key: it never sees an
// encounter id, a key or a plaintext, and its logs and metrics carry no address either.
package roles

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
)

// Rejection reasons (label reason of sddr_mailbox_rejected_total, docs/metrics.md).
const (
	ReasonNoToken     = "no_token"     // no bearer token: the client cannot be rate-limited
	ReasonRateLimited = "rate_limited" // the client's token bucket is empty
	ReasonBadAddress  = "bad_address"  // the path is not /v1/mailboxes/<64 lower-case hex>
	ReasonBadMethod   = "bad_method"   // neither GET nor POST
	ReasonTooLarge    = "too_large"    // body above MailboxOptions.MaxSealed
	ReasonMalformed   = "malformed"    // body is not a sealed message's shape
	ReasonFull        = "mailbox_full" // the mailbox holds MaxMessages unexpired messages
	ReasonUnavailable = "unavailable"  // Redis failed
)

// Reasons lists every rejection reason (the metric's label values are pre-created).
var Reasons = []string{ReasonNoToken, ReasonRateLimited, ReasonBadAddress, ReasonBadMethod, ReasonTooLarge,
	ReasonMalformed, ReasonFull, ReasonUnavailable}

// MailboxOptions configure a Mailbox.
type MailboxOptions struct {
	// Redis is the mailbox's own Redis.
	Redis redis.UniversalClient
	// TTL is how long a message is kept (default 24 h).
	TTL time.Duration
	// MaxMessages bounds the unexpired messages of one mailbox (default 64).
	MaxMessages int
	// Rate (requests per second) and Burst are each client's token bucket (defaults 5, 20).
	Rate  float64
	Burst int
	// MaxClients bounds the buckets kept (least recently used evicted; default 100000).
	MaxClients int
	// MaxSealed bounds one sealed message in bytes (default and at most client.MaxSealed, at
	// least one padding block): a larger put is refused as too_large.
	MaxSealed  int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Validate checks the options (after defaults) without I/O.
func (o *MailboxOptions) Validate() error {
	var errs []error
	if o.Redis == nil {
		errs = append(errs, errors.New("a Redis client is required"))
	}
	if o.TTL < time.Second || o.TTL > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("TTL %s must be within [1s, 720h]", o.TTL))
	}
	if o.MaxMessages < 1 || o.MaxMessages > 10000 {
		errs = append(errs, fmt.Errorf("max messages %d must be within [1, 10000]", o.MaxMessages))
	}
	if !(o.Rate > 0) || o.Rate > 1e6 {
		errs = append(errs, fmt.Errorf("rate %g must be within (0, 1e6]", o.Rate))
	}
	if o.Burst < 1 || o.Burst > 1e6 {
		errs = append(errs, fmt.Errorf("burst %d must be within [1, 1e6]", o.Burst))
	}
	if o.MaxClients < 1 {
		errs = append(errs, fmt.Errorf("max clients %d must be positive", o.MaxClients))
	}
	if lo := client.Overhead + client.PadBlock; o.MaxSealed < lo || o.MaxSealed > client.MaxSealed {
		errs = append(errs, fmt.Errorf("max message size %d must be within [%d, %d]", o.MaxSealed, lo, client.MaxSealed))
	}
	return errors.Join(errs...)
}

func (o *MailboxOptions) defaults() {
	if o.TTL == 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxMessages == 0 {
		o.MaxMessages = 64
	}
	if o.Rate == 0 {
		o.Rate = 5
	}
	if o.Burst == 0 {
		o.Burst = 20
	}
	if o.MaxClients == 0 {
		o.MaxClients = 100000
	}
	if o.MaxSealed == 0 {
		o.MaxSealed = client.MaxSealed
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// MailboxMetrics are the mailbox's metrics: no label carries an address or a token.
type MailboxMetrics struct {
	Requests   *prometheus.CounterVec   // sddr_mailbox_requests_total{op,result}
	Rejections *prometheus.CounterVec   // sddr_mailbox_rejected_total{reason}
	Duration   *prometheus.HistogramVec // sddr_mailbox_request_duration_seconds{op}
	Clients    prometheus.Gauge         // sddr_mailbox_rate_limit_clients
}

func newMailboxMetrics(reg prometheus.Registerer) (*MailboxMetrics, error) {
	m := &MailboxMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sddr_mailbox_requests_total",
			Help: "Mailbox API requests by operation (put, get) and result (ok, rejected)."}, []string{"op", "result"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sddr_mailbox_rejected_total",
			Help: "Mailbox API requests rejected, by reason."}, []string{"reason"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sddr_mailbox_request_duration_seconds",
			Help: "Mailbox API request latency by operation.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}, []string{"op"}),
		Clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sddr_mailbox_rate_limit_clients",
			Help: "Client token buckets the mailbox replica holds."}),
	}
	for _, r := range Reasons {
		m.Rejections.WithLabelValues(r)
	}
	for _, op := range []string{"put", "get", "other"} {
		for _, res := range []string{"ok", "rejected"} {
			m.Requests.WithLabelValues(op, res)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Requests, m.Rejections, m.Duration, m.Clients} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Mailbox is the encounter mailbox service.
type Mailbox struct {
	opt MailboxOptions
	log *slog.Logger
	m   *MailboxMetrics
	lim *limiter
	now func() time.Time
}

// NewMailbox validates the options and builds the service.
func NewMailbox(o MailboxOptions) (*Mailbox, error) {
	o.defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m, err := newMailboxMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	mb := &Mailbox{opt: o, log: o.Logger, m: m, now: time.Now}
	mb.lim = newLimiter(o.Rate, o.Burst, o.MaxClients)
	return mb, nil
}

// Metrics returns the service's metrics (for tests).
func (mb *Mailbox) Metrics() *MailboxMetrics { return mb.m }

// Ping is the readiness check: Redis answers.
func (mb *Mailbox) Ping(ctx context.Context) error { return mb.opt.Redis.Ping(ctx).Err() }

// storeKey is the Redis key of a mailbox: the opaque address only.
func storeKey(a client.Address) string { return "sddr:mb:" + a.String() }

// putScript prunes expired messages, refuses a full mailbox, adds the message with its expiry
// (Redis server time, so replicas agree) as score and extends the key's TTL.
var putScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
`)

// getScript prunes expired messages and returns the rest, oldest first.
var getScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)

// memberPrefix makes equal ciphertexts distinct set members (random, stripped on reads).
const memberPrefix = 8

// PutRequest is a decoded POST.
type PutRequest struct {
	Address client.Address
	Sealed  []byte
}

// DecodeAddress parses the request path /v1/mailboxes/<address>.
func DecodeAddress(path string) (client.Address, error) {
	const prefix = "/v1/mailboxes/"
	if !strings.HasPrefix(path, prefix) {
		return client.Address{}, errors.New("not a mailbox path")
	}
	return client.ParseAddress(path[len(prefix):])
}

// DecodePut checks a POST body's shape (the server cannot open it): the version byte, a
// length a sealed message can have. It returns the rejection reason on error.
func DecodePut(path string, body []byte) (*PutRequest, string, error) {
	return decodePut(path, body, client.MaxSealed)
}

// decodePut is DecodePut with the mailbox's own size bound.
func decodePut(path string, body []byte, maxSealed int) (*PutRequest, string, error) {
	a, err := DecodeAddress(path)
	if err != nil {
		return nil, ReasonBadAddress, err
	}
	if len(body) > maxSealed {
		return nil, ReasonTooLarge, fmt.Errorf("body of %d bytes", len(body))
	}
	if len(body) < client.Overhead+client.PadBlock || body[0] != client.Version ||
		(len(body)-client.Overhead)%client.PadBlock != 0 {
		return nil, ReasonMalformed, errors.New("not a sealed message")
	}
	return &PutRequest{Address: a, Sealed: body}, "", nil
}

// ClientKey identifies a client for rate limiting: a hash of its bearer token (the token
// itself is never kept). The token is an opaque value the app draws and rotates; it is not a
// device identity, and the server cannot tie it to an encounter id.
func ClientKey(h http.Header) (string, bool) {
	v := h.Get("Authorization")
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || tok == "" || len(tok) > 512 {
		return "", false
	}
	s := sha256.Sum256([]byte("SDDR-v1/MAILBOX-CLIENT" + tok))
	return string(s[:16]), true
}

// Handler is the mailbox API:
//
//	POST /v1/mailboxes/{address}   body: one sealed message → 204
//	GET  /v1/mailboxes/{address}   → 200 {"messages": [base64, ...]} (unexpired, oldest first)
func (mb *Mailbox) Handler() http.Handler {
	return http.HandlerFunc(mb.serve)
}

func (mb *Mailbox) reject(w http.ResponseWriter, op, reason string, code int) {
	mb.m.Rejections.WithLabelValues(reason).Inc()
	mb.m.Requests.WithLabelValues(op, "rejected").Inc()
	http.Error(w, reason, code)
}

func (mb *Mailbox) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	op := "other"
	switch r.Method {
	case http.MethodPost:
		op = "put"
	case http.MethodGet:
		op = "get"
	}
	defer func() { mb.m.Duration.WithLabelValues(op).Observe(time.Since(start).Seconds()) }()
	if op == "other" {
		mb.reject(w, op, ReasonBadMethod, http.StatusMethodNotAllowed)
		return
	}
	key, ok := ClientKey(r.Header)
	if !ok {
		mb.reject(w, op, ReasonNoToken, http.StatusUnauthorized)
		return
	}
	allowed, clients := mb.lim.allow(key, mb.now())
	mb.m.Clients.Set(float64(clients))
	if !allowed {
		w.Header().Set("Retry-After", "1")
		mb.reject(w, op, ReasonRateLimited, http.StatusTooManyRequests)
		return
	}
	if op == "get" {
		a, err := DecodeAddress(r.URL.Path)
		if err != nil {
			mb.reject(w, op, ReasonBadAddress, http.StatusNotFound)
			return
		}
		mb.get(w, r.Context(), a)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(mb.opt.MaxSealed)+1))
	if err != nil {
		mb.reject(w, op, ReasonMalformed, http.StatusBadRequest)
		return
	}
	req, reason, err := decodePut(r.URL.Path, body, mb.opt.MaxSealed)
	if err != nil {
		code := http.StatusBadRequest
		switch reason {
		case ReasonBadAddress:
			code = http.StatusNotFound
		case ReasonTooLarge:
			code = http.StatusRequestEntityTooLarge
		}
		mb.reject(w, op, reason, code)
		return
	}
	mb.put(w, r.Context(), req)
}

func (mb *Mailbox) put(w http.ResponseWriter, ctx context.Context, req *PutRequest) {
	member := make([]byte, memberPrefix+len(req.Sealed))
	if _, err := rand.Read(member[:memberPrefix]); err != nil {
		mb.reject(w, "put", ReasonUnavailable, http.StatusServiceUnavailable)
		return
	}
	copy(member[memberPrefix:], req.Sealed)
	n, err := putScript.Run(ctx, mb.opt.Redis, []string{storeKey(req.Address)},
		member, mb.opt.MaxMessages, mb.opt.TTL.Milliseconds()).Int()
	if err != nil {
		mb.log.Warn("store failed", "op", "put", "err", err)
		mb.reject(w, "put", ReasonUnavailable, http.StatusServiceUnavailable)
		return
	}
	if n == 0 {
		mb.reject(w, "put", ReasonFull, http.StatusInsufficientStorage)
		return
	}
	mb.m.Requests.WithLabelValues("put", "ok").Inc()
	w.WriteHeader(http.StatusNoContent)
}

func (mb *Mailbox) get(w http.ResponseWriter, ctx context.Context, a client.Address) {
	vals, err := getScript.Run(ctx, mb.opt.Redis, []string{storeKey(a)}).StringSlice()
	if err != nil {
		mb.log.Warn("store failed", "op", "get", "err", err)
		mb.reject(w, "get", ReasonUnavailable, http.StatusServiceUnavailable)
		return
	}
	out := client.Messages{Messages: make([][]byte, 0, len(vals))}
	for _, v := range vals {
		if len(v) > memberPrefix {
			out.Messages = append(out.Messages, []byte(v[memberPrefix:]))
		}
	}
	b, err := json.Marshal(&out)
	if err != nil {
		mb.reject(w, "get", ReasonUnavailable, http.StatusInternalServerError)
		return
	}
	mb.m.Requests.WithLabelValues("get", "ok").Inc()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// Serve runs the API on l until ctx ends, then shuts down gracefully (requests in flight
// finish, up to 10 s). It serves HTTP/1.1 and cleartext HTTP/2 (the edge's upstream).
func (mb *Mailbox) Serve(ctx context.Context, l net.Listener) error {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mb.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 16 << 10, Protocols: p,
		// net/http's own error log never sees a URL; route it to the structured log anyway.
		ErrorLog: slog.NewLogLogger(mb.log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	mb.log.Info("mailbox API listening", "addr", l.Addr().String(), "ttl", mb.opt.TTL.String(),
		"maxMessages", mb.opt.MaxMessages, "maxMessageBytes", mb.opt.MaxSealed, "rate", mb.opt.Rate, "burst", mb.opt.Burst)
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// limiter is one token bucket per client key, least recently used evicted beyond max.
type limiter struct {
	rate  float64
	burst float64
	max   int

	mu    sync.Mutex
	lru   *list.List // of *bucket, front = most recent
	index map[string]*list.Element
}

type bucket struct {
	key    string
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst, max int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), max: max, lru: list.New(), index: map[string]*list.Element{}}
}

// allow takes one token of the client's bucket; it returns whether there was one and how many
// buckets are held.
func (l *limiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.index[key]
	if !ok {
		if l.lru.Len() >= l.max {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.index, old.Value.(*bucket).key)
		}
		e = l.lru.PushFront(&bucket{key: key, tokens: l.burst, last: now})
		l.index[key] = e
	} else {
		l.lru.MoveToFront(e)
	}
	b := e.Value.(*bucket)
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(l.burst, b.tokens+dt*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false, l.lru.Len()
	}
	b.tokens--
	return true, l.lru.Len()
}
