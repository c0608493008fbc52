package roles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

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
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)))
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
