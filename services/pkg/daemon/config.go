package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// EnvPrefix is the prefix of every flag's environment fallback.
const EnvPrefix = "OBSCURA_"

// Default listen addresses of the port scheme.
const (
	DefaultMetricsAddr = ":9090"
	DefaultHealthAddr  = ":8081"
)

// ErrConfig marks a configuration error: the process exits with status 2.
var ErrConfig = errors.New("invalid configuration")

// ConfigError marks err (if any) as a configuration error.
func ConfigError(err error) error {
	if err == nil || errors.Is(err, ErrConfig) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConfig, err)
}

// JoinConfig joins configuration errors into one ErrConfig (nil for none).
func JoinConfig(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// NewFlags returns the flag set of a subcommand: every flag --x-y falls back to OBSCURA_X_Y.
func NewFlags(cmd string) *envflag.Set { return envflag.New(cmd, EnvPrefix) }

// ParseFlags parses the command line of a subcommand that takes no positional arguments; a
// bad flag, a malformed environment value or a stray argument is a configuration error.
func ParseFlags(f *envflag.Set, args []string) error {
	err := f.Parse(args)
	if err == nil && len(f.Args()) > 0 {
		err = fmt.Errorf("unexpected arguments %q", f.Args())
	}
	return ConfigError(err)
}

// Common is the configuration every role daemon shares.
type Common struct {
	NATSURL          string
	NATSUser         string
	NATSPasswordFile string
	NATSCreds        string
	NATSReplicas     int
	MetricsAddr      string
	HealthAddr       string
	AddrFile         string
	LogLevel         string

	natsPassword string
}

// Bind registers the common flags.
func (c *Common) Bind(f *envflag.Set) {
	f.String(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	f.String(&c.NATSUser, "nats-user", "", "NATS user of the party's account (with --nats-password-file)")
	f.String(&c.NATSPasswordFile, "nats-password-file", "", "file holding the NATS user's password")
	f.String(&c.NATSCreds, "nats-creds", "", "NATS .creds file (instead of user and password)")
	f.Int(&c.NATSReplicas, "nats-replicas", 1, "replicas of every JetStream stream, key-value bucket and object store the role creates: 1 on a single server, 3 on a three-node JetStream cluster (at most the cluster's nodes)")
	f.String(&c.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "Prometheus /metrics listen address")
	f.String(&c.HealthAddr, "health-addr", DefaultHealthAddr, "/healthz and /readyz listen address")
	f.String(&c.AddrFile, "addr-file", "", "write the bound health= and metrics= (and a listener's) addresses here, for listen addresses with port 0 (hostNetwork); `probe` reads it")
	f.String(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
}

// Validate checks the common settings without reading anything.
func (c *Common) Validate() []error {
	var errs []error
	if c.NATSURL == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	switch {
	case c.NATSCreds != "" && (c.NATSUser != "" || c.NATSPasswordFile != ""):
		errs = append(errs, errors.New("set either --nats-creds or --nats-user with --nats-password-file, not both"))
	case (c.NATSUser == "") != (c.NATSPasswordFile == ""):
		errs = append(errs, errors.New("--nats-user and --nats-password-file go together"))
	}
	if err := natsx.ValidateReplicas(c.NATSReplicas); err != nil {
		errs = append(errs, fmt.Errorf("--nats-replicas: %w", err))
	}
	for _, a := range []struct{ name, addr string }{{"--metrics-addr", c.MetricsAddr}, {"--health-addr", c.HealthAddr}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.name, a.addr, err))
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q must be debug, info, warn or error", c.LogLevel))
	}
	return errs
}

// LoadSecrets reads the NATS credentials named by the flags: the password file, or checks
// that the .creds file is there. Errors name the file, never its contents.
func (c *Common) LoadSecrets() []error {
	switch {
	case c.NATSCreds != "":
		if _, err := os.Stat(c.NATSCreds); err != nil {
			return []error{fmt.Errorf("--nats-creds: %w", err)}
		}
	case c.NATSPasswordFile != "":
		b, err := os.ReadFile(c.NATSPasswordFile)
		if err != nil {
			return []error{fmt.Errorf("--nats-password-file: %w", err)}
		}
		c.natsPassword = strings.TrimRight(string(b), "\r\n")
		if c.natsPassword == "" {
			return []error{fmt.Errorf("--nats-password-file %s: the file is empty", c.NATSPasswordFile)}
		}
	}
	return nil
}
