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
	"time"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
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
var errConfig = daemon.ErrConfig

// newFlags returns the flag set of a subcommand: every flag -x-y falls back to OBSCURA_X_Y
// unless it names its variables.
func newFlags(cmd string) *envflag.Set { return daemon.NewFlags(cmd) }

// parseFlags parses a subcommand's command line; it takes no positional arguments.
func parseFlags(f *envflag.Set, args []string) error { return daemon.ParseFlags(f, args) }

// Common is the configuration every role shares: the daemon's (NATS, ports, logs) and the
// deployment document.
type Common struct {
	daemon.Common
	DeploymentPath string

	Deployment roles.Deployment `json:"-"`
}

func (c *Common) bind(f *envflag.Set) {
	f.String(&c.DeploymentPath, "deployment", DefaultDeploymentPath, "deployment JSON (ConfigMap <round>-deployment, key deployment.json)")
	c.Common.Bind(f)
}

func (c *Common) common() *Common { return c }

func (c *Common) validate() []error { return c.Common.Validate() }

// load reads the deployment document and the NATS password.
func (c *Common) load() []error {
	var errs []error
	d, err := roles.LoadDeployment(c.DeploymentPath)
	if err != nil {
		errs = append(errs, fmt.Errorf("--deployment: %w", err))
	}
	c.Deployment = d
	return append(errs, c.Common.LoadSecrets()...)
}

func joinConfig(errs []error) error { return daemon.JoinConfig(errs) }

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

// validate checks the key settings without reading the source.
func (k *RoleKey) validate() []error {
	var errs []error
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
		errs = append(errs, err)
	}
	return errs
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
func (k *RoleKey) reloader(d *roleEnv, onActivate func(context.Context, uint32)) *roles.KeyReloader {
	if k.ReloadInterval == 0 {
		return nil
	}
	return &roles.KeyReloader{Ring: k.ring, Load: k.Source.LoadRing, Interval: k.ReloadInterval,
		ActivationDelay: k.ActivationDelay, OnActivate: onActivate, Log: d.Log, Metrics: d.metrics}
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
	DeviceRate  float64 // answers a second each device may publish (0: roles.DeviceRate of the round)
	DeviceBurst int

	devices []roles.RegisteredDevice
}

func (c *GatewayConfig) validate() []error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("--grpc-addr %q: %w", c.GRPCAddr, err))
	}
	return errs
}

// load reads the deployment, the NATS password and the access tokens.
func (c *GatewayConfig) load() []error {
	errs := c.Common.load()
	c.tokens = map[string]string{}
	if b, err := os.ReadFile(c.TokensFile); err == nil {
		if err := json.Unmarshal(b, &c.tokens); err != nil {
			errs = append(errs, fmt.Errorf("--tokens-file %s: want a JSON object {\"<token>\": \"<user>\"}: %w", c.TokensFile, err))
		}
	} else if c.TokensFile != DefaultTokensPath || !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("--tokens-file: %w", err))
	}
	return errs
}

func (c *CoordinatorConfig) validate() []error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	if c.MaxRounds < 0 {
		errs = append(errs, errors.New("--max-rounds must be ≥ 0"))
	}
	if c.ReplicaID == "" {
		c.ReplicaID = podName()
	}
	return append(errs, c.Key.validate()...)
}

// load reads the deployment, the NATS password and sk_I.
func (c *CoordinatorConfig) load() []error { return loadWithKey(c.Common.load(), &c.Key, &c.Common) }

func (c *DecryptWorkerConfig) validate() []error {
	return append(c.Common.validate(), c.Key.validate()...)
}

// load reads the deployment, the NATS password and sk_I.
func (c *DecryptWorkerConfig) load() []error { return loadWithKey(c.Common.load(), &c.Key, &c.Common) }

// loadWithKey loads a role's key ring once the rest of its files loaded (errs empty), so a
// broken configuration never reaches Vault.
func loadWithKey(errs []error, k *RoleKey, c *Common) []error {
	if len(errs) > 0 {
		return errs
	}
	if err := k.load(c.Deployment.Params.Suite); err != nil {
		return []error{err}
	}
	return nil
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

func (c *EncoderConfig) validate() []error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	p, err := partitionOf(c.Partition)
	if err != nil {
		errs = append(errs, err)
	}
	c.partition = p
	return errs
}

// load reads the deployment and the NATS password and checks the partition against the
// deployment's encoders.
func (c *EncoderConfig) load() []error {
	errs := c.Common.load()
	if p := c.partition; len(errs) == 0 && c.Deployment.Encoders > 0 && (p < 0 || p >= c.Deployment.Encoders) {
		errs = append(errs, fmt.Errorf("partition %d is outside the deployment's %d encoders", p, c.Deployment.Encoders))
	}
	return errs
}

func (c *ResponderConfig) validate() []error {
	errs := c.Common.validate()
	if err := checkRedis(c.RedisAddr); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// loadVendor loads a vendor role's deployment and NATS password and checks its index against
// the deployment's vendors.
func loadVendor(c *Common, v int) []error {
	errs := c.load()
	if len(errs) == 0 && c.Deployment.Params.Vendors > 0 && v >= c.Deployment.Params.Vendors {
		errs = append(errs, fmt.Errorf("--vendor %d is outside the deployment's %d vendors", v, c.Deployment.Params.Vendors))
	}
	return errs
}

func checkVendor(v int) []error {
	if v < 0 {
		return []error{errors.New("--vendor (OBSCURA_VENDOR_INDEX) is required")}
	}
	return nil
}

func (c *ShufflerConfig) validate() []error {
	errs := append(c.Common.validate(), checkVendor(c.Vendor)...)
	if c.FakePool < 1 {
		errs = append(errs, errors.New("--fake-pool must be ≥ 1"))
	}
	return append(errs, c.Key.validate()...)
}

// load reads the deployment, the NATS password and sk_V.
func (c *ShufflerConfig) load() []error {
	return loadWithKey(loadVendor(&c.Common, c.Vendor), &c.Key, &c.Common)
}

// deviceEntry is one line of the vendor's device registry: the device id on
// the vendor's channel and k_D^prf (spec §3.4; never k_D^ae).
type deviceEntry struct {
	ID  string `json:"id"`
	PRF []byte `json:"prf"` // base64 in JSON, 32 bytes
}

func (c *VendorAgentConfig) validate() []error {
	errs := append(append(c.Common.validate(), checkVendor(c.Vendor)...), c.Key.validate()...)
	if c.DeviceRate < 0 || c.DeviceBurst < 1 {
		errs = append(errs, errors.New("--device-rate must be ≥ 0 (0: 4 answers a round period) and --device-burst ≥ 1"))
	}
	return errs
}

// load reads the deployment, the NATS password, the device registry and sk_V.
func (c *VendorAgentConfig) load() []error {
	errs := loadVendor(&c.Common, c.Vendor)
	if b, err := os.ReadFile(c.DevicesFile); err == nil {
		var list []deviceEntry
		if err := json.Unmarshal(b, &list); err != nil {
			errs = append(errs, fmt.Errorf("--devices-file %s: want a JSON list of {\"id\", \"prf\"}: %w", c.DevicesFile, err))
		}
		seen := map[string]bool{}
		for i, d := range list {
			if contract.ValidDeviceID(d.ID) != nil || seen[d.ID] || len(d.PRF) != mohito.KeySize {
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
	return loadWithKey(errs, &c.Key, &c.Common)
}

// parseRole binds, parses and validates the flags of role into its Config struct, then reads
// the files they name.
func parseRole(role string, args []string) (roleConfig, error) {
	f, cfg, err := bindRole(role)
	if err != nil {
		return nil, err
	}
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	if err := joinConfig(cfg.validate()); err != nil {
		return nil, err
	}
	if err := joinConfig(cfg.load()); err != nil {
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
	case contract.RoleGateway:
		gw.Common.bind(f)
		redis(&gw.RedisAddr)
		f.String(&gw.GRPCAddr, "grpc-addr", ":50051", "user API (gRPC) listen address", "OBSCURA_GRPC_ADDR", "OBSCURA_LISTEN")
		f.String(&gw.TokensFile, "tokens-file", DefaultTokensPath, "JSON object access token → user")
		f.Bool(&gw.ReusePort, "reuse-port", false, "set SO_REUSEPORT on the gRPC listener, so several gateways (hostNetwork replicas) share one address")
		cfg = &gw
	case contract.RoleCoordinator:
		co.Common.bind(f)
		redis(&co.RedisAddr)
		key(&co.Key, "sk_I (the coordinator publishes pk_I)")
		f.Int(&co.MaxRounds, "max-rounds", 0, "stop once the series has opened this many rounds, counted in the status bucket over every coordinator (0: forever)")
		f.String(&co.ReplicaID, "replica-id", "", "leader-lease identity (default $POD_NAME or hostname-pid)")
		cfg = &co
	case contract.RoleDecryptWorker:
		dw.Common.bind(f)
		key(&dw.Key, "sk_I")
		cfg = &dw
	case contract.RoleEncoder:
		en.Common.bind(f)
		redis(&en.RedisAddr)
		f.String(&en.Partition, "partition", "auto", "encoder partition: an integer, or auto (ordinal suffix of $POD_NAME, else the hostname)")
		cfg = &en
	case contract.RoleResponder:
		re.Common.bind(f)
		redis(&re.RedisAddr)
		cfg = &re
	case contract.RoleShuffler:
		sh.Common.bind(f)
		key(&sh.Key, "sk_V")
		vendor(&sh.Vendor)
		f.Int(&sh.FakePool, "fake-pool", 64, "pre-generated fakes kept per vendor (spec G7)", "OBSCURA_FAKE_POOL", "OBSCURA_FAKE_POOL_SIZE")
		cfg = &sh
	case contract.RoleVendorAgent:
		va.Common.bind(f)
		key(&va.Key, "sk_V (the agent announces pk_V)")
		vendor(&va.Vendor)
		f.String(&va.DevicesFile, "devices-file", DefaultDevicesPath, "JSON list of the vendor's devices {\"id\", \"prf\": base64 k_D^prf}")
		f.Float64(&va.DeviceRate, "device-rate", 0, "answers a second each device may publish, beyond its burst (0: 4 per round period, at least 1); the excess is dropped and counted")
		f.Int(&va.DeviceBurst, "device-burst", roles.DefaultDeviceBurst, "answers each device may publish at once")
		cfg = &va
	default:
		return nil, nil, fmt.Errorf("%w: unknown role %q", errConfig, role)
	}
	return f, cfg, nil
}

// load reads the deployment and the NATS password.
func (c *ResponderConfig) load() []error { return c.Common.load() }

func (c *GatewayConfig) redis() string       { return c.RedisAddr }
func (c *CoordinatorConfig) redis() string   { return c.RedisAddr }
func (c *DecryptWorkerConfig) redis() string { return "" }
func (c *EncoderConfig) redis() string       { return c.RedisAddr }
func (c *ResponderConfig) redis() string     { return c.RedisAddr }
func (c *ShufflerConfig) redis() string      { return "" }
func (c *VendorAgentConfig) redis() string   { return "" }
