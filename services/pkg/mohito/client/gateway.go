package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	mohitov1 "github.com/obscura-iot/obscura/services/proto/obscura/mohito/v1"
)

// GatewayClient is the user's side of the API: the generated stub plus the
// user's access token.
type GatewayClient struct {
	rpc    mohitov1.GatewayClient
	token  string
	rounds *roundFeed // shared by every GatewayClient of the connection (feedOf)
}

// NewGatewayClient wraps a connection with an access token. The GatewayClients of one
// *grpc.ClientConn share its round feed: one Rounds stream for all their users.
func NewGatewayClient(conn grpc.ClientConnInterface, token string) *GatewayClient {
	rpc := mohitov1.NewGatewayClient(conn)
	return &GatewayClient{rpc: rpc, token: token, rounds: feedOf(conn, rpc)}
}

// DialGateway connects to a gateway on addr (loopback, plaintext: TLS is
// terminated by Envoy at the edge, DESIGN.md).
func DialGateway(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageSize)))
}

func (c *GatewayClient) auth(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, contract.AuthorizationMetadata, c.token)
}

// RoundInfo returns the current round's M0.
func (c *GatewayClient) RoundInfo(ctx context.Context) (*mohito.RoundInfo, error) {
	ri, _, err := c.roundInfo(ctx)
	return ri, err
}

// roundInfo returns the current round's M0 and how long ago it opened at the gateway (-1:
// the gateway did not say).
func (c *GatewayClient) roundInfo(ctx context.Context) (*mohito.RoundInfo, time.Duration, error) {
	var hdr metadata.MD
	resp, err := c.rpc.RoundInfo(c.auth(ctx), &mohitov1.RoundInfoRequest{}, grpc.Header(&hdr))
	if err != nil {
		return nil, 0, err
	}
	ri, err := mohito.ParseRoundInfo(resp.GetRoundInfo())
	return ri, roundAgeOf(hdr), err
}

// roundAgeOf reads RoundAgeMetadata (-1: absent or malformed).
func roundAgeOf(md metadata.MD) time.Duration {
	v := md.Get(contract.RoundAgeMetadata)
	if len(v) != 1 {
		return -1
	}
	ms, err := strconv.ParseUint(v[0], 10, 32)
	if err != nil {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// Submit sends M1 and returns (t, index). A submission refused because its round closed
// (FailedPrecondition) may bring the gateway's current round back in the trailer: the
// client's round feed takes it, so the next NextRound returns it without a RoundInfo call.
func (c *GatewayClient) Submit(ctx context.Context, m1 []byte) (uint64, uint32, error) {
	var tr metadata.MD
	resp, err := c.rpc.Submit(c.auth(ctx), &mohitov1.SubmitRequest{Submission: m1}, grpc.Trailer(&tr))
	if err != nil {
		if v := tr.Get(contract.RoundInfoMetadata); len(v) == 1 {
			if ri, perr := mohito.ParseRoundInfo([]byte(v[0])); perr == nil {
				c.rounds.offer(ri, roundAgeOf(tr))
			}
		}
		return 0, 0, err
	}
	return submitTicket(resp)
}

// submitTicket validates a decoded SubmitResponse: both halves of the ticket
// must be present.
func submitTicket(resp *mohitov1.SubmitResponse) (uint64, uint32, error) {
	if resp.T == nil || resp.Index == nil {
		return 0, 0, errors.New("malformed submit response: incomplete ticket")
	}
	return *resp.T, *resp.Index, nil
}

// Fetch returns M11 for (t, index) at once, or a gRPC status NotFound (not
// yet) or Aborted (re-send). The caller checks M11's size when it opens it.
func (c *GatewayClient) Fetch(ctx context.Context, t uint64, index uint32) ([]byte, error) {
	return c.FetchWait(ctx, t, index, 0)
}

// FetchWait is Fetch as a long-poll: the gateway holds the call until round
// t's responses are released, for at most wait (which the gateway caps near
// 20 s); DeadlineExceeded from the gateway means the wait passed first.
func (c *GatewayClient) FetchWait(ctx context.Context, t uint64, index uint32, wait time.Duration) ([]byte, error) {
	ms := uint32(min(max(wait, 0), time.Hour) / time.Millisecond)
	resp, err := c.rpc.Fetch(c.auth(ctx), &mohitov1.FetchRequest{T: &t, Index: &index, WaitMs: &ms})
	if err != nil {
		return nil, err
	}
	return resp.GetResponse(), nil
}

// DialGatewayTLS connects to the gateway through the TLS edge (Envoy) at
// addr, with tc as the client's TLS configuration (roots and server name;
// TLS 1.2 at least). Inside the cluster, where the gateway serves plaintext
// on loopback, use [DialGateway].
func DialGatewayTLS(addr string, tc *tls.Config) (*grpc.ClientConn, error) {
	if tc == nil {
		return nil, errors.New("dial gateway over TLS: no TLS configuration")
	}
	tc = tc.Clone()
	tc.MinVersion = max(tc.MinVersion, tls.VersionTLS12)
	return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageSize)))
}

// EdgeTLSConfig is the client TLS configuration for the edge: the server's
// certificate must chain to a certificate in the PEM file caFile (empty: the
// system roots) and name serverName (empty: the host of the dialled address).
func EdgeTLSConfig(caFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	tc.RootCAs = pool
	return tc, nil
}
