package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestPushedResponsesThroughTheEdge: the real gateway behind the chart's Envoy. A user's
// Rounds stream carries a round's M0 through the edge as the round opens; a long-poll Fetch
// is held through Envoy for several seconds and answered the moment its round is released;
// a long-poll that outlives its wait ends with DEADLINE_EXCEEDED from the gateway, not with
// an edge timeout — the chart's route timeout is longer than the gateway's cap on a held
// call (roles.MaxWait).
func TestPushedResponsesThroughTheEdge(t *testing.T) {
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
	d := sim.SmallDeployment([]int{2, 2}, 256, time.Second)
	store := roundstate.NewMemory(16)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	gw, err := roles.NewGateway(ctx, roles.GatewayConfig{Deployment: d, JS: js, Store: store, Tokens: map[string]string{"tok-alice": "alice"}, Metrics: roles.NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(testenv.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := roles.NewGRPCServer()
	gw.Register(srv)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	e, files, envoyYAML := startEdge(t, l.Addr().String(), "-f", "charts/obscura/values-local.yaml", "--set", "edge.rateLimit.enabled=false")
	m := regexp.MustCompile(`route: \{cluster: gateway, timeout: (\S+)\}`).FindStringSubmatch(envoyYAML)
	if m == nil {
		t.Fatalf("no gateway route timeout in the rendered envoy.yaml:\n%s", envoyYAML)
	}
	if rt, err := time.ParseDuration(m[1]); err != nil || rt < roles.MaxWait+5*time.Second {
		t.Fatalf("the edge's route timeout %s must exceed the gateway's longest held call %v by a margin", m[1], roles.MaxWait)
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(files["ca.crt"])
	conn, err := client.DialGatewayTLS(e.ListenerAddr(0), &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	alice := client.NewGatewayClient(conn, "tok-alice")

	// A round opens: its M0 reaches the user on the Rounds stream.
	ik, err := mohito.GenerateKey(d.Params.Suite)
	if err != nil {
		t.Fatal(err)
	}
	const round = 5
	m0, err := (&mohito.RoundInfo{T: round, Params: d.Params, IntegratorKey: ik.PublicKey(), ShufflerKey: ik.PublicKey()}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := natsx.EnsureMemoryKV(ctx, js, contract.BucketRoundInfo, 10*time.Minute) // as the coordinator makes it
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *mohito.RoundInfo, 1)
	go func() {
		ri, _ := alice.NextRound(ctx, 0, time.Hour) // no RoundInfo poll: an hour
		got <- ri
	}()
	for _, k := range []string{"t.5", "current"} {
		if _, err := kv.Put(ctx, k, m0); err != nil {
			t.Fatal(err)
		}
	}
	if ri := <-got; ri == nil || ri.T != round {
		t.Fatalf("round pushed through the edge: %v", ri)
	}

	// A long-poll held through Envoy, answered on release.
	_ = store.SetStatus(ctx, round, roundstate.StatusOpen)
	idx, err := store.Admit(ctx, round, "alice", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	type fetched struct {
		m11 []byte
		err error
	}
	out := make(chan fetched, 1)
	go func() {
		b, err := alice.FetchWait(ctx, round, idx, 15*time.Second)
		out <- fetched{b, err}
	}()
	hold := 3 * time.Second
	select {
	case f := <-out:
		t.Fatalf("Fetch through the edge returned before the release: %v", f.err)
	case <-time.After(hold):
	}
	m11 := bytes.Repeat([]byte{7}, d.Params.UserResponseSize())
	_ = store.PutResponses(ctx, round, []roundstate.Mail{{User: "alice", Index: idx, M11: m11}})
	_ = store.SetStatus(ctx, round, roundstate.StatusDone)
	roles.AnnounceRelease(nc, round, roundstate.StatusDone)
	select {
	case f := <-out:
		if f.err != nil || !bytes.Equal(f.m11, m11) {
			t.Fatalf("held Fetch through the edge: %d bytes, %v", len(f.m11), f.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held Fetch not answered after the release")
	}

	// A wait that passes: the gateway's DEADLINE_EXCEEDED with its message, through Envoy.
	idx2, _ := store.Admit(ctx, round+1, "alice", 1, nil)
	_ = store.SetStatus(ctx, round+1, roundstate.StatusOpen)
	_, err = alice.FetchWait(ctx, round+1, idx2, 2*time.Second)
	if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded || st.Message() != "round 6 not released within the wait of 2s: fetch again" {
		t.Fatalf("expired wait through the edge: %v", err)
	}
}
