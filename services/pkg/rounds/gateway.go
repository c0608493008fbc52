package rounds

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/roundstate"
)

// The user API is gRPC with a hand-written codec: every request and response
// is one of the protocol's fixed-size binary envelopes (M0, M1, M11) or a
// 12-byte (t, index) pair, so message sizes on the wire are constant per kind
// without a schema compiler in the build (the envelopes already have exact
// layouts in pkg/mohito; a protobuf wrapper would only add a length prefix).
const (
	ServiceName      = "obscura.mohito.v1.Gateway"
	methodRoundInfo  = "/" + ServiceName + "/RoundInfo"
	methodSubmit     = "/" + ServiceName + "/Submit"
	methodFetch      = "/" + ServiceName + "/Fetch"
	codecName        = "mohito-envelope"
	authorizationKey = "authorization"
)

// rawCodec passes envelopes through unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("mohito codec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("mohito codec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return codecName }

// Codec returns the envelope codec for grpc.ForceCodec / ForceServerCodec.
func Codec() rawCodec { return rawCodec{} }

// GatewayConfig configures a gateway replica.
type GatewayConfig struct {
	Deployment Deployment
	JS         jetstream.JetStream // integrator account
	Store      roundstate.Store
	Tokens     map[string]string // access token → user (OAuth stand-in, spec §3.3)
	Log        *slog.Logger
	Metrics    *Metrics
}

// Gateway is one replica of the user API. Replicas share nothing but Redis
// (index assignment, q, admitted M1s) and NATS.
type Gateway struct {
	cfg  GatewayConfig
	info jetstream.KeyValue
	mu   sync.Mutex
	ri   map[uint64]*mohito.RoundInfo
}

// NewGateway opens the round-info bucket.
func NewGateway(ctx context.Context, cfg GatewayConfig) (*Gateway, error) {
	kv, err := natsx.EnsureKV(ctx, cfg.JS, BucketRoundInfo, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return &Gateway{cfg: cfg, info: kv, ri: map[uint64]*mohito.RoundInfo{}}, nil
}

// Register adds the service to a gRPC server.
func (g *Gateway) Register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "RoundInfo", Handler: g.unary(g.roundInfo)},
			{MethodName: "Submit", Handler: g.unary(g.submit)},
			{MethodName: "Fetch", Handler: g.unary(g.fetch)},
		},
	}, g)
}

// NewGRPCServer returns a server that speaks the envelope codec.
func NewGRPCServer() *grpc.Server {
	return grpc.NewServer(grpc.ForceServerCodec(Codec()), grpc.MaxRecvMsgSize(1<<20))
}

type unaryFn func(ctx context.Context, user string, req []byte) ([]byte, error)

func (g *Gateway) unary(f unaryFn) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var req []byte
		if err := dec(&req); err != nil {
			return nil, err
		}
		user, err := g.authenticate(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := f(ctx, user, req)
		if err != nil {
			return nil, err
		}
		return &resp, nil
	}
}

func (g *Gateway) authenticate(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(authorizationKey) {
		if u, ok := g.cfg.Tokens[v]; ok {
			return u, nil
		}
	}
	return "", status.Error(codes.Unauthenticated, "unknown access token")
}

// RoundInfoFor returns round t's info from the bucket (cached).
func (g *Gateway) roundInfoFor(ctx context.Context, t uint64) (*mohito.RoundInfo, error) {
	g.mu.Lock()
	ri := g.ri[t]
	g.mu.Unlock()
	if ri != nil {
		return ri, nil
	}
	e, err := g.info.Get(ctx, "t."+strconv.FormatUint(t, 10))
	if err != nil {
		return nil, err
	}
	if ri, err = mohito.ParseRoundInfo(e.Value()); err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.ri[t] = ri
	if len(g.ri) > 64 {
		for k := range g.ri {
			if k+32 < t {
				delete(g.ri, k)
			}
		}
	}
	g.mu.Unlock()
	return ri, nil
}

func (g *Gateway) roundInfo(ctx context.Context, _ string, _ []byte) ([]byte, error) {
	e, err := g.info.Get(ctx, "current")
	if err != nil {
		return nil, status.Error(codes.Unavailable, "no open round yet")
	}
	return e.Value(), nil
}

// submit admits M1 (spec C1–C2): exact size and an open round, at most q per
// user, index from Redis, then M2 streamed to V* at once.
func (g *Gateway) submit(ctx context.Context, user string, m1 []byte) ([]byte, error) {
	start := time.Now()
	p := g.cfg.Deployment.Params
	if len(m1) != p.SubmissionSize() {
		g.cfg.Metrics.Commands.WithLabelValues("rejected").Inc()
		return nil, status.Error(codes.InvalidArgument, "submission has the wrong size")
	}
	t := binary.BigEndian.Uint64(m1[2:10])
	ri, err := g.roundInfoFor(ctx, t)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, "round closed or unknown: retry in the current round")
	}
	outer, _, err := mohito.ParseSubmission(p, t, m1)
	if err != nil {
		g.cfg.Metrics.Commands.WithLabelValues("rejected").Inc()
		return nil, status.Error(codes.InvalidArgument, "malformed submission")
	}
	idx, err := g.cfg.Store.Admit(ctx, t, user, p.Q, m1)
	switch {
	case errors.Is(err, roundstate.ErrClosed):
		return nil, status.Error(codes.FailedPrecondition, "round closed: retry in the current round")
	case errors.Is(err, roundstate.ErrRateLimit):
		return nil, status.Error(codes.ResourceExhausted, "more than q commands this round")
	case err != nil:
		return nil, status.Error(codes.Unavailable, "round state unavailable")
	}
	g.cfg.Metrics.Commands.WithLabelValues("admitted").Inc()
	m2, err := mohito.MarshalForward(p, t, idx, outer)
	if err == nil {
		// Streamed to V* as it arrives (spec §3.5); if this fails the
		// coordinator re-forwards at close from the admitted M1s.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = natsx.Publish(pctx, g.cfg.JS, toVendor(int(ri.Shuffler), t, kindForward), fwdID(t, idx), m2, nil)
		cancel()
		if err == nil {
			_ = g.cfg.Store.MarkForwarded(ctx, t, idx)
		}
	}
	g.cfg.Metrics.StageSeconds.WithLabelValues("admit").Observe(time.Since(start).Seconds())
	out := make([]byte, 12)
	binary.BigEndian.PutUint64(out, t)
	binary.BigEndian.PutUint32(out[8:], idx)
	return out, nil
}

func fwdID(t uint64, i uint32) string { return fmt.Sprintf("fwd-%d-%d", t, i) }

// fetch returns M11 from the user's mailbox (spec O13); Aborted means the
// round was aborted and the command must be re-sent.
func (g *Gateway) fetch(ctx context.Context, user string, req []byte) ([]byte, error) {
	if len(req) != 12 {
		return nil, status.Error(codes.InvalidArgument, "fetch takes (t, index)")
	}
	t := binary.BigEndian.Uint64(req)
	i := binary.BigEndian.Uint32(req[8:])
	m11, err := g.cfg.Store.Response(ctx, user, t, i)
	if err == nil {
		return m11, nil
	}
	if !errors.Is(err, roundstate.ErrNotFound) {
		return nil, status.Error(codes.Unavailable, "mailbox unavailable")
	}
	if st, _ := g.cfg.Store.Status(ctx, t); st == roundstate.StatusAborted {
		return nil, status.Error(codes.Aborted, "round aborted: re-send the command")
	}
	return nil, status.Error(codes.NotFound, "no response yet")
}

// GatewayClient is the user's side of the API.
type GatewayClient struct {
	conn  *grpc.ClientConn
	token string
}

// NewGatewayClient wraps a connection with an access token.
func NewGatewayClient(conn *grpc.ClientConn, token string) *GatewayClient {
	return &GatewayClient{conn: conn, token: token}
}

// DialGateway connects to a gateway on addr (loopback, plaintext: TLS is
// terminated by Envoy at the edge, DESIGN.md).
func DialGateway(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()), grpc.WithDefaultCallOptions(grpc.ForceCodec(Codec())))
}

func (c *GatewayClient) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, authorizationKey, c.token)
	var resp []byte
	if err := c.conn.Invoke(ctx, method, &req, &resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// RoundInfo returns the current round's M0.
func (c *GatewayClient) RoundInfo(ctx context.Context) (*mohito.RoundInfo, error) {
	b, err := c.call(ctx, methodRoundInfo, nil)
	if err != nil {
		return nil, err
	}
	return mohito.ParseRoundInfo(b)
}

// Submit sends M1 and returns (t, index).
func (c *GatewayClient) Submit(ctx context.Context, m1 []byte) (uint64, uint32, error) {
	b, err := c.call(ctx, methodSubmit, m1)
	if err != nil {
		return 0, 0, err
	}
	if len(b) != 12 {
		return 0, 0, errors.New("malformed submit response")
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), nil
}

// Fetch returns M11 for (t, index), or a gRPC status NotFound (not yet) or
// Aborted (re-send).
func (c *GatewayClient) Fetch(ctx context.Context, t uint64, index uint32) ([]byte, error) {
	req := make([]byte, 12)
	binary.BigEndian.PutUint64(req, t)
	binary.BigEndian.PutUint32(req[8:], index)
	return c.call(ctx, methodFetch, req)
}
