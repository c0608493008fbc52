// Command manager is the Obscura operator: one controller manager that runs the Vendor, Shuffler
// and Round (mohito.obscura.dev), AggregationJob (pda.obscura.dev) and SecurePipeline
// (pps.obscura.dev) reconcilers.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/obscura-iot/obscura/operators/internal/controller"
	"github.com/obscura-iot/obscura/operators/internal/loisstatus"
	"github.com/obscura-iot/obscura/operators/internal/mohitostatus"
	"github.com/obscura-iot/obscura/operators/internal/pdastatus"
	"github.com/obscura-iot/obscura/operators/internal/ppsstatus"
	"github.com/obscura-iot/obscura/operators/internal/scheme"
	"github.com/obscura-iot/obscura/operators/internal/specs"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// Config is the manager's configuration, from flags with environment fallbacks.
type Config struct {
	MetricsAddr   string
	ProbeAddr     string
	LeaderElect   bool
	LeaderElectNS string
	VaultAddress  string
	// What every system's workloads share; without a NATS URL resources are only validated.
	ImagePullPolicy string
	NATSURL         string
	Mohito          MohitoConfig
	PDA             PDAConfig
	// PPSImage runs both PPS parties; with --nats-url the operator runs SecurePipelines.
	PPSImage string
	// LOISImage runs the LOIS cloud interfaces; with --nats-url the operator runs
	// HeaderGateways' workloads.
	LOISImage string
	// SDDRImage runs `sddr` (EncounterMailboxes' `sddr mailbox`).
	SDDRImage string
	// NATSReplicas is every workload's --nats-replicas ("" or 1: the services' default).
	NATSReplicas string
	// The operator's own NATS user (integrator account), to read figures and register vendors.
	NATSUser         string
	NATSPasswordFile string
	// The NATS server's accounts, rendered into this Secret (in NATSAccountsNamespace) from
	// every credentials Secret and the operator's own users; "" renders nothing.
	NATSAccountsSecret    string
	NATSAccountsNamespace string
	// NATSAccountsOwner is the operator's own Deployment: owner of that Secret, so that
	// uninstalling the chart removes it too.
	NATSAccountsOwner string
	// HostNetwork runs the workloads on the node's network on 127.0.0.1 (a node without a pod
	// network, docs/cluster.md).
	HostNetwork bool
	// ScrapeAnnotations adds the prometheus.io/* annotations to the workloads' pods (the chart
	// sets it when it renders no PodMonitor).
	ScrapeAnnotations bool
	// CPURequest replaces every workload's CPU request when set (small clusters).
	CPURequest string
	// TopologySpread is how decrypt workers, encoders and PDA database shards spread over the
	// nodes: ScheduleAnyway, DoNotSchedule or none (specs.Runtime.TopologySpread).
	TopologySpread string
	// KeyActivationDelay is every key-holding role's --key-activation-delay (0: the services'
	// default).
	KeyActivationDelay string
}

// MohitoConfig is where the Mohito workloads run; without an image resources are only validated.
type MohitoConfig struct {
	Image           string
	IntegratorRedis string
}

// PDAConfig is where the PDA workloads (AggregationJob) run: the image running every PDA role,
// and the operator's NATS users in the proxy and database accounts (ring, window progress,
// results).
type PDAConfig struct {
	Image                                string
	ProxyNATSUser, ProxyNATSPasswordFile string
	DBNATSUser, DBNATSPasswordFile       string
	// ProxyPort is the proxy ingress's HTTPS (mTLS) port (--pda-proxy-port).
	ProxyPort string
}

// pdaProxyPort is --pda-proxy-port (validated; 0 when empty: the default port).
func (c Config) pdaProxyPort() int {
	p, _ := strconv.Atoi(c.PDA.ProxyPort)
	return p
}

// topologySpread parses --topology-spread: ScheduleAnyway (also when empty), DoNotSchedule, or
// none ("": no constraint).
func (c Config) topologySpread() (corev1.UnsatisfiableConstraintAction, error) {
	switch c.TopologySpread {
	case "":
		return corev1.ScheduleAnyway, nil
	case "none":
		return "", nil
	}
	for _, v := range specs.TopologySpreads {
		if v != "" && string(v) == c.TopologySpread {
			return v, nil
		}
	}
	return "", fmt.Errorf("--topology-spread %q: want ScheduleAnyway, DoNotSchedule or none", c.TopologySpread)
}

// natsReplicas parses --nats-replicas: 1, 3 or 5 (natsx.ValidateReplicas).
func (c Config) natsReplicas() (int, error) {
	if c.NATSReplicas == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(c.NATSReplicas)
	if err == nil {
		err = natsx.ValidateReplicas(n)
	}
	if err != nil {
		return 0, fmt.Errorf("--nats-replicas %q: %w", c.NATSReplicas, err)
	}
	return n, nil
}

// keyActivationDelay parses --key-activation-delay ("" or "0": the services' default).
func (c Config) keyActivationDelay() (time.Duration, error) {
	if c.KeyActivationDelay == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.KeyActivationDelay)
	if err == nil && d != 0 && d < time.Second {
		err = errors.New("must be 0 or at least 1s")
	}
	return d, err
}

func (c Config) validate() error {
	var errs []error
	for name, addr := range map[string]string{"--metrics-bind-address": c.MetricsAddr, "--health-probe-bind-address": c.ProbeAddr} {
		if addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	if _, err := c.natsReplicas(); err != nil {
		errs = append(errs, err)
	}
	if p, err := strconv.Atoi(c.PDA.ProxyPort); c.PDA.ProxyPort != "" && (err != nil || p < 1 || p > 65535) {
		errs = append(errs, fmt.Errorf("--pda-proxy-port %q: want a port in 1..65535", c.PDA.ProxyPort))
	}
	if c.VaultAddress != "" {
		u, err := url.Parse(c.VaultAddress)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--vault-address %q: want an http(s)://host:port URL", c.VaultAddress))
		}
	}
	if _, err := c.keyActivationDelay(); err != nil {
		errs = append(errs, fmt.Errorf("--key-activation-delay %q: %w", c.KeyActivationDelay, err))
	}
	if _, err := c.topologySpread(); err != nil {
		errs = append(errs, err)
	}
	switch c.ImagePullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", c.ImagePullPolicy))
	}
	if (c.Mohito.Image == "") != (c.NATSURL == "") {
		errs = append(errs, errors.New("--mohito-image and --nats-url go together: set both to run Mohito workloads, or neither to only validate resources"))
	}
	if (c.NATSUser == "") != (c.NATSPasswordFile == "") {
		errs = append(errs, errors.New("--nats-user and --nats-password-file go together"))
	}
	if c.NATSAccountsSecret != "" && c.NATSAccountsNamespace == "" {
		errs = append(errs, errors.New("--nats-accounts-secret needs --nats-accounts-namespace (or POD_NAMESPACE): the operator writes the accounts into its own namespace"))
	}
	if c.Mohito.Image != "" && c.Mohito.IntegratorRedis == "" {
		errs = append(errs, errors.New("--integrator-redis is required with --mohito-image: the integrator keeps round state in its own Redis"))
	}
	return errors.Join(errs...)
}

// natsOperatorUsers are the operator's own NATS users, with the passwords read from their
// files, for the rendered accounts.
func (c Config) natsOperatorUsers() ([]specs.NATSUser, error) {
	if c.NATSAccountsSecret == "" {
		return nil, nil
	}
	var users []specs.NATSUser
	for _, u := range []struct{ account, user, file, flag string }{
		{contract.IntegratorAccount, c.NATSUser, c.NATSPasswordFile, "--nats-user"},
		{pdacontract.ProxyAccount, c.PDA.ProxyNATSUser, c.PDA.ProxyNATSPasswordFile, "--pda-proxy-nats-user"},
		{pdacontract.DBAccount, c.PDA.DBNATSUser, c.PDA.DBNATSPasswordFile, "--pda-db-nats-user"},
	} {
		if u.user == "" || u.file == "" {
			continue
		}
		pw, err := os.ReadFile(u.file)
		if err != nil {
			return nil, fmt.Errorf("read the password of %s %s: %w", u.flag, u.user, err)
		}
		users = append(users, specs.NATSUser{Account: u.account, Name: u.user, Password: strings.TrimSpace(string(pw)), Source: "flag " + u.flag})
	}
	return users, nil
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", envOr("OBSCURA_METRICS_ADDR", ":8080"), "address of the Prometheus metrics endpoint; 0 disables it (env OBSCURA_METRICS_ADDR)")
	flag.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", envOr("OBSCURA_PROBE_ADDR", ":8081"), "address of /healthz and /readyz (env OBSCURA_PROBE_ADDR)")
	flag.BoolVar(&cfg.LeaderElect, "leader-elect", envOr("OBSCURA_LEADER_ELECT", "false") == "true", "elect a leader so that only one manager reconciles (env OBSCURA_LEADER_ELECT)")
	flag.StringVar(&cfg.LeaderElectNS, "leader-election-namespace", envOr("OBSCURA_LEADER_ELECTION_NAMESPACE", ""), "namespace of the leader-election Lease; empty uses the pod's namespace")
	flag.StringVar(&cfg.VaultAddress, "vault-address", envOr("VAULT_ADDR", ""), "default Vault address for key references without their own (env VAULT_ADDR)")
	flag.StringVar(&cfg.Mohito.Image, "mohito-image", envOr("OBSCURA_MOHITO_IMAGE", ""), "image running every Mohito role (env OBSCURA_MOHITO_IMAGE)")
	flag.StringVar(&cfg.ImagePullPolicy, "image-pull-policy", envOr("OBSCURA_IMAGE_PULL_POLICY", "IfNotPresent"), "pull policy of the workloads' images")
	flag.StringVar(&cfg.PDA.Image, "pda-image", envOr("OBSCURA_PDA_IMAGE", ""), "image running every PDA role; with --nats-url the operator runs AggregationJobs' workloads (env OBSCURA_PDA_IMAGE)")
	flag.StringVar(&cfg.LOISImage, "lois-image", envOr("OBSCURA_LOIS_IMAGE", ""), "image running the LOIS cloud interfaces (lois ci); with --nats-url the operator runs HeaderGateways' workloads (env OBSCURA_LOIS_IMAGE)")
	flag.StringVar(&cfg.SDDRImage, "sddr-image", envOr("OBSCURA_SDDR_IMAGE", ""), "image running sddr (EncounterMailboxes' sddr mailbox) (env OBSCURA_SDDR_IMAGE)")
	flag.StringVar(&cfg.PPSImage, "pps-image", envOr("OBSCURA_PPS_IMAGE", ""), "image running both PPS parties (pps broker, pps garbler); with --nats-url the operator runs SecurePipelines' workloads (env OBSCURA_PPS_IMAGE)")
	flag.StringVar(&cfg.PDA.ProxyPort, "pda-proxy-port", envOr("OBSCURA_PDA_PROXY_PORT", "8443"), "HTTPS (mTLS) port of the PDA proxy ingress; on the node's network it must differ from the edge's port (env OBSCURA_PDA_PROXY_PORT)")
	flag.StringVar(&cfg.PDA.ProxyNATSUser, "pda-proxy-nats-user", envOr("OBSCURA_PDA_PROXY_NATS_USER", ""), "the operator's NATS user in the PDA proxy account")
	flag.StringVar(&cfg.PDA.ProxyNATSPasswordFile, "pda-proxy-nats-password-file", envOr("OBSCURA_PDA_PROXY_NATS_PASSWORD_FILE", ""), "file holding that user's password")
	flag.StringVar(&cfg.PDA.DBNATSUser, "pda-db-nats-user", envOr("OBSCURA_PDA_DB_NATS_USER", ""), "the operator's NATS user in the PDA database account")
	flag.StringVar(&cfg.PDA.DBNATSPasswordFile, "pda-db-nats-password-file", envOr("OBSCURA_PDA_DB_NATS_PASSWORD_FILE", ""), "file holding that user's password")
	flag.StringVar(&cfg.NATSURL, "nats-url", envOr("OBSCURA_NATS_URL", ""), "NATS URL the workloads connect to (env OBSCURA_NATS_URL)")
	flag.StringVar(&cfg.NATSReplicas, "nats-replicas", envOr("OBSCURA_NATS_REPLICAS", "1"), "replicas of the JetStream streams, buckets and object stores the workloads create: 1, or 3 (5) on a JetStream cluster of as many nodes (env OBSCURA_NATS_REPLICAS)")
	flag.StringVar(&cfg.Mohito.IntegratorRedis, "integrator-redis", envOr("OBSCURA_INTEGRATOR_REDIS", ""), "host:port of the integrator's Redis (env OBSCURA_INTEGRATOR_REDIS)")
	flag.StringVar(&cfg.NATSUser, "nats-user", envOr("OBSCURA_NATS_USER", ""), "the operator's NATS user in the integrator account (env OBSCURA_NATS_USER)")
	flag.StringVar(&cfg.NATSPasswordFile, "nats-password-file", envOr("OBSCURA_NATS_PASSWORD_FILE", ""), "file holding that user's password (env OBSCURA_NATS_PASSWORD_FILE)")
	flag.StringVar(&cfg.CPURequest, "workload-cpu-request", envOr("OBSCURA_WORKLOAD_CPU_REQUEST", ""), "CPU request of every workload the operator runs, replacing each role's default (e.g. 10m on a small cluster); empty keeps the defaults")
	flag.StringVar(&cfg.TopologySpread, "topology-spread", envOr("OBSCURA_TOPOLOGY_SPREAD", "ScheduleAnyway"), "how decrypt workers, encoders and PDA database shards spread over the nodes (maxSkew 1 by kubernetes.io/hostname): ScheduleAnyway (prefer; never leaves a pod pending), DoNotSchedule (require), none (env OBSCURA_TOPOLOGY_SPREAD)")
	flag.StringVar(&cfg.KeyActivationDelay, "key-activation-delay", envOr("OBSCURA_KEY_ACTIVATION_DELAY", ""), "how long the workloads wait after loading a new key epoch before naming it; must exceed the time a Secret update takes to reach every pod (0: the services' default, 3m) (env OBSCURA_KEY_ACTIVATION_DELAY)")
	flag.BoolVar(&cfg.ScrapeAnnotations, "scrape-annotations", envOr("OBSCURA_SCRAPE_ANNOTATIONS", "false") == "true", "add prometheus.io/scrape, /port and /path to the workloads' pods, for a Prometheus that discovers pods by annotation (not with --host-network) (env OBSCURA_SCRAPE_ANNOTATIONS)")
	flag.BoolVar(&cfg.HostNetwork, "host-network", envOr("OBSCURA_HOST_NETWORK", "false") == "true", "run the workloads with hostNetwork on 127.0.0.1: dynamic metrics/health ports, exec probes, SO_REUSEPORT listeners (env OBSCURA_HOST_NETWORK)")
	flag.StringVar(&cfg.NATSAccountsSecret, "nats-accounts-secret", envOr("OBSCURA_NATS_ACCOUNTS_SECRET", ""), "Secret to render the NATS server's accounts into (key accounts.conf); empty renders none (env OBSCURA_NATS_ACCOUNTS_SECRET)")
	flag.StringVar(&cfg.NATSAccountsOwner, "nats-accounts-owner", envOr("OBSCURA_NATS_ACCOUNTS_OWNER", ""), "the operator's Deployment (in that namespace), set as the accounts Secret's owner so it is deleted with the operator (env OBSCURA_NATS_ACCOUNTS_OWNER)")
	flag.StringVar(&cfg.NATSAccountsNamespace, "nats-accounts-namespace", envOr("OBSCURA_NATS_ACCOUNTS_NAMESPACE", os.Getenv("POD_NAMESPACE")), "namespace of that Secret (env OBSCURA_NATS_ACCOUNTS_NAMESPACE, then POD_NAMESPACE, then the pod's service account namespace)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if cfg.NATSAccountsSecret != "" && cfg.NATSAccountsNamespace == "" {
		// In a pod the operator's own namespace is its service account's.
		if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			cfg.NATSAccountsNamespace = strings.TrimSpace(string(ns))
		}
	}
	if err := cfg.validate(); err != nil {
		log.Error(err, "invalid configuration")
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

func run(cfg Config) error {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme.New(),
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:  cfg.ProbeAddr,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        "operator.obscura.dev",
		LeaderElectionNamespace: cfg.LeaderElectNS,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// The accounts come first and need no NATS: the server waits for them, and the
	// connections below retry until it is up.
	operatorUsers, err := cfg.natsOperatorUsers()
	if err != nil {
		return err
	}
	var mohitoServices *mohitostatus.Client
	if cfg.NATSURL != "" {
		if mohitoServices, err = mohitostatus.Connect(mohitostatus.Config{URL: cfg.NATSURL, User: cfg.NATSUser, PasswordFile: cfg.NATSPasswordFile}); err != nil {
			return err
		}
		defer mohitoServices.Close()
	}
	var pdaServices *pdastatus.Client
	if cfg.NATSURL != "" && cfg.PDA.Image != "" {
		if pdaServices, err = pdastatus.Connect(pdastatus.Config{URL: cfg.NATSURL,
			Proxy: pdastatus.Credentials{User: cfg.PDA.ProxyNATSUser, PasswordFile: cfg.PDA.ProxyNATSPasswordFile},
			DB:    pdastatus.Credentials{User: cfg.PDA.DBNATSUser, PasswordFile: cfg.PDA.DBNATSPasswordFile}}); err != nil {
			return err
		}
		defer pdaServices.Close()
	}
	activation, _ := cfg.keyActivationDelay() // validated at start
	replicas, _ := cfg.natsReplicas()         // validated at start
	spread, _ := cfg.topologySpread()         // validated at start
	rt := specs.Runtime{ImagePullPolicy: corev1.PullPolicy(cfg.ImagePullPolicy), NATSURL: cfg.NATSURL, NATSReplicas: replicas,
		VaultAddress: cfg.VaultAddress, HostNetwork: cfg.HostNetwork, CPURequest: cfg.CPURequest, KeyActivationDelay: activation,
		ScrapeAnnotations: cfg.ScrapeAnnotations, TopologySpread: spread}
	if err := controller.SetupAll(mgr, controller.Options{
		Runtime: rt,
		Mohito:  controller.MohitoOptions{Image: cfg.Mohito.Image, IntegratorRedis: cfg.Mohito.IntegratorRedis, Services: mohitoServices},
		PDA:     controller.PDAOptions{Image: cfg.PDA.Image, Services: pdaServices, ProxyPort: cfg.pdaProxyPort()},
		// The broker's figures are scraped from its pods' metrics, which needs no credentials.
		PPS:  controller.PPSOptions{Image: cfg.PPSImage, Services: ppsstatus.Metrics{}},
		LOIS: controller.LOISOptions{Image: cfg.LOISImage, Services: loisstatus.Metrics{}},
		SDDR: controller.SDDROptions{Image: cfg.SDDRImage},
		NATSAccounts: controller.NATSAccountsOptions{Secret: client.ObjectKey{Namespace: cfg.NATSAccountsNamespace, Name: cfg.NATSAccountsSecret},
			OperatorUsers: operatorUsers, Owner: cfg.NATSAccountsOwner},
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting manager", "metrics", cfg.MetricsAddr, "probes", cfg.ProbeAddr, "leaderElect", cfg.LeaderElect)
	return mgr.Start(ctrl.SetupSignalHandler())
}
