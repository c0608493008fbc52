package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
)

// Default paths of the files the operator mounts (docs/services.md).
const (
	DefaultDeploymentPath = "/etc/obscura/deployment.json"
	DefaultKeyPath        = "/etc/obscura/keys/private.key"
	DefaultTokensPath     = "/etc/obscura/tokens/tokens.json"
	DefaultDevicesPath    = "/etc/obscura/devices/devices.json"
)

// errConfig marks a configuration error: the process exits with status 2.
var errConfig = errors.New("invalid configuration")

// newFlags returns the flag set of a role daemon: every flag -x-y falls back
// to OBSCURA_X_Y unless it names its variables.
func newFlags(role string) *envflag.Set { return envflag.New(role, "OBSCURA_") }

// parseFlags parses a role's command line; it takes no positional arguments.
func parseFlags(f *envflag.Set, args []string) error {
	err := f.Parse(args)
	if err == nil && len(f.Args()) > 0 {
		err = fmt.Errorf("unexpected arguments %q", f.Args())
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	return nil
}

// Common is the configuration every role shares.
type Common struct {
	DeploymentPath   string
	NATSURL          string
	NATSUser         string
	NATSPasswordFile string
	NATSCreds        string
	MetricsAddr      string
	HealthAddr       string
	AddrFile         string
	LogLevel         string

	Deployment   roles.Deployment `json:"-"`
	natsPassword string
}

func (c *Common) bind(f *envflag.Set) {
	f.String(&c.DeploymentPath, "deployment", DefaultDeploymentPath, "deployment JSON (ConfigMap <round>-deployment, key deployment.json)")
	f.String(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	f.String(&c.NATSUser, "nats-user", "", "NATS user of the party's account")
	f.String(&c.NATSPasswordFile, "nats-password-file", "", "file holding the NATS user's password")
	f.String(&c.NATSCreds, "nats-creds", "", "NATS .creds file (instead of user and password)")
	f.String(&c.MetricsAddr, "metrics-addr", ":9090", "Prometheus /metrics listen address")
	f.String(&c.HealthAddr, "health-addr", ":8081", "/healthz and /readyz listen address")
	f.String(&c.AddrFile, "addr-file", "", "write the bound health=, metrics= (and gateway grpc=) addresses here, for listen addresses with port 0 (hostNetwork); mohito probe reads it")
	f.String(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
}

func (c *Common) validate() []error {
	var errs []error
	d, err := roles.LoadDeployment(c.DeploymentPath)
	if err != nil {
		errs = append(errs, fmt.Errorf("--deployment: %w", err))
	}
	c.Deployment = d
	if c.NATSURL == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	switch {
	case c.NATSCreds != "" && (c.NATSUser != "" || c.NATSPasswordFile != ""):
		errs = append(errs, errors.New("set either --nats-creds or --nats-user with --nats-password-file, not both"))
	case c.NATSCreds != "":
		if _, err := os.Stat(c.NATSCreds); err != nil {
			errs = append(errs, fmt.Errorf("--nats-creds: %w", err))
		}
	case c.NATSUser != "" || c.NATSPasswordFile != "":
		if c.NATSUser == "" || c.NATSPasswordFile == "" {
			errs = append(errs, errors.New("--nats-user and --nats-password-file go together"))
		} else if b, err := os.ReadFile(c.NATSPasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("--nats-password-file: %w", err))
		} else {
			c.natsPassword = strings.TrimRight(string(b), "\r\n")
		}
	}
	for name, addr := range map[string]string{"--metrics-addr": c.MetricsAddr, "--health-addr": c.HealthAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q must be debug, info, warn or error", c.LogLevel))
	}
	return errs
}

func joinConfig(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", errConfig, errors.Join(errs...))
}

// RoleKey is the key ring of a role that holds a private key: where it comes from (pkg/keys), how
// it is reloaded live (roles.KeyReloader) and how long superseded epochs are kept (W, spec O16).
type RoleKey struct {
	Source          keys.Source
	ReloadInterval  time.Duration
	ActivationDelay time.Duration
	Retention       int

	ring *mohito.KeyRing // by epoch
}

func (k *RoleKey) bind(f *envflag.Set, whose string) {
	k.Source.Bind(f, DefaultKeyPath, whose)
	f.Duration(&k.ReloadInterval, "key-reload-interval", roles.DefaultKeyReloadInterval,
		"re-read the key source this often and stage new epochs (0: never; rotation then needs a restart)")
	f.Duration(&k.ActivationDelay, "key-activation-delay", roles.DefaultKeyActivationDelay,
		"name and announce a newly loaded key epoch only after this delay, longer than the time the source takes to reach every replica")
	f.Int(&k.Retention, "key-retention-rounds", roles.DefaultKeyRetention,
		"keep a superseded key epoch this many rounds after the first round naming a newer one (W)")
}

// validateAndLoad checks the key settings and, only when the rest of the configuration (errs)
// and the source are valid, loads the key ring once, so a bad config never reaches Vault.
func (k *RoleKey) validateAndLoad(errs []error, suite mohito.Suite) []error {
	if k.ReloadInterval < 0 {
		errs = append(errs, errors.New("--key-reload-interval must be ≥ 0"))
	}
	if k.ActivationDelay < roles.MinKeyActivationDelay {
		errs = append(errs, fmt.Errorf("--key-activation-delay must be ≥ %s", roles.MinKeyActivationDelay))
	}
	if k.Retention < mohito.MinKeyRetention {
		errs = append(errs, fmt.Errorf("--key-retention-rounds must be ≥ %d (a round is still decrypted while the next collects)", mohito.MinKeyRetention))
	}
	if err := k.Source.Validate(); err != nil {
		return append(errs, err)
	}
	if len(errs) > 0 {
		return errs
	}
	if err := k.load(suite); err != nil {
		return append(errs, err)
	}
	return nil
}

// load reads the key ring (one key per epoch, spec O16) once, from --key-file (a file: epoch 0;
// a directory: every epoch-<n>.key) or Vault; every epoch found at start is active. Errors name
// the source, never the key.
func (k *RoleKey) load(suite mohito.Suite) error {
	ctx, cancel := context.WithTimeout(context.Background(), keyLoadTimeout)
	defer cancel()
	epochs, err := k.Source.LoadRing(ctx)
	if err != nil {
		return err
	}
	ring, err := mohito.NewKeyRing(suite, k.Retention)
	if err != nil {
		return err
	}
	for _, e := range epochs {
		pk, err := mohito.ParsePrivateKey(suite, e.Key)
		clear(e.Key)
		if err == nil {
			err = ring.Add(e.N, pk)
		}
		if err != nil {
			return fmt.Errorf("%s: key epoch %d is not a private key of the deployment's suite", &k.Source, e.N)
		}
	}
	k.ring = ring
	return nil
}

// reloader returns the live reload of the ring, or nil when --key-reload-interval is 0.
func (k *RoleKey) reloader(d *daemon, onActivate func(context.Context, uint32)) *roles.KeyReloader {
	if k.ReloadInterval == 0 {
		return nil
	}
	return &roles.KeyReloader{Ring: k.ring, Load: k.Source.LoadRing, Interval: k.ReloadInterval,
		ActivationDelay: k.ActivationDelay, OnActivate: onActivate, Log: d.log, Metrics: d.metrics}
}

// keyLoadTimeout bounds loading the key at start (a Vault login and one read).
const keyLoadTimeout = time.Minute

func checkRedis(addr string) error {
	if addr == "" {
		return errors.New("--redis-addr is required")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--redis-addr %q: %w", addr, err)
	}
	return nil
}

// GatewayConfig configures `mohito gateway`.
type GatewayConfig struct {
	Common
	RedisAddr  string
	GRPCAddr   string
	TokensFile string
	ReusePort  bool

	tokens map[string]string
}

// CoordinatorConfig configures `mohito coordinator`.
type CoordinatorConfig struct {
	Common
	RedisAddr string
	Key       RoleKey
	MaxRounds int
	ReplicaID string
}

// DecryptWorkerConfig configures `mohito decrypt-worker`.
type DecryptWorkerConfig struct {
	Common
	Key RoleKey
}

// EncoderConfig configures `mohito encoder`.
type EncoderConfig struct {
	Common
	RedisAddr string
	Partition string // an integer or "auto"

	partition int
}

// ResponderConfig configures `mohito responder`.
type ResponderConfig struct {
	Common
	RedisAddr string
}

// ShufflerConfig configures `mohito shuffler`.
type ShufflerConfig struct {
	Common
	Key      RoleKey
	Vendor   int
	FakePool int
}

// VendorAgentConfig configures `mohito vendor-agent`.
type VendorAgentConfig struct {
	Common
	Key         RoleKey
	Vendor      int
	DevicesFile string

	devices []roles.RegisteredDevice
}

func (c *GatewayConfig) validate() error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("--grpc-addr %q: %w", c.GRPCAddr, err))
	}
	c.tokens = map[string]string{}
	if b, err := os.ReadFile(c.TokensFile); err == nil {
		if err := json.Unmarshal(b, &c.tokens); err != nil {
			errs = append(errs, fmt.Errorf("--tokens-file %s: want a JSON object {\"<token>\": \"<user>\"}: %w", c.TokensFile, err))
		}
	} else if c.TokensFile != DefaultTokensPath || !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("--tokens-file: %w", err))
	}
	return joinConfig(errs)
}

func (c *CoordinatorConfig) validate() error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	if c.MaxRounds < 0 {
		errs = append(errs, errors.New("--max-rounds must be ≥ 0"))
	}
	errs = c.Key.validateAndLoad(errs, c.Deployment.Params.Suite)
	if c.ReplicaID == "" {
		c.ReplicaID = podName()
	}
	return joinConfig(errs)
}

func (c *DecryptWorkerConfig) validate() error {
	errs := c.Common.validate()
	errs = c.Key.validateAndLoad(errs, c.Deployment.Params.Suite)
	return joinConfig(errs)
}

var ordinal = regexp.MustCompile(`-([0-9]+)$`)

// partitionOf resolves --partition: an integer, or "auto" = the ordinal
// suffix of $POD_NAME (StatefulSet pod x-encoder-3 → 3), else of the hostname.
func partitionOf(s string) (int, error) {
	if s != "auto" {
		p, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("--partition %q must be an integer or auto", s)
		}
		return p, nil
	}
	for _, name := range []string{os.Getenv("POD_NAME"), hostname()} {
		if m := ordinal.FindStringSubmatch(name); m != nil {
			return strconv.Atoi(m[1])
		}
	}
	return 0, fmt.Errorf("--partition auto: neither $POD_NAME nor the hostname %q ends in -<ordinal>", hostname())
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func podName() string {
	if p := os.Getenv("POD_NAME"); p != "" {
		return p
	}
	return fmt.Sprintf("%s-%d", hostname(), os.Getpid())
}

func (c *EncoderConfig) validate() error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	p, err := partitionOf(c.Partition)
	if err != nil {
		errs = append(errs, err)
	} else if c.Deployment.Encoders > 0 && (p < 0 || p >= c.Deployment.Encoders) {
		errs = append(errs, fmt.Errorf("partition %d is outside the deployment's %d encoders", p, c.Deployment.Encoders))
	}
	c.partition = p
	return joinConfig(errs)
}

func (c *ResponderConfig) validate() error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	return joinConfig(errs)
}

func checkVendor(v int, d *roles.Deployment) error {
	if v < 0 {
		return errors.New("--vendor (OBSCURA_VENDOR_INDEX) is required")
	}
	if d.Params.Vendors > 0 && v >= d.Params.Vendors {
		return fmt.Errorf("--vendor %d is outside the deployment's %d vendors", v, d.Params.Vendors)
	}
	return nil
}

func (c *ShufflerConfig) validate() error {
	errs := c.Common.validate()
	if err := checkVendor(c.Vendor, &c.Deployment); err != nil {
		errs = append(errs, err)
	}
	if c.FakePool < 1 {
		errs = append(errs, errors.New("--fake-pool must be ≥ 1"))
	}
	errs = c.Key.validateAndLoad(errs, c.Deployment.Params.Suite)
	return joinConfig(errs)
}

// deviceEntry is one line of the vendor's device registry: the device id on
// the vendor's channel and k_D^prf (spec §3.4; never k_D^ae).
type deviceEntry struct {
	ID  string `json:"id"`
	PRF []byte `json:"prf"` // base64 in JSON, 32 bytes
}

var deviceID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func (c *VendorAgentConfig) validate() error {
	errs := c.Common.validate()
	if err := checkVendor(c.Vendor, &c.Deployment); err != nil {
		errs = append(errs, err)
	}
	if b, err := os.ReadFile(c.DevicesFile); err == nil {
		var list []deviceEntry
		if err := json.Unmarshal(b, &list); err != nil {
			errs = append(errs, fmt.Errorf("--devices-file %s: want a JSON list of {\"id\", \"prf\"}: %w", c.DevicesFile, err))
		}
		seen := map[string]bool{}
		for i, d := range list {
			if !deviceID.MatchString(d.ID) || seen[d.ID] || len(d.PRF) != mohito.KeySize {
				errs = append(errs, fmt.Errorf("--devices-file entry %d: id must be unique [A-Za-z0-9_-]{1,128} and prf %d bytes", i, mohito.KeySize))
				continue
			}
			seen[d.ID] = true
			var r roles.RegisteredDevice
			r.ID = d.ID
			copy(r.PRF[:], d.PRF)
			c.devices = append(c.devices, r)
		}
	} else if c.DevicesFile != DefaultDevicesPath || !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("--devices-file: %w", err))
	}
	errs = c.Key.validateAndLoad(errs, c.Deployment.Params.Suite)
	return joinConfig(errs)
}

// roleConfig is a role's *…Config.
type roleConfig interface{ validate() error }

// parseRole binds, parses and validates the flags of role into its Config struct.
func parseRole(role string, args []string) (any, error) {
	f, cfg, err := bindRole(role)
	if err != nil {
		return nil, err
	}
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// bindRole binds the flags of role (docs/services.md) to a new Config struct.
func bindRole(role string) (*envflag.Set, roleConfig, error) {
	f := newFlags(role)
	var (
		gw  GatewayConfig
		co  CoordinatorConfig
		dw  DecryptWorkerConfig
		en  EncoderConfig
		re  ResponderConfig
		sh  ShufflerConfig
		va  VendorAgentConfig
		cfg roleConfig
	)
	redis := func(p *string) {
		f.String(p, "redis-addr", "", "the integrator's Redis (host:port)")
	}
	key := func(p *RoleKey, whose string) { p.bind(f, whose) }
	vendor := func(p *int) {
		f.Int(p, "vendor", -1, "this vendor's index in the deployment", "OBSCURA_VENDOR_INDEX")
	}
	switch role {
	case "gateway":
		gw.Common.bind(f)
		redis(&gw.RedisAddr)
		f.String(&gw.GRPCAddr, "grpc-addr", ":50051", "user API (gRPC) listen address", "OBSCURA_GRPC_ADDR", "OBSCURA_LISTEN")
		f.String(&gw.TokensFile, "tokens-file", DefaultTokensPath, "JSON object access token → user")
		f.Bool(&gw.ReusePort, "reuse-port", false, "set SO_REUSEPORT on the gRPC listener, so several gateways (hostNetwork replicas) share one address")
		cfg = &gw
	case "coordinator":
		co.Common.bind(f)
		redis(&co.RedisAddr)
		key(&co.Key, "sk_I (the coordinator publishes pk_I)")
		f.Int(&co.MaxRounds, "max-rounds", 0, "stop opening rounds after this many (0: forever)")
		f.String(&co.ReplicaID, "replica-id", "", "leader-lease identity (default $POD_NAME or hostname-pid)")
		cfg = &co
	case "decrypt-worker":
		dw.Common.bind(f)
		key(&dw.Key, "sk_I")
		cfg = &dw
	case "encoder":
		en.Common.bind(f)
		redis(&en.RedisAddr)
		f.String(&en.Partition, "partition", "auto", "encoder partition: an integer, or auto (ordinal suffix of $POD_NAME, else the hostname)")
		cfg = &en
	case "responder":
		re.Common.bind(f)
		redis(&re.RedisAddr)
		cfg = &re
	case "shuffler":
		sh.Common.bind(f)
		key(&sh.Key, "sk_V")
		vendor(&sh.Vendor)
		f.Int(&sh.FakePool, "fake-pool", 64, "pre-generated fakes kept per vendor (spec G7)", "OBSCURA_FAKE_POOL", "OBSCURA_FAKE_POOL_SIZE")
		cfg = &sh
	case "vendor-agent":
		va.Common.bind(f)
		key(&va.Key, "sk_V (the agent announces pk_V)")
		vendor(&va.Vendor)
		f.String(&va.DevicesFile, "devices-file", DefaultDevicesPath, "JSON list of the vendor's devices {\"id\", \"prf\": base64 k_D^prf}")
		cfg = &va
	default:
		return nil, nil, fmt.Errorf("%w: unknown role %q", errConfig, role)
	}
	return f, cfg, nil
}
