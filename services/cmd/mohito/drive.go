package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// edge is how a client outside the cluster reaches the gateway: through the
// TLS edge (Envoy), or in plaintext only when asked to.
type edge struct {
	gateway, caFile, serverName string
	plaintext                   bool
}

func (e *edge) bind(f *envflag.Set) {
	f.String(&e.gateway, "gateway", "", "the gateway's TLS edge, host:port (required)")
	f.String(&e.caFile, "ca-file", "", "PEM CA bundle the edge's certificate chains to (empty: system roots)")
	f.String(&e.serverName, "server-name", "", "name in the edge's certificate (empty: the host of --gateway)")
	f.Bool(&e.plaintext, "insecure-plaintext", false, "speak plaintext gRPC to --gateway (a gateway without its edge; tests only)")
}

func (e *edge) validate() []error {
	var errs []error
	if _, _, err := net.SplitHostPort(e.gateway); err != nil {
		errs = append(errs, fmt.Errorf("--gateway %q must be host:port", e.gateway))
	}
	if e.plaintext && (e.caFile != "" || e.serverName != "") {
		errs = append(errs, errors.New("--insecure-plaintext excludes --ca-file and --server-name"))
	}
	return errs
}

func (e *edge) dial() (*grpc.ClientConn, error) {
	if e.plaintext {
		return client.DialGateway(e.gateway)
	}
	tc, err := client.EdgeTLSConfig(e.caFile, e.serverName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	return client.DialGatewayTLS(e.gateway, tc)
}

// readJSON decodes the JSON file path into v; errors name the file and the
// format wanted, never the content.
func readJSON(flag, path, want string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: want %s: %w", flag, path, want, err)
	}
	return nil
}

// DriveConfig configures `mohito drive`.
type DriveConfig struct {
	edge
	TokensFile, DevicesFile, MQTTAddr, DeviceCredentialsFile string
	Progress                                                 time.Duration
	// UsersPerConn users share one connection to the edge (--users-per-connection).
	UsersPerConn int
	opts         loadgen.DriveOptions
}

func parseDrive(args []string) (*DriveConfig, error) {
	f := envflag.New("drive", "MOHITO_")
	var c DriveConfig
	o := &c.opts
	c.edge.bind(f)
	f.String(&c.TokensFile, "tokens-file", "", `JSON object {"<token>": "<user>"} (the gateway's tokens file; required)`)
	f.String(&c.DevicesFile, "devices-file", "", `JSON list [{"id", "vendor", "secret"}] written by mohito provision (required)`)
	f.String(&c.MQTTAddr, "mqtt", "", "NATS's MQTT listener host:port (required)")
	f.String(&c.DeviceCredentialsFile, "device-credentials-file", "", `JSON object {"<device id>": {"user", "password"}}: each device's own MQTT login (required)`)
	f.Int(&o.Users, "users", 0, "concurrent users, each with its own token (0: one per token)")
	f.Int(&c.UsersPerConn, "users-per-connection", 1, "users sharing one connection to the edge (1: each its own, as real users; the edge allows 100 concurrent streams per connection and a user holds up to three)")
	f.Duration(&o.Duration, "duration", 0, "stop issuing commands after this long (0: no limit; set this or --commands)")
	f.Int(&o.Commands, "commands", 0, "stop after this many commands (0: no limit)")
	f.Duration(&o.Think, "think", 0, "pause between a user's commands")
	f.Duration(&o.Poll, "poll", client.DefaultPoll, "fallback only: how often a user polls when the gateway neither pushes rounds nor holds Fetch (stay under the edge's per-client rate limit); responses and rounds are otherwise pushed")
	f.Int(&o.PayloadSize, "payload", 32, "command payload bytes (the answer is ack:<payload>, within the response size)")
	f.Duration(&o.Timeout, "timeout", time.Minute, "budget of one command, retries included")
	f.Duration(&o.Progress, "progress", 5*time.Second, "progress line interval")
	f.String(&o.JSONPath, "json", "", "write the summary as JSON here")
	f.String(&o.CSVPath, "csv", "", "write the per-round table as CSV here")
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	errs := c.edge.validate()
	for flag, v := range map[string]string{"--tokens-file": c.TokensFile, "--devices-file": c.DevicesFile, "--mqtt": c.MQTTAddr, "--device-credentials-file": c.DeviceCredentialsFile} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", flag))
		}
	}
	if o.Duration <= 0 && o.Commands <= 0 {
		errs = append(errs, errors.New("set --duration or --commands"))
	}
	if o.Users < 0 || o.PayloadSize < 0 || o.Progress <= 0 || o.Timeout <= 0 || c.UsersPerConn < 1 {
		errs = append(errs, errors.New("--users, --payload ≥ 0 and --progress, --timeout, --users-per-connection > 0 are required"))
	}
	if len(errs) > 0 {
		return nil, joinConfig(errs)
	}
	if err := readJSON("--tokens-file", c.TokensFile, `{"<token>": "<user>"}`, &o.Tokens); err != nil {
		errs = append(errs, err)
	}
	if err := readJSON("--devices-file", c.DevicesFile, `[{"id", "vendor", "secret"}]`, &o.Devices); err != nil {
		errs = append(errs, err)
	}
	if err := readJSON("--device-credentials-file", c.DeviceCredentialsFile, `{"<device id>": {"user", "password"}}`, &o.DeviceLogins); err != nil {
		errs = append(errs, err)
	}
	for _, d := range o.Devices {
		if _, err := d.Credentials(); err != nil {
			errs = append(errs, fmt.Errorf("--devices-file: %w", err))
			break
		}
		if _, ok := o.DeviceLogins[d.ID]; !ok && o.DeviceLogins != nil {
			errs = append(errs, fmt.Errorf("--device-credentials-file: no login for device %s of --devices-file", d.ID))
			break
		}
	}
	if o.Users > len(o.Tokens) {
		errs = append(errs, fmt.Errorf("--users %d exceeds the %d tokens of --tokens-file", o.Users, len(o.Tokens)))
	}
	o.MQTTAddr = c.MQTTAddr
	return &c, joinConfig(errs)
}

// runDrive is `mohito drive`: loadgen against an existing deployment, from
// outside (users through the TLS edge, devices over MQTT). It exits 1 unless
// every command was delivered exactly once and answered.
func runDrive(args []string, out io.Writer) error {
	c, err := parseDrive(args)
	if err != nil {
		return err
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	c.opts.Conn, c.opts.Out = conn, out
	users := c.opts.Users
	if users == 0 {
		users = len(c.opts.Tokens)
	}
	for range (users + c.UsersPerConn - 1) / c.UsersPerConn {
		uc, err := c.dial()
		if err != nil {
			return err
		}
		defer uc.Close()
		c.opts.Conns = append(c.opts.Conns, uc)
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	_, err = loadgen.Drive(ctx, c.opts)
	return err
}

// tokenFrom reads a token file: the token itself (surrounding whitespace
// ignored), or a tokens file {"<token>": "<user>"}, of which the first token
// in sort order is taken.
func tokenFrom(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	text := strings.TrimSpace(string(b))
	if strings.HasPrefix(text, "{") {
		var m map[string]string
		if err := json.Unmarshal([]byte(text), &m); err != nil || len(m) == 0 {
			return "", fmt.Errorf("--token-file %s: a JSON tokens file must be a non-empty object {\"<token>\": \"<user>\"}", path)
		}
		first := ""
		for k := range m {
			if first == "" || k < first {
				first = k
			}
		}
		return first, nil
	}
	if text == "" || strings.ContainsAny(text, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token", path)
	}
	return text, nil
}
