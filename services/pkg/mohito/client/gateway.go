package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
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
	rounds roundFeed
}

// NewGatewayClient wraps a connection with an access token.
func NewGatewayClient(conn grpc.ClientConnInterface, token string) *GatewayClient {
	c := &GatewayClient{rpc: mohitov1.NewGatewayClient(conn), token: token}
	c.rounds.changed = make(chan struct{})
	return c
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
	resp, err := c.rpc.RoundInfo(c.auth(ctx), &mohitov1.RoundInfoRequest{})
	if err != nil {
		return nil, err
	}
	return mohito.ParseRoundInfo(resp.GetRoundInfo())
}

// Submit sends M1 and returns (t, index).
func (c *GatewayClient) Submit(ctx context.Context, m1 []byte) (uint64, uint32, error) {
	resp, err := c.rpc.Submit(c.auth(ctx), &mohitov1.SubmitRequest{Submission: m1})
	if err != nil {
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
