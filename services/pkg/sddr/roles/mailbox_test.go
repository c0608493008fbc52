package roles

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
	"github.com/obscura-iot/obscura/services/testenv"
)

// pair is two devices that met: each heard the other's beacon and holds the encounter.
type pair struct {
	a, b       *sddr.Device
	id         sddr.EncounterID
	boxA, boxB *client.Box
	sk         [sddr.KeySize]byte
}

func meet(t testing.TB) *pair {
	t.Helper()
	now := time.Unix(1_800_000_000, 0)
	a, err := sddr.New(sddr.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sddr.New(sddr.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*sddr.Device{a, b} {
		if err := d.StartEpoch(now); err != nil {
			t.Fatal(err)
		}
	}
	adA, adB := a.Advert(), b.Advert()
	sb, err := b.OnBeacon(adA.Frame[:], adA.Addr, now)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := a.OnBeacon(adB.Frame[:], adB.Addr, now)
	if err != nil {
		t.Fatal(err)
	}
	if sa.ID != sb.ID {
		t.Fatal("the two sides derived different encounter ids")
	}
	boxA, err := client.FromDevice(a, sa.ID)
	if err != nil {
		t.Fatal(err)
	}
	boxB, err := client.FromDevice(b, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := a.Encounter(sa.ID)
	return &pair{a: a, b: b, id: sa.ID, boxA: boxA, boxB: boxB, sk: info.Key}
}

// server is a mailbox on a real redis-server, its log captured.
type server struct {
	mb    *Mailbox
	url   string
	redis *testenv.Redis
	reg   *prometheus.Registry
	logMu sync.Mutex
	log   bytes.Buffer
}

type lockedWriter struct{ s *server }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.logMu.Lock()
	defer w.s.logMu.Unlock()
	return w.s.log.Write(p)
}

func startMailbox(t testing.TB, o MailboxOptions) *server {
	t.Helper()
	s := &server{redis: testenv.StartRedis(t), reg: prometheus.NewRegistry()}
	o.Redis = s.redis.Client()
	o.Registerer = s.reg
	o.Logger = slog.New(slog.NewJSONHandler(lockedWriter{s}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mb, err := NewMailbox(o)
	if err != nil {
		t.Fatal(err)
	}
	s.mb = mb
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mb.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	s.url = "http://" + l.Addr().String()
	return s
}

func (s *server) client(token string) *client.Client {
	return &client.Client{BaseURL: s.url, Token: token}
}

func TestExchange(t *testing.T) {
	s := startMailbox(t, MailboxOptions{})
	p := meet(t)
	ctx := t.Context()
	ca, cb := s.client("token-a"), s.client("token-b")
	if err := ca.Send(ctx, p.boxA, []byte("hello from A")); err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(ctx, p.boxB, []byte("hi A, B here")); err != nil {
		t.Fatal(err)
	}
	gotB, err := cb.Receive(ctx, p.boxB)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotB) != 1 || string(gotB[0]) != "hello from A" {
		t.Fatalf("B received %q, want only A's message", gotB)
	}
	gotA, err := ca.Receive(ctx, p.boxA)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotA) != 1 || string(gotA[0]) != "hi A, B here" {
		t.Fatalf("A received %q, want only B's message", gotA)
	}
	// A stranger with another encounter's mailbox sees nothing of it.
	q := meet(t)
	if got, err := ca.Receive(ctx, q.boxA); err != nil || len(got) != 0 {
		t.Fatalf("another encounter's mailbox: %q, %v", got, err)
	}
	// Messages stay until their TTL: a second fetch returns them again.
	if again, _ := cb.Receive(ctx, p.boxB); len(again) != 1 {
		t.Fatalf("second fetch: %d messages", len(again))
	}
	if v := testutil.ToFloat64(s.mb.m.Requests.WithLabelValues("put", "ok")); v != 2 {
		t.Fatalf("put ok = %v", v)
	}
}

func TestTTLExpiry(t *testing.T) {
	s := startMailbox(t, MailboxOptions{TTL: time.Second})
	p := meet(t)
	c := s.client("t")
	ctx := t.Context()
	if err := c.Send(ctx, p.boxA, []byte("short-lived")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Receive(ctx, p.boxB); err != nil || len(got) != 1 {
		t.Fatalf("before expiry: %d messages, %v", len(got), err)
	}
	key := storeKey(p.boxA.Address)
	if ttl := s.redis.Client().PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Second {
		t.Fatalf("key TTL %s, want within (0, 1s]", ttl)
	}
	testenv.Eventually(t, 10*time.Second, "the message to expire", func() error {
		got, err := c.Fetch(ctx, p.boxA.Address)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("%d messages left", len(got))
		}
		if n := s.redis.Client().Exists(ctx, key).Val(); n != 0 {
			return errors.New("the key still exists")
		}
		return nil
	})
}

func TestMailboxFull(t *testing.T) {
	s := startMailbox(t, MailboxOptions{MaxMessages: 3, Burst: 100})
	p := meet(t)
	c := s.client("t")
	for i := range 3 {
		if err := c.Send(t.Context(), p.boxA, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Send(t.Context(), p.boxA, []byte("one too many"))
	var se *client.StatusError
	if !errors.As(err, &se) || se.Reason != ReasonFull {
		t.Fatalf("fourth message: %v, want %s", err, ReasonFull)
	}
	if v := testutil.ToFloat64(s.mb.m.Rejections.WithLabelValues(ReasonFull)); v != 1 {
		t.Fatalf("rejections{mailbox_full} = %v", v)
	}
}

func TestRateLimitPerClient(t *testing.T) {
	s := startMailbox(t, MailboxOptions{Rate: 0.001, Burst: 3})
	p := meet(t)
	ctx := t.Context()
	greedy, other := s.client("greedy"), s.client("other")
	for i := range 3 {
		if _, err := greedy.Fetch(ctx, p.boxA.Address); err != nil {
			t.Fatalf("request %d within the burst: %v", i, err)
		}
	}
	_, err := greedy.Fetch(ctx, p.boxA.Address)
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusTooManyRequests || se.Reason != ReasonRateLimited {
		t.Fatalf("request beyond the burst: %v, want 429 %s", err, ReasonRateLimited)
	}
	// Another client (token) has its own bucket.
	if _, err := other.Fetch(ctx, p.boxA.Address); err != nil {
		t.Fatalf("another client: %v", err)
	}
	// No token: refused, not rate-limited in a shared bucket.
	_, err = s.client("").Fetch(ctx, p.boxA.Address)
	if !errors.As(err, &se) || se.Reason != ReasonNoToken {
		t.Fatalf("no token: %v", err)
	}
	if v := testutil.ToFloat64(s.mb.m.Rejections.WithLabelValues(ReasonRateLimited)); v != 1 {
		t.Fatalf("rejections{rate_limited} = %v", v)
	}
	if v := testutil.ToFloat64(s.mb.m.Clients); v != 2 {
		t.Fatalf("clients = %v, want 2", v)
	}
}

func TestLimiterEvictsAndRefills(t *testing.T) {
	l := newLimiter(1, 1, 2)
	t0 := time.Unix(0, 0)
	if ok, _ := l.allow("a", t0); !ok {
		t.Fatal("first")
	}
	if ok, _ := l.allow("a", t0); ok {
		t.Fatal("burst 1 allowed two")
	}
	if ok, _ := l.allow("a", t0.Add(time.Second)); !ok {
		t.Fatal("no refill after 1 s at 1/s")
	}
	l.allow("b", t0)
	if _, n := l.allow("c", t0); n != 2 {
		t.Fatalf("%d buckets, want 2 (LRU bound)", n)
	}
}

func TestRejectionsByReason(t *testing.T) {
	s := startMailbox(t, MailboxOptions{Burst: 100})
	p := meet(t)
	do := func(method, path string, body []byte) (int, string) {
		req, _ := http.NewRequest(method, s.url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, strings.TrimSpace(b.String())
	}
	sealed, _ := p.boxA.Seal([]byte("x"))
	path := "/v1/mailboxes/" + p.boxA.Address.String()
	for _, c := range []struct {
		method, path string
		body         []byte
		reason       string
	}{
		{http.MethodDelete, path, nil, ReasonBadMethod},
		{http.MethodGet, "/v1/mailboxes/" + hex.EncodeToString(p.id[:]), nil, ReasonBadAddress},
		{http.MethodGet, "/v1/mailboxes/" + strings.ToUpper(p.boxA.Address.String()), nil, ReasonBadAddress},
		{http.MethodPost, path, make([]byte, client.MaxSealed+1), ReasonTooLarge},
		{http.MethodPost, path, sealed[:len(sealed)-1], ReasonMalformed},
		{http.MethodPost, path, append([]byte{2}, sealed[1:]...), ReasonMalformed},
	} {
		code, reason := do(c.method, c.path, c.body)
		if reason != c.reason || code/100 != 4 {
			t.Errorf("%s %s (%d bytes): %d %q, want 4xx %q", c.method, c.path[:20], len(c.body), code, reason, c.reason)
		}
		if v := testutil.ToFloat64(s.mb.m.Rejections.WithLabelValues(c.reason)); v < 1 {
			t.Errorf("rejections{%s} not counted", c.reason)
		}
	}
}

// TestServerLearnsNoIdentityNoKey captures everything the server stores (a dump of every
// Redis key and value), logs and exports as metrics during an exchange and a few rejections,
// and finds in it neither the encounter id, nor the key sk, nor the AEAD key, nor a plaintext,
// nor (in logs and metrics) the mailbox address or a token.
func TestServerLearnsNoIdentityNoKey(t *testing.T) {
	s := startMailbox(t, MailboxOptions{Burst: 3})
	p := meet(t)
	ctx := t.Context()
	plain := []byte("meet me at the fountain at 6")
	ca := s.client("secret-token-of-a")
	if err := ca.Send(ctx, p.boxA, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client("secret-token-of-b").Receive(ctx, p.boxB); err != nil {
		t.Fatal(err)
	}
	for range 4 { // one is rate-limited
		_, _ = ca.Fetch(ctx, p.boxA.Address)
	}
	// Everything in Redis.
	var stored bytes.Buffer
	rdb := s.redis.Client()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != storeKey(p.boxA.Address) {
		t.Fatalf("redis keys %q, want exactly the mailbox's", keys)
	}
	for _, k := range keys {
		stored.WriteString(k)
		for _, m := range rdb.ZRange(ctx, k, 0, -1).Val() {
			stored.WriteString(m)
		}
	}
	var metrics bytes.Buffer
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		metrics.WriteString(mf.String())
	}
	s.logMu.Lock()
	logs := s.log.String()
	s.logMu.Unlock()
	if !strings.Contains(logs, "mailbox API listening") {
		t.Fatal("the log capture is empty")
	}

	secrets := map[string][]byte{"encounter id": p.id[:], "sk": p.sk[:], "plaintext": plain}
	keyA := boxKey(p.boxA)
	secrets["aead key"] = keyA[:]
	forms := func(b []byte) []string {
		return []string{string(b), hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
			fmt.Sprintf("%v", b)}
	}
	for what, v := range secrets {
		for _, f := range forms(v) {
			for where, hay := range map[string]string{"redis": stored.String(), "logs": logs, "metrics": metrics.String()} {
				if strings.Contains(hay, f) {
					t.Errorf("the %s appears in the server's %s", what, where)
				}
			}
		}
	}
	for what, v := range map[string]string{"mailbox address": p.boxA.Address.String(), "token": "secret-token-of"} {
		for where, hay := range map[string]string{"logs": logs, "metrics": metrics.String()} {
			if strings.Contains(hay, v) {
				t.Errorf("the %s appears in the server's %s", what, where)
			}
		}
	}
	// What is stored is the sealed message, useless without the key.
	if !bytes.Contains(stored.Bytes(), []byte{client.Version}) || stored.Len() < len(plain) {
		t.Fatal("nothing sealed was stored")
	}
}

// boxKey recomputes the AEAD key (as a client would) for the privacy test.
func boxKey(b *client.Box) [32]byte {
	return client.KeyOf(b)
}

func BenchmarkMailboxPutGet(b *testing.B) {
	s := startMailbox(b, MailboxOptions{Rate: 1e6, Burst: 1e6, MaxMessages: 10000})
	p := meet(b)
	c := s.client("bench")
	c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	ctx := context.Background()
	sealed, _ := p.boxA.Seal(bytes.Repeat([]byte("m"), 100))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Put(ctx, p.boxA.Address, sealed); err != nil {
			b.Fatal(err)
		}
		if i%16 == 15 {
			if _, err := c.Fetch(ctx, p.boxA.Address); err != nil {
				b.Fatal(err)
			}
			s.redis.Client().Del(ctx, storeKey(p.boxA.Address))
		}
	}
}

// TestMaxMessageSize: a mailbox bounded below the protocol's largest message stores what fits
// and refuses a larger sealed message as too_large (the EncounterMailbox's maxMessageBytes).
func TestMaxMessageSize(t *testing.T) {
	const limit = client.Overhead + 2*client.PadBlock
	s := startMailbox(t, MailboxOptions{MaxSealed: limit, Burst: 100})
	p := meet(t)
	c := s.client("t")
	if err := c.Send(t.Context(), p.boxA, make([]byte, 2*client.PadBlock-2)); err != nil {
		t.Fatalf("a message of exactly %d sealed bytes: %v", limit, err)
	}
	err := c.Send(t.Context(), p.boxA, make([]byte, 2*client.PadBlock-1))
	var se *client.StatusError
	if !errors.As(err, &se) || se.Reason != ReasonTooLarge {
		t.Fatalf("a message one block larger: %v, want %s", err, ReasonTooLarge)
	}
	got, err := c.Receive(t.Context(), p.boxB)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %d messages, %v", len(got), err)
	}
	for _, bad := range []int{client.Overhead + client.PadBlock - 1, client.MaxSealed + 1} {
		if _, err := NewMailbox(MailboxOptions{Redis: s.redis.Client(), MaxSealed: bad}); err == nil {
			t.Errorf("max message size %d accepted", bad)
		}
	}
}
