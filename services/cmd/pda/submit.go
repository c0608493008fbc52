package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	pdaclient "github.com/obscura-iot/obscura/services/pkg/pda/client"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// progressBar draws "[#####.....]  50%  500/1000" on w.
func progressBar(w io.Writer) pdaclient.Progress {
	return func(done, total int) {
		const width = 30
		n := width * done / max(total, 1)
		fmt.Fprintf(w, "\r[%s%s] %3d%%  %d/%d", strings.Repeat("#", n), strings.Repeat(".", width-n), 100*done/max(total, 1), done, total)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}

func runSubmit(args []string) error {
	f := newFlags("submit")
	var (
		proxy   string
		cert    string
		key     string
		ca      string
		keyType string
		batch   int
	)
	f.String(&proxy, "proxy", "https://127.0.0.1:8443", "proxy ingress URL")
	f.String(&cert, "cert", "participant.crt", "participant certificate (its CN is the identity)")
	f.String(&key, "key", "participant.key", "participant key")
	f.String(&ca, "ca", "ca.crt", "CA of the proxy's certificate")
	f.String(&keyType, "key-type", "ip", "ip|domain|url|string|hex")
	f.Int(&batch, "batch", 500, "items per request (≤ 1000)")
	if err := f.Parse(args); err != nil {
		return configErr(err)
	}
	if len(f.Args()) != 1 {
		return configErr(errors.New("usage: pda submit [flags] observations.csv   (lines: key[,value]; - for stdin)"))
	}
	in := os.Stdin
	if path := f.Args()[0]; path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		in = file
	}
	obs, err := pdaclient.ReadObservations(in, keyType)
	if err != nil {
		return err
	}
	tc, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return configErr(fmt.Errorf("participant certificate: %w", err))
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return configErr(fmt.Errorf("--ca: %w", err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return configErr(errors.New("--ca: no certificate"))
	}
	c := pdaclient.NewClient(proxy, &tls.Config{Certificates: []tls.Certificate{tc}, RootCAs: pool, MinVersion: tls.VersionTLS13})
	c.Batch = batch
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	rep, err := c.Submit(ctx, obs, progressBar(os.Stderr))
	if err != nil {
		return err
	}
	fmt.Printf("window %d: %d accepted, rejected %v\n", rep.Window, rep.Accepted, rep.Rejected)
	return nil
}
