package roles

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/records"
)

// IngressConfig configures the participant-facing proxy (spec §4.2 proxy-ingress).
type IngressConfig struct {
	Listen       string          // HTTPS listen address
	Participants map[string]bool // allowed client-certificate CNs (the job's participant list)
	Quota        int             // items per participant per window (T-MAL-8)
	Rate         int             // items per participant per second
	MaxBatch     int             // items per submit request (spec §4.4: ≤ 1,000)
	SessionTTL   time.Duration
}

// Validate checks the configuration.
func (c *IngressConfig) Validate() error {
	var errs []error
	if len(c.Participants) == 0 {
		errs = append(errs, errors.New("the participant list is empty"))
	}
	if c.Quota < 1 || c.Rate < 1 {
		errs = append(errs, errors.New("quota and rate must be ≥ 1"))
	}
	if c.MaxBatch < 1 || c.MaxBatch > 10000 {
		errs = append(errs, errors.New("max batch must be in [1, 10000]"))
	}
	if c.SessionTTL < time.Minute {
		errs = append(errs, errors.New("session TTL must be ≥ 1m"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid ingress config: %w", errors.Join(errs...))
	}
	return nil
}

// Ingress authenticates participants by their mTLS client certificate, enforces quotas,
// rate limits and the session replay cache in the proxy's Redis, runs the proxy stage of
// EOPRF-DH (pda.Proxy.Ingest) and publishes the BlindedItems to the proxy-owned pool stream
// before acknowledging (spec A6, §4.5).
type Ingress struct {
	cfg     IngressConfig
	job     *Job
	sec     *ProxySecrets
	js      jetstream.JetStream
	windows jetstream.KeyValue
	store   ProxyStore
	log     *slog.Logger
	m       *Metrics
	now     func() time.Time

	mu      sync.Mutex
	proxies map[uint64]*pda.Proxy
}

// NewIngress wires an ingress. The pool stream and window bucket must exist (EnsureProxyDomain).
func NewIngress(ctx context.Context, cfg IngressConfig, job *Job, sec *ProxySecrets, js jetstream.JetStream, store ProxyStore, log *slog.Logger, m *Metrics) (*Ingress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, contract.WindowsBucket)
	if err != nil {
		return nil, fmt.Errorf("ingress: window bucket: %w", err)
	}
	return &Ingress{cfg: cfg, job: job, sec: sec, js: js, windows: kv, store: store, log: log, m: m,
		now: time.Now, proxies: map[uint64]*pda.Proxy{}}, nil
}

func (g *Ingress) proxy(w uint64) (*pda.Proxy, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.proxies[w]; p != nil {
		return p, nil
	}
	s, err := g.job.Suite(w)
	if err != nil {
		return nil, err
	}
	p, err := pda.NewProxy(s, g.sec.Keys, nil)
	if err != nil {
		return nil, err
	}
	if len(g.proxies) > 16 {
		clear(g.proxies)
	}
	g.proxies[w] = p
	return p, nil
}

// Handler returns the participant API. The caller's identity comes from the verified client
// certificate (r.TLS), never from the request.
func (g *Ingress) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+contract.PathSession, g.handleSession)
	mux.HandleFunc("POST "+contract.PathSubmit, g.handleSubmit)
	return mux
}

// identity returns the client certificate's CN if it is on the participant list.
func (g *Ingress) identity(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", false
	}
	cn := r.TLS.PeerCertificates[0].Subject.CommonName
	return cn, g.cfg.Participants[cn]
}

func (g *Ingress) windowOpen(ctx context.Context, w uint64) (bool, error) {
	now := g.now()
	cur := g.job.WindowAt(now)
	if w > cur || now.After(g.job.End(w).Add(g.job.Grace)) {
		return false, nil
	}
	e, err := g.windows.Get(ctx, strconv.FormatUint(w, 10))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("window state: %w", err)
	}
	var rec contract.WindowRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return false, fmt.Errorf("window state: %w", err)
	}
	return rec.State == "" || rec.State == contract.WindowOpen, nil
}

func (g *Ingress) handleSession(w http.ResponseWriter, r *http.Request) {
	id, ok := g.identity(r)
	if !ok {
		g.refuse(w, http.StatusForbidden, RejectUnknownParticipant, "unknown participant")
		return
	}
	win := g.job.WindowAt(g.now())
	if s := r.URL.Query().Get("window"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			g.refuse(w, http.StatusBadRequest, RejectBadWindow, "bad window")
			return
		}
		win = v
	}
	open, err := g.windowOpen(r.Context(), win)
	if err != nil {
		g.log.Warn("window state unavailable", "err", err)
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	if !open {
		g.m.Rejected.WithLabelValues(RejectWindowClosed).Inc()
		writeJSON(w, http.StatusConflict, map[string]string{"reason": contract.ReasonWindowClosed})
		return
	}
	suite, err := g.job.Suite(win)
	if err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	var sid pda.SessionID
	if _, err := rand.Read(sid[:]); err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	fresh, err := g.store.OpenSession(r.Context(), hex.EncodeToString(sid[:]), g.sec.Pseudonym(id), win, g.cfg.SessionTTL)
	if err != nil || !fresh {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	pp := suite.Params()
	ppb, err := pp.MarshalBinary()
	if err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	g.m.Sessions.Inc()
	writeJSON(w, http.StatusOK, contract.SessionResponse{Window: win, Session: hex.EncodeToString(sid[:]), Params: base64.StdEncoding.EncodeToString(ppb)})
}

// refuse answers a request with code and msg and counts it in pda_proxy_rejected_total.
func (g *Ingress) refuse(w http.ResponseWriter, code int, reason, msg string) {
	g.m.Rejected.WithLabelValues(reason).Inc()
	http.Error(w, msg, code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, pda.ErrBadProof):
		return contract.ReasonBadProof
	case errors.Is(err, pda.ErrReplay):
		return contract.ReasonReplay
	case errors.Is(err, pda.ErrInvalidElement), errors.Is(err, pda.ErrInvalidScalar):
		return contract.ReasonInvalid
	case errors.Is(err, pda.ErrMalformed):
		return contract.ReasonMalformed
	}
	return contract.ReasonRejected
}

func (g *Ingress) handleSubmit(w http.ResponseWriter, r *http.Request) {
	id, ok := g.identity(r)
	if !ok {
		g.refuse(w, http.StatusForbidden, RejectUnknownParticipant, "unknown participant")
		return
	}
	sidHex := r.URL.Query().Get("session")
	sidRaw, err := hex.DecodeString(sidHex)
	if err != nil || len(sidRaw) != pda.SessionIDSize {
		g.refuse(w, http.StatusBadRequest, RejectBadSession, "bad session")
		return
	}
	ctx := r.Context()
	pid := g.sec.Pseudonym(id)
	owner, win, found, err := g.store.Session(ctx, sidHex)
	if err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	if !found || owner != pid { // a session id is usable only by the participant it was issued to
		g.refuse(w, http.StatusForbidden, RejectUnknownSession, "unknown session")
		return
	}
	open, err := g.windowOpen(ctx, win)
	if err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	if !open {
		g.m.Items.WithLabelValues(itemOutcome(contract.ReasonWindowClosed)).Inc()
		g.m.Rejected.WithLabelValues(RejectWindowClosed).Inc()
		writeJSON(w, http.StatusConflict, map[string]string{"reason": contract.ReasonWindowClosed})
		return
	}
	p, err := g.proxy(win)
	if err != nil {
		g.refuse(w, http.StatusServiceUnavailable, RejectUnavailable, "unavailable")
		return
	}
	suite, _ := g.job.Suite(win)
	size := suite.SubmissionSize()
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(size*g.cfg.MaxBatch)+1))
	var subs [][]byte
	if err == nil {
		subs, err = records.Split(body, size, g.cfg.MaxBatch)
	}
	if err != nil || len(subs) == 0 {
		g.refuse(w, http.StatusBadRequest, RejectBadBody, fmt.Sprintf("body must be 1..%d submissions of %d bytes", g.cfg.MaxBatch, size))
		return
	}
	resp, status := g.ingest(ctx, p, suite, id, pid, sidHex, sidRaw, win, subs)
	if status == http.StatusServiceUnavailable {
		g.m.Rejected.WithLabelValues(RejectUnavailable).Inc()
	}
	writeJSON(w, status, resp)
}

func (g *Ingress) ingest(ctx context.Context, p *pda.Proxy, suite *pda.Suite, id, pid, sidHex string, sidRaw []byte, win uint64, subs [][]byte) (*contract.SubmitResponse, int) {
	resp := &contract.SubmitResponse{Window: win, Reasons: map[string]int{}}
	reject := func(pos int, reason string) {
		resp.Rejected = append(resp.Rejected, contract.ItemRejection{Position: pos, Reason: reason})
		resp.Reasons[reason]++
		g.m.Items.WithLabelValues(itemOutcome(reason)).Inc()
	}
	n := len(subs)
	idx := make([]uint32, n)
	for i, sub := range subs {
		idx[i] = binary.BigEndian.Uint32(sub[4:])
	}
	seen, err := g.store.Seen(ctx, sidHex, idx)
	if err != nil {
		return resp, http.StatusServiceUnavailable
	}
	var pos []int // positions still in play
	for i := range n {
		if seen[i] {
			reject(i, contract.ReasonReplay)
			continue
		}
		pos = append(pos, i)
	}
	granted, limit, err := g.store.Admit(ctx, win, pid, len(pos), g.cfg.Quota, g.cfg.Rate, g.job.WindowLength+g.job.Grace+time.Hour)
	if err != nil {
		return resp, http.StatusServiceUnavailable
	}
	for _, i := range pos[granted:] {
		if limit == LimitRate {
			reject(i, contract.ReasonRate)
		} else {
			reject(i, contract.ReasonQuota)
		}
	}
	pos = pos[:granted]
	items := make([][]byte, len(pos))
	for k, i := range pos {
		items[k] = subs[i]
	}
	var sid pda.SessionID
	copy(sid[:], sidRaw)
	sess := p.OpenSession([]byte(id), sid)
	blinded, rejected := p.Ingest(sess, items)
	bad := map[int]bool{}
	for _, rj := range rejected {
		bad[rj.Position] = true
		reject(pos[rj.Position], reasonOf(rj.Err))
	}
	var acc []uint32
	for k, i := range pos {
		if !bad[k] {
			acc = append(acc, idx[i])
		}
	}
	if len(rejected) > 0 {
		_ = g.store.Refund(ctx, win, pid, len(rejected))
	}
	if len(blinded) > 0 {
		// One pool message per request, de-duplicated by (session, indices): a retried
		// request whose first attempt reached the stream is stored once.
		h := sha256.New()
		h.Write(sidRaw)
		for _, x := range acc {
			h.Write(binary.BigEndian.AppendUint32(nil, x))
		}
		hdr := nats.Header{}
		hdr.Set(contract.HdrPid, pid)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := natsx.Publish(pctx, g.js, contract.PoolSubject(win), hex.EncodeToString(h.Sum(nil)), slices.Concat(blinded...), hdr)
		cancel()
		if err != nil {
			_ = g.store.Refund(ctx, win, pid, len(blinded))
			g.log.Warn("pool publish failed", "err", err)
			return &contract.SubmitResponse{Window: win}, http.StatusServiceUnavailable
		}
		if err := g.store.Accept(ctx, sidHex, acc, g.cfg.SessionTTL); err != nil {
			return &contract.SubmitResponse{Window: win}, http.StatusServiceUnavailable
		}
	}
	resp.Accepted = len(blinded)
	g.m.Items.WithLabelValues("accepted").Add(float64(len(blinded)))
	slices.SortFunc(resp.Rejected, func(a, b contract.ItemRejection) int { return a.Position - b.Position })
	return resp, http.StatusOK
}

// Serve runs the HTTPS server with client-certificate authentication until ctx ends.
func (g *Ingress) Serve(ctx context.Context, l net.Listener, tlsCfg *tls.Config) error {
	cfg := tlsCfg.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.MinVersion = tls.VersionTLS13
	srv := &http.Server{Handler: g.Handler(), TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(handshakeCounter{g.m.Rejected.WithLabelValues(RejectTLSHandshake), slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}, "", 0)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handshakeCounter is the HTTPS server's error log: it counts the failed TLS handshakes (no,
// an expired or an untrusted client certificate — net/http reports them only there) and passes
// every line on to the structured log.
type handshakeCounter struct {
	failed prometheus.Counter
	next   *log.Logger
}

func (h handshakeCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		h.failed.Inc()
	}
	h.next.Print(string(p))
	return len(p), nil
}
