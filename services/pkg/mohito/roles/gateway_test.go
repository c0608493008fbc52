package roles

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	mohitov1 "github.com/obscura-iot/obscura/services/proto/obscura/mohito/v1"
)

// testParams are the golden deployment's round parameters.
func testParams(tb testing.TB) mohito.Params {
	tb.Helper()
	d, err := LoadDeployment("testdata/deployment.json")
	if err != nil {
		tb.Fatal(err)
	}
	return d.Params
}

// wellFormedM1 is a submission for round t that passes the gateway's
// envelope checks (header and exact size; the ciphertext is not opened
// there).
func wellFormedM1(p mohito.Params, t uint64) []byte {
	m1 := make([]byte, p.SubmissionSize())
	m1[0], m1[1] = 1, byte(mohito.KindSubmission)
	binary.BigEndian.PutUint64(m1[2:], t)
	return m1
}

// startGateway serves a gateway with no NATS or Redis behind it over an
// in-memory connection: enough for everything that is rejected before round
// state is touched.
func startGateway(t *testing.T) (*Gateway, *client.GatewayClient, *client.GatewayClient) {
	t.Helper()
	g, conn := startGatewayConn(t)
	return g, client.NewGatewayClient(conn, "tok-alice"), client.NewGatewayClient(conn, "tok-mallory")
}

// startGatewayConn is startGateway's server and the connection to it, for tests that send
// what the client never would.
func startGatewayConn(t *testing.T) (*Gateway, *grpc.ClientConn) {
	t.Helper()
	d, err := LoadDeployment("testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{
		cfg:    GatewayConfig{Deployment: d, Tokens: map[string]string{"tok-alice": "alice"}, Metrics: NewMetrics(nil)},
		rounds: &roundInfos{m: map[uint64]*mohito.RoundInfo{}},
		rel:    newReleases(nil),
		cur:    newCurrentRound(),
	}
	l := bufconn.Listen(1 << 20)
	srv := NewGRPCServer()
	g.Register(srv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return g, conn
}

func TestSubmitRejectsWrongSizeEnvelope(t *testing.T) {
	g, alice, _ := startGateway(t)
	p := g.cfg.Deployment.Params
	n := p.SubmissionSize()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, size := range []int{0, 1, n - 1, n + 1, 2 * n} {
		m1 := wellFormedM1(p, 7)
		if size <= n {
			m1 = m1[:size]
		} else {
			m1 = append(m1, make([]byte, size-n)...)
		}
		_, _, err := alice.Submit(ctx, m1)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument {
			t.Fatalf("%d-byte M1: got %v, want InvalidArgument", size, err)
		}
		want := "submission is " + strconv.Itoa(size) + " bytes; the round parameters fix M1 at exactly " + strconv.Itoa(n) + " bytes"
		if st.Message() != want {
			t.Fatalf("%d-byte M1: message %q, want %q", size, st.Message(), want)
		}
		if got := testutil.ToFloat64(g.cfg.Metrics.Commands.WithLabelValues("rejected")); got != float64(i+1) {
			t.Fatalf("rejected counter %v after %d rejections", got, i+1)
		}
	}
	// Right size, wrong kind: malformed, also before any round state.
	bad := wellFormedM1(p, 7)
	bad[1] = byte(mohito.KindRoundInfo)
	if _, _, err := alice.Submit(ctx, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("wrong-kind M1: %v", err)
	}
}

func TestGatewayRejectsUnknownToken(t *testing.T) {
	_, _, mallory := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := mallory.RoundInfo(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("RoundInfo: %v", err)
	}
	if _, _, err := mallory.Submit(ctx, nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Submit: %v", err)
	}
	if _, err := mallory.Fetch(ctx, 1, 0); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Fetch: %v", err)
	}
}

func TestFetchRequiresTicket(t *testing.T) {
	_, conn := startGatewayConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	alice := mohitov1.NewGatewayClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, contract.AuthorizationMetadata, "tok-alice")
	one := uint64(1)
	for _, req := range []*mohitov1.FetchRequest{{}, {T: &one}} {
		_, err := alice.Fetch(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Fetch(%v): %v, want InvalidArgument", req, err)
		}
	}
}

// TestWireSizesConstant: every message of one kind has one encoded size —
// the ticket fields are fixed-width with explicit presence, so t and index
// (even 0) never change the length on the wire.
func TestWireSizesConstant(t *testing.T) {
	p := testParams(t)
	size := func(m proto.Message) int {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	var sub, fetch, rounds []int
	for _, tk := range [][2]uint64{{0, 0}, {1, 0}, {1, 1}, {300, 70000}, {math.MaxUint64, math.MaxUint32}} {
		tt, idx := tk[0], uint32(tk[1])
		sub = append(sub, size(&mohitov1.SubmitResponse{T: &tt, Index: &idx}))
		for _, w := range []uint32{0, 1, 15000, math.MaxUint32} {
			fetch = append(fetch, size(&mohitov1.FetchRequest{T: &tt, Index: &idx, WaitMs: &w}))
		}
		rounds = append(rounds, size(&mohitov1.RoundsRequest{After: &tt}))
	}
	var m1s []int
	for _, tt := range []uint64{1, math.MaxUint64} {
		m1s = append(m1s, size(&mohitov1.SubmitRequest{Submission: wellFormedM1(p, tt)}))
	}
	for name, sizes := range map[string][]int{"SubmitResponse": sub, "FetchRequest": fetch, "RoundsRequest": rounds, "SubmitRequest": m1s} {
		for _, s := range sizes {
			if s != sizes[0] {
				t.Fatalf("%s sizes vary: %v", name, sizes)
			}
		}
	}
	if sub[0] != 14 {
		t.Fatalf("ticket is %d bytes on the wire, want 14", sub[0])
	}
}

// Fuzz targets for the user API's decoders of network input: protobuf
// unmarshal of each request (server side) and response (client side) into
// the validation the gateway or client applies. None may panic; whatever is
// accepted must have exactly the fixed size.

func FuzzSubmitRequest(f *testing.F) {
	p := testParams(f)
	for _, m1 := range [][]byte{nil, {1, 2}, wellFormedM1(p, 1), wellFormedM1(p, 42)[:p.SubmissionSize()-1]} {
		b, _ := proto.Marshal(&mohitov1.SubmitRequest{Submission: m1})
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req mohitov1.SubmitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		round, m1, outer, err := submissionFrom(p, &req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("rejection with code %v: %v", status.Code(err), err)
			}
			return
		}
		if len(m1) != p.SubmissionSize() || len(outer) != p.OuterSize() {
			t.Fatalf("accepted M1 of %d bytes (outer %d)", len(m1), len(outer))
		}
		if named, _ := mohito.EnvelopeRound(m1); round != named || !bytes.Equal(m1, req.GetSubmission()) {
			t.Fatal("accepted M1 does not match the request")
		}
	})
}

func FuzzFetchRequest(f *testing.F) {
	for _, tk := range [][2]uint64{{0, 0}, {5, 3}, {math.MaxUint64, math.MaxUint32}} {
		tt, idx := tk[0], uint32(tk[1])
		b, _ := proto.Marshal(&mohitov1.FetchRequest{T: &tt, Index: &idx})
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x09, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req mohitov1.FetchRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		tt, idx, err := fetchTicket(&req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("rejection with code %v: %v", status.Code(err), err)
			}
			return
		}
		if tt != req.GetT() || idx != req.GetIndex() {
			t.Fatal("ticket does not match the request")
		}
	})
}

func FuzzRoundsResponse(f *testing.F) {
	f.Add([]byte{})
	b, _ := proto.Marshal(&mohitov1.RoundsResponse{RoundInfo: make([]byte, mohito.RoundInfoSize(mohito.SuiteX25519, 3))})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp mohitov1.RoundsResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		ri, err := mohito.ParseRoundInfo(resp.GetRoundInfo())
		if err == nil && len(resp.GetRoundInfo()) != mohito.RoundInfoSize(ri.Params.Suite, ri.Params.Vendors) {
			t.Fatalf("accepted M0 of %d bytes", len(resp.GetRoundInfo()))
		}
	})
}

func FuzzRoundInfoResponse(f *testing.F) {
	f.Add([]byte{})
	b, _ := proto.Marshal(&mohitov1.RoundInfoResponse{RoundInfo: make([]byte, mohito.RoundInfoSize(mohito.SuiteX25519, 1))})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp mohitov1.RoundInfoResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		ri, err := mohito.ParseRoundInfo(resp.GetRoundInfo())
		if err == nil && len(resp.GetRoundInfo()) != mohito.RoundInfoSize(ri.Params.Suite, ri.Params.Vendors) {
			t.Fatalf("accepted M0 of %d bytes", len(resp.GetRoundInfo()))
		}
	})
}

// TestClosedRoundRefusalCarriesCurrentRound: a Submit for a round that closed (a later round
// has been current at this gateway for over a quarter of a period) is refused without asking
// the store (this gateway has none: asking it would panic), and the refusal's trailer carries
// the current round's M0 and its age in six digits, so the client re-seals for the current
// round without a RoundInfo call.
func TestClosedRoundRefusalCarriesCurrentRound(t *testing.T) {
	g, conn := startGatewayConn(t)
	p := g.cfg.Deployment.Params
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m0 := wellFormedM0(t, p, 12)
	g.cur.set(m0)
	g.cur.mu.Lock()
	g.cur.at = time.Now().Add(-g.cfg.Deployment.Round) // current for a whole period
	g.cur.mu.Unlock()
	ri10, err := mohito.ParseRoundInfo(wellFormedM0(t, p, 10))
	if err != nil {
		t.Fatal(err)
	}
	g.rounds.m[10] = ri10 // a round the gateway knows: only the closed check refuses it

	raw := mohitov1.NewGatewayClient(conn)
	var tr metadata.MD
	_, err = raw.Submit(metadata.AppendToOutgoingContext(ctx, contract.AuthorizationMetadata, "tok-alice"),
		&mohitov1.SubmitRequest{Submission: wellFormedM1(p, 10)}, grpc.Trailer(&tr))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("submit to closed round 10: %v", err)
	}
	if v := tr.Get(contract.RoundInfoMetadata); len(v) != 1 || v[0] != string(m0) {
		t.Fatalf("trailer round info: %d values, want round 12's M0", len(v))
	}
	age := tr.Get(contract.RoundAgeMetadata)
	if len(age) != 1 || len(age[0]) != 6 {
		t.Fatalf("trailer round age %q, want six digits", age)
	}
	if ms, _ := strconv.Atoi(age[0]); time.Duration(ms)*time.Millisecond < g.cfg.Deployment.Round {
		t.Fatalf("round age %s ms, want at least the %v it has been current", age[0], g.cfg.Deployment.Round)
	}
	if got := testutil.ToFloat64(g.cfg.Metrics.Rejected.WithLabelValues("round_closed")); got != 1 {
		t.Fatalf("round_closed rejections %v, want 1", got)
	}

	// The client takes the round from the refusal: NextRound after 10 answers 12, and no
	// RoundInfo call is made.
	alice := client.NewGatewayClient(conn, "tok-alice")
	if _, _, err := alice.Submit(ctx, wellFormedM1(p, 10)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("client submit: %v", err)
	}
	ri, err := alice.NextRound(ctx, 10, time.Hour)
	if err != nil || ri.T != 12 {
		t.Fatalf("next round after the refusal: %v, %v", ri, err)
	}
	if n := testutil.ToFloat64(g.cfg.Metrics.GatewayCalls.WithLabelValues("RoundInfo", "OK")); n != 0 {
		t.Fatalf("%v RoundInfo calls; the refusal carried the round", n)
	}
}
