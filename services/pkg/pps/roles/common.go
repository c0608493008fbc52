// Package roles runs the PPS parties as services (shared/specs/publish-process-subscribe.md
// §5.3–§5.4): the broker (trust domain B: NATS JetStream, its own Redis, the evaluator) and
// the garbler (trust domain G: no NATS credentials at all, its own Redis with every ratchet
// sealed by Vault Transit, its Ed25519 identity in Vault Transit). The two talk only over the
// ppsv1.Garbler gRPC service with mutual TLS, each domain trusting only the other's CA; the
// garbled circuit crosses it as a chunked, gate-ordered stream evaluated while it arrives.
//
// This file holds what both roles share; each role's own files are named for it
// (broker*.go, garbler*.go, with the garbler's sealer*.go and signer*.go).
package roles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadCAPool reads a PEM bundle of CA certificates: the other trust domain's CA, and only
// it (never the system roots).
func LoadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate", path)
	}
	return pool, nil
}

// ServerTLS is the mutual-TLS configuration of the link's server (the garbler): its
// certificate, and client certificates required and verified against the client domain's
// CA only (TLS 1.3).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || clientCAFile == "" {
		return nil, errors.New("mutual TLS needs a certificate, its key and the peer domain's CA")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	pool, err := LoadCAPool(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

// ClientTLS is the mutual-TLS configuration of the link's client (the broker): its
// certificate, and the server verified against the server domain's CA only (TLS 1.3).
// serverName overrides the name checked in the server's certificate ("" for the dialled host).
func ClientTLS(certFile, keyFile, serverCAFile, serverName string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || serverCAFile == "" {
		return nil, errors.New("mutual TLS needs a certificate, its key and the peer domain's CA")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	pool, err := LoadCAPool(serverCAFile)
	if err != nil {
		return nil, fmt.Errorf("server CA: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: serverName,
		MinVersion: tls.VersionTLS13}, nil
}
