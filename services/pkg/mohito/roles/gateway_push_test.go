package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// pushEnv is a gateway on a real NATS server (round-info bucket, release notices) with an
// in-memory round store, served over TCP on loopback.
type pushEnv struct {
	g     *Gateway
	nc    *nats.Conn
	store *roundstate.Memory
	alice *client.GatewayClient
	conn  *grpc.ClientConn // alice's connection
	addr  string           // the gateway's gRPC address
	// roundsOpened counts the Rounds streams the gateway's server accepted (a stream
	// interceptor: the calls metric counts a stream only when it ends).
	roundsOpened atomic.Int64
}

func startPushGateway(t *testing.T) *pushEnv {
	t.Helper()
	return startPushGatewayOn(t, nil)
}

// startPushGatewayOn starts the gateway on wrap(store) (the store itself when wrap is nil).
func startPushGatewayOn(t *testing.T, wrap func(roundstate.Store) roundstate.Store) *pushEnv {
	t.Helper()
	n := testenv.StartNATS(t)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := LoadDeployment("testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	store := roundstate.NewMemory(64)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var gs roundstate.Store = store
	if wrap != nil {
		gs = wrap(store)
	}
	tokens := map[string]string{"tok-alice": "alice", "tok-bob": "bob"}
	g, err := NewGateway(ctx, GatewayConfig{Deployment: d, JS: js, Store: gs, Tokens: tokens, Metrics: NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(testenv.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	e := &pushEnv{g: g, nc: nc, store: store, addr: l.Addr().String()}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(contract.MaxMessageSize),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if strings.HasSuffix(info.FullMethod, "/Rounds") {
				e.roundsOpened.Add(1)
			}
			return h(srv, ss)
		}))
	g.Register(srv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := client.DialGateway(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn, e.alice = conn, client.NewGatewayClient(conn, "tok-alice")
	return e
}

// dial opens another connection to the gateway.
func (e *pushEnv) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := client.DialGateway(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// putRound makes round r current at the gateway (a signed-shape M0 in the round-info bucket).
func (e *pushEnv) putRound(t *testing.T, ctx context.Context, r uint64) []byte {
	t.Helper()
	p := e.g.cfg.Deployment.Params
	ik, err := mohito.GenerateKey(p.Suite)
	if err != nil {
		t.Fatal(err)
	}
	ri := &mohito.RoundInfo{T: r, Params: p, IntegratorKey: ik.PublicKey(), ShufflerKey: ik.PublicKey()}
	b, err := ri.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.g.rounds.put(ctx, r, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *pushEnv) calls(method, code string) float64 {
	return testutil.ToFloat64(e.g.cfg.Metrics.GatewayCalls.WithLabelValues(method, code))
}

// admit puts one of alice's commands into round t (status open) and returns its index.
func (e *pushEnv) admit(t *testing.T, round uint64) uint32 {
	t.Helper()
	p := e.g.cfg.Deployment.Params
	ctx := context.Background()
	if err := e.store.SetStatus(ctx, round, roundstate.StatusOpen); err != nil {
		t.Fatal(err)
	}
	idx, err := e.store.Admit(ctx, round, "alice", p.Q, wellFormedM1(p, round))
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

type fetched struct {
	m11 []byte
	err error
}

// parked starts a long-poll Fetch and waits until the gateway holds it.
func (e *pushEnv) parked(t *testing.T, round uint64, idx uint32, wait time.Duration) <-chan fetched {
	t.Helper()
	before := testutil.ToFloat64(e.g.cfg.Metrics.GatewayWaiting)
	out := make(chan fetched, 1)
	go func() {
		m11, err := e.alice.FetchWait(context.Background(), round, idx, wait)
		out <- fetched{m11, err}
	}()
	testenv.Eventually(t, 10*time.Second, "the Fetch to be parked", func() error {
		if got := testutil.ToFloat64(e.g.cfg.Metrics.GatewayWaiting); got <= before {
			return fmt.Errorf("%v parked", got)
		}
		return nil
	})
	return out
}

// TestFetchIsAnsweredWhenTheRoundIsReleased: a long-poll Fetch is held while its round's
// responses are being routed — also once its own response is in the mailbox, since responses
// are released per round — and answered, with its M11, as soon as the responder announces
// the release; the user made exactly one call for it (no polling).
func TestFetchIsAnsweredWhenTheRoundIsReleased(t *testing.T) {
	e := startPushGateway(t)
	ctx := context.Background()
	const round = 7
	idx := e.admit(t, round)
	got := e.parked(t, round, idx, 15*time.Second)

	m11 := bytes.Repeat([]byte{0xa5}, e.g.cfg.Deployment.Params.UserResponseSize())
	if err := e.store.PutResponses(ctx, round, []roundstate.Mail{{User: "alice", Index: idx, M11: m11}}); err != nil {
		t.Fatal(err)
	}
	// Another round's release is handled (the notice reached this gateway) ...
	e.admit(t, round+1)
	_ = e.store.SetStatus(ctx, round+1, roundstate.StatusDone)
	AnnounceRelease(e.nc, round+1, roundstate.StatusDone)
	testenv.Eventually(t, 10*time.Second, "the other round's release", func() error {
		if e.g.rel.status(ctx, round+1) != roundstate.StatusDone {
			return fmt.Errorf("not seen")
		}
		return nil
	})
	// ... and, with several backstop periods past, this round's call is still held: its
	// response is in the mailbox but the round is not released.
	time.Sleep(3 * releaseBackstop)
	select {
	case f := <-got:
		t.Fatalf("Fetch returned before the round was released: %v", f.err)
	default:
	}

	if err := e.store.SetStatus(ctx, round, roundstate.StatusDone); err != nil {
		t.Fatal(err)
	}
	AnnounceRelease(e.nc, round, roundstate.StatusDone)
	var f fetched
	select {
	case f = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Fetch not answered after the release")
	}
	if f.err != nil || !bytes.Equal(f.m11, m11) {
		t.Fatalf("Fetch after release: %d bytes, %v", len(f.m11), f.err)
	}
	if n := e.calls("Fetch", "OK"); n != 1 {
		t.Fatalf("%v Fetch calls for one response; want 1", n)
	}
	// Once released, a Fetch is answered at once, with or without a wait.
	if b, err := e.alice.Fetch(ctx, round, idx); err != nil || !bytes.Equal(b, m11) {
		t.Fatalf("Fetch of a released round: %v", err)
	}
	// A released round without a response for the ticket (another index; or a round the
	// store forgot) says re-send, at once, instead of leaving the user to wait for nothing.
	for _, tk := range [][2]uint64{{round, uint64(idx) + 5}, {999, 0}} {
		if _, err := e.alice.FetchWait(ctx, tk[0], uint32(tk[1]), 15*time.Second); status.Code(err) != codes.Aborted {
			t.Fatalf("Fetch of ticket %v without a response: %v; want Aborted", tk, err)
		}
	}
}

// TestFetchWaitExpires: a long-poll on a round that is never released ends with
// DEADLINE_EXCEEDED and a message saying to fetch again; without a wait the same ticket is
// NOT_FOUND at once, even with its response in the mailbox (not released yet).
func TestFetchWaitExpires(t *testing.T) {
	e := startPushGateway(t)
	ctx := context.Background()
	idx := e.admit(t, 3)
	_ = e.store.PutResponses(ctx, 3, []roundstate.Mail{{User: "alice", Index: idx, M11: make([]byte, e.g.cfg.Deployment.Params.UserResponseSize())}})
	_, err := e.alice.FetchWait(ctx, 3, idx, 300*time.Millisecond)
	st, _ := status.FromError(err)
	if st.Code() != codes.DeadlineExceeded || st.Message() != "round 3 not released within the wait of 300ms: fetch again" {
		t.Fatalf("expired wait: %v", err)
	}
	if _, err := e.alice.Fetch(ctx, 3, idx); status.Code(err) != codes.NotFound {
		t.Fatalf("Fetch without a wait of an unreleased round: %v", err)
	}
	// The caller's own deadline bounds the wait: the gateway answers before it.
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = e.alice.FetchWait(cctx, 3, idx, time.Minute)
	if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded || !bytes.Contains([]byte(st.Message()), []byte("not released")) {
		t.Fatalf("wait past the call's deadline: %v", err)
	}
}

// TestFetchLearnsOfAbortWithoutNotice: the coordinator aborts a round by its status only;
// the gateway's backstop finds it and the parked call ends with ABORTED.
func TestFetchLearnsOfAbortWithoutNotice(t *testing.T) {
	e := startPushGateway(t)
	idx := e.admit(t, 4)
	got := e.parked(t, 4, idx, 15*time.Second)
	_ = e.store.SetStatus(context.Background(), 4, roundstate.StatusAborted)
	select {
	case f := <-got:
		if status.Code(f.err) != codes.Aborted {
			t.Fatalf("Fetch of an aborted round: %v", f.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abort did not reach the parked Fetch")
	}
}

// TestRoundsArePushed: NextRound returns the round as the coordinator publishes it, over
// one Rounds stream — no RoundInfo call, and a later round arrives on the same stream.
func TestRoundsArePushed(t *testing.T) {
	e := startPushGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := e.g.cfg.Deployment.Params
	m0 := func(round uint64) []byte {
		ik, err := mohito.GenerateKey(p.Suite)
		if err != nil {
			t.Fatal(err)
		}
		ri := &mohito.RoundInfo{T: round, Params: p, IntegratorKey: ik.PublicKey(), ShufflerKey: ik.PublicKey()}
		b, err := ri.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := e.g.rounds.put(ctx, 10, m0(10)); err != nil {
		t.Fatal(err)
	}
	ri, err := e.alice.NextRound(ctx, 0, time.Hour)
	if err != nil || ri.T != 10 {
		t.Fatalf("first round: %v, %v", ri, err)
	}
	next := make(chan *mohito.RoundInfo, 1)
	go func() {
		ri, _ := e.alice.NextRound(ctx, 10, time.Hour)
		next <- ri
	}()
	if err := e.g.rounds.put(ctx, 11, m0(11)); err != nil {
		t.Fatal(err)
	}
	if ri := <-next; ri == nil || ri.T != 11 {
		t.Fatalf("next round: %v", ri)
	}
	if n := e.calls("RoundInfo", "OK"); n != 0 {
		t.Fatalf("%v RoundInfo calls; rounds should have been pushed", n)
	}
	if n := testutil.ToFloat64(e.g.cfg.Metrics.GatewayCalls.WithLabelValues("Rounds", "OK")); n > 1 {
		t.Fatalf("%v Rounds streams ended; want the one stream still open", n)
	}
	// RoundInfo answers from the followed round, not the bucket.
	if b, err := e.g.roundInfo(ctx); err != nil || !bytes.Equal(b[:10], m0(11)[:10]) {
		t.Fatalf("RoundInfo: %v", err)
	}
}

// TestUsersOfOneConnectionShareOneRoundsStream: the users (tokens) of one gateway connection
// learn every round from one Rounds stream — the gateway pushes each round once per connection,
// not once per user — while a user on another connection has a stream of its own, and no user
// asks RoundInfo.
func TestUsersOfOneConnectionShareOneRoundsStream(t *testing.T) {
	e := startPushGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bob := client.NewGatewayClient(e.conn, "tok-bob")
	e.putRound(t, ctx, 10)
	for name, c := range map[string]*client.GatewayClient{"alice": e.alice, "bob": bob} {
		if ri, err := c.NextRound(ctx, 0, time.Hour); err != nil || ri.T != 10 {
			t.Fatalf("%s's first round: %v, %v", name, ri, err)
		}
	}
	// Both wait for round 11; a third user, alone on another connection, too.
	other := client.NewGatewayClient(e.dial(t), "tok-alice")
	if ri, err := other.NextRound(ctx, 0, time.Hour); err != nil || ri.T != 10 {
		t.Fatalf("the other connection's first round: %v, %v", ri, err)
	}
	next := make(chan *mohito.RoundInfo, 3)
	for _, c := range []*client.GatewayClient{e.alice, bob, other} {
		go func() {
			ri, _ := c.NextRound(ctx, 10, time.Hour)
			next <- ri
		}()
	}
	e.putRound(t, ctx, 11)
	for range 3 {
		if ri := <-next; ri == nil || ri.T != 11 {
			t.Fatalf("next round: %v", ri)
		}
	}
	if n := e.roundsOpened.Load(); n != 2 {
		t.Fatalf("%d Rounds streams opened for 3 users on 2 connections; want 2, one per connection", n)
	}
	if n := e.calls("RoundInfo", "OK"); n != 0 {
		t.Fatalf("%v RoundInfo calls; rounds should have been pushed", n)
	}
}

// TestSharedRoundFeedOutlivesARefusedToken: a connection's round stream is opened with the
// token of a user that asks for a round; when the gateway refuses that token, the next user
// of the connection to ask still gets the rounds (the stream is opened again with its token).
func TestSharedRoundFeedOutlivesARefusedToken(t *testing.T) {
	e := startPushGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.putRound(t, ctx, 10)
	conn := e.dial(t)
	revoked := client.NewGatewayClient(conn, "tok-revoked")
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() { _, _ = revoked.NextRound(rctx, 0, time.Hour) }()
	testenv.Eventually(t, 10*time.Second, "the revoked token's stream refused", func() error {
		if n := e.calls("Rounds", "Unauthenticated"); n < 1 {
			return fmt.Errorf("%v refused", n)
		}
		return nil
	})
	bob := client.NewGatewayClient(conn, "tok-bob")
	if ri, err := bob.NextRound(ctx, 0, time.Hour); err != nil || ri.T != 10 {
		t.Fatalf("bob's round: %v, %v", ri, err)
	}
	if n := e.calls("RoundInfo", "OK"); n != 0 {
		t.Fatalf("%v RoundInfo calls; bob's round should have been pushed", n)
	}
}

// TestRoundFeedOfAClosedConnectionEnds: once its connection is closed, a connection's round feed
// answers NextRound with the connection's error instead of starting its stream over and over
// until the caller's deadline.
func TestRoundFeedOfAClosedConnectionEnds(t *testing.T) {
	e := startPushGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.putRound(t, ctx, 10)
	conn := e.dial(t)
	c := client.NewGatewayClient(conn, "tok-bob")
	if ri, err := c.NextRound(ctx, 0, time.Hour); err != nil || ri.T != 10 {
		t.Fatalf("first round: %v, %v", ri, err)
	}
	_ = conn.Close()
	_, err := c.NextRound(ctx, 10, time.Hour)
	if status.Code(err) != codes.Canceled || ctx.Err() != nil {
		t.Fatalf("NextRound on a closed connection: %v (context: %v); want the connection's Canceled", err, ctx.Err())
	}
}

// FuzzReleaseNotice: the release notice is network input; it never panics, and it releases a
// round only when it names one with the status done or aborted.
func FuzzReleaseNotice(f *testing.F) {
	f.Add([]byte{})
	f.Add(append([]byte{0, 0, 0, 0, 0, 0, 0, 7}, roundstate.StatusDone...))
	f.Add(append([]byte{0, 0, 0, 0, 0, 0, 0, 7}, "open"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newReleases(roundstate.NewMemory(4))
		r.onNotice(&nats.Msg{Data: data})
		r.mu.Lock()
		defer r.mu.Unlock()
		want := len(data) >= 8 && released(string(data[8:]))
		if (len(r.done) == 1) != want {
			t.Fatalf("notice %x: %d rounds released", data, len(r.done))
		}
	})
}

// TestFetchParksWithoutStatusRead: a long-poll Fetch of a round the gateway has seen open parks
// without reading the round's status from the store (a store read per command was a Redis round
// trip per command); it is still answered by the release notice, an abort written only to the
// store still reaches it through the backstop, and a round the store does not know still ends
// ABORTED (re-send) rather than hanging until the wait expires.
func TestFetchParksWithoutStatusRead(t *testing.T) {
	var failStatus atomic.Bool
	e := startPushGatewayOn(t, func(s roundstate.Store) roundstate.Store { return statusReads{s, &failStatus} })
	ctx := context.Background()
	p := e.g.cfg.Deployment.Params
	e.g.cur.set(wellFormedM0(t, p, 20)) // this gateway follows rounds from 20 on
	if e.g.cur.since() != 20 {
		t.Fatalf("since = %d", e.g.cur.since())
	}
	// Released by the notice, with a store that fails every status read: the call parks (a
	// status read would have answered it at once, from the mailbox) and the notice answers it.
	idx := e.admit(t, 21)
	failStatus.Store(true)
	got := e.parked(t, 21, idx, 15*time.Second)
	m11 := bytes.Repeat([]byte{0x5a}, p.UserResponseSize())
	if err := e.store.PutResponses(ctx, 21, []roundstate.Mail{{User: "alice", Index: idx, M11: m11}}); err != nil {
		t.Fatal(err)
	}
	_ = e.store.SetStatus(ctx, 21, roundstate.StatusDone)
	AnnounceRelease(e.nc, 21, roundstate.StatusDone)
	if f := <-got; f.err != nil || !bytes.Equal(f.m11, m11) {
		t.Fatalf("released round: %x, %v", f.m11, f.err)
	}
	failStatus.Store(false)
	// Aborted in the store only.
	idx = e.admit(t, 22)
	got = e.parked(t, 22, idx, 15*time.Second)
	_ = e.store.SetStatus(ctx, 22, roundstate.StatusAborted)
	if f := <-got; status.Code(f.err) != codes.Aborted {
		t.Fatalf("aborted round: %v", f.err)
	}
	// A round the store does not know (no status at all).
	got = e.parked(t, 40, 0, 15*time.Second)
	if f := <-got; status.Code(f.err) != codes.Aborted {
		t.Fatalf("unknown round: %v", f.err)
	}
}

// statusReads is a store whose status reads fail while fail is set.
type statusReads struct {
	roundstate.Store
	fail *atomic.Bool
}

func (s statusReads) Status(ctx context.Context, t uint64) (string, error) {
	if s.fail.Load() {
		return "", errors.New("no status read expected")
	}
	return s.Store.Status(ctx, t)
}

func wellFormedM0(t *testing.T, p mohito.Params, round uint64) []byte {
	t.Helper()
	ik, err := mohito.GenerateKey(p.Suite)
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&mohito.RoundInfo{T: round, Params: p, IntegratorKey: ik.PublicKey(), ShufflerKey: ik.PublicKey()}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCurrentRoundFollowedAfterBucketRecreated: a memory bucket lost with its stream (every
// NATS node restarted at once) is created again by the coordinator with sequences from 1, while
// the gateway's watch resumes at the old stream's next sequence and would see nothing for as
// many puts — in the cluster e2e the gateways served one round for over two minutes. The
// gateway's read of the current key catches the new round and restarts the watch.
func TestCurrentRoundFollowedAfterBucketRecreated(t *testing.T) {
	e := startPushGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := e.g.cfg.Deployment.Params
	ik, err := mohito.GenerateKey(p.Suite)
	if err != nil {
		t.Fatal(err)
	}
	m0 := func(round uint64) []byte {
		b, err := (&mohito.RoundInfo{T: round, Params: p, IntegratorKey: ik.PublicKey(), ShufflerKey: ik.PublicKey()}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	current := func(want uint64) func() error {
		return func() error {
			if got, _, _ := e.g.cur.get(); got != want {
				return fmt.Errorf("current round %d, want %d", got, want)
			}
			return nil
		}
	}
	for r := uint64(1); r <= 30; r++ {
		if err := e.g.rounds.put(ctx, r, m0(r)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "round 30 followed", current(30))

	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, contract.BucketRoundInfo); err != nil {
		t.Fatal(err)
	}
	rounds, err := openRoundInfos(ctx, js) // the coordinator's re-creation
	if err != nil {
		t.Fatal(err)
	}
	for r := uint64(31); r <= 33; r++ {
		if err := rounds.put(ctx, r, m0(r)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("round %d followed from the recreated bucket", r), current(r))
	}
}
