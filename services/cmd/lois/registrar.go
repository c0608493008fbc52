package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// natsFlags connect a role to the registrar's JetStream (optional for ci and si: without
// --nats-url they serve the keys files only).
type natsFlags struct {
	url, user, passwordFile, cloud, name string
	replica                              int
	// recordKeyFile holds the cloud's session record key (bindRecords); records is it loaded.
	recordKeyFile string
	records       *roles.RecordSeal
	// conn holds the connection follow made (the SI publishes its low-water events on it).
	conn atomic.Pointer[nats.Conn]
}

// lowWater publishes an SI's low-water event (spec §3.12, §10) on the follower's connection.
func (n *natsFlags) lowWater(session string, sid uint16) error {
	nc := n.conn.Load()
	if nc == nil {
		return errors.New("NATS not connected")
	}
	return nc.Publish(contract.SubjectLowWater(n.cloud, session, sid), nil)
}

func (n *natsFlags) bind(f *envflag.Set, follower bool) {
	f.String(&n.url, "nats-url", "", "NATS server of the registrar's session stream (empty: keys files only)")
	f.String(&n.user, "nats-user", "", "NATS user (with --nats-password-file)")
	f.String(&n.passwordFile, "nats-password-file", "", "file holding the NATS user's password")
	f.String(&n.cloud, "cloud", "c1", "the cloud's name in the session subjects")
	if follower {
		f.String(&n.name, "replica-name", "", "this replica's name in install acks (the registrar waits for it), e.g. ci-0, si-8080-0")
		f.Int(&n.replica, "replica", 0, "SI: this replica's index in its service's download partition (spec §3.11)")
	}
}

// bindRecords adds --record-key-file for the roles that publish or follow session records.
func (n *natsFlags) bindRecords(f *envflag.Set, required bool) {
	use := "file holding the cloud's session record keys (64 hex digits, or '<id> <64 hex>' lines and an optional 'current <id>' for a rotation): records are sealed under the current key and open under the key their id names (roles.RecordSeal)"
	if !required {
		use += "; empty: records in clear"
	}
	f.String(&n.recordKeyFile, "record-key-file", "", use)
}

// loadRecords reads the record key, if a file is named; required refuses to run without one.
func (n *natsFlags) loadRecords(required bool) []error {
	if n.recordKeyFile == "" {
		if required && n.url != "" {
			return []error{errors.New("--record-key-file is required: session records carry stream keys and are never published in clear")}
		}
		return nil
	}
	s, err := roles.ReadRecordKey(n.recordKeyFile)
	if err != nil {
		return []error{fmt.Errorf("--record-key-file: %w", err)}
	}
	n.records = s
	return nil
}

func (n *natsFlags) validate(follower bool) []error {
	var errs []error
	if n.url == "" {
		return nil
	}
	if (n.user == "") != (n.passwordFile == "") {
		errs = append(errs, fmt.Errorf("--nats-user and --nats-password-file go together"))
	}
	if n.cloud == "" || strings.ContainsAny(n.cloud, ".*> ") {
		errs = append(errs, fmt.Errorf("--cloud %q: want a subject token", n.cloud))
	}
	if follower && (n.name == "" || strings.ContainsAny(n.name, ".*> ")) {
		errs = append(errs, fmt.Errorf("--replica-name %q: want a subject token", n.name))
	}
	if n.replica < 0 {
		errs = append(errs, fmt.Errorf("--replica %d is negative", n.replica))
	}
	return errs
}

func (n *natsFlags) connect(extra ...nats.Option) (jetstream.JetStream, func(), error) {
	// IgnoreAuthErrorAbort: a user the operator just generated is refused until the server has
	// reloaded its accounts; without it the client gives up after two refusals for good.
	opts := append([]nats.Option{nats.Name("obscura-lois"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort()}, extra...)
	if n.user != "" {
		b, err := os.ReadFile(n.passwordFile)
		if err != nil {
			return nil, nil, daemon.ConfigError(fmt.Errorf("--nats-password-file: %w", err))
		}
		opts = append(opts, nats.UserInfo(n.user, strings.TrimRight(string(b), "\r\n")))
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS %s: %w", n.url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, func() { nc.Drain() }, nil
}

// follow runs the role's packet loops and, with --nats-url, follows the session stream into
// inst; the role is not ready while NATS is not connected (it could not install new sessions).
func (n *natsFlags) follow(run func(context.Context) error, inst roles.Installer, log *slog.Logger, health *telemetry.Health) func(context.Context) error {
	if n.url == "" {
		return run
	}
	return func(ctx context.Context) error {
		up := func(*nats.Conn) { health.SetReady(true, "") }
		js, closeNC, err := n.connect(nats.ConnectHandler(up), nats.ReconnectHandler(up),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { health.SetReady(false, "NATS not connected") }))
		if err != nil {
			return err
		}
		if !js.Conn().IsConnected() {
			health.SetReady(false, "NATS not connected")
		}
		defer closeNC()
		n.conn.Store(js.Conn())
		defer n.conn.Store(nil)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- roles.FollowSealed(ctx, js, n.cloud, n.name, n.replica, n.records, inst, log) }()
		err = run(ctx)
		cancel()
		<-errc
		return err
	}
}

type registerConfig struct {
	natsFlags
	provisionConfig
	wait     time.Duration
	replicas string
}

// runRegister is the registrar's session step as a command: it registers one device
// session, publishes the record to the session stream and writes the device's keys file
// only after every replica in --wait-for acknowledged installing it (install before use).
// It stands in for the HELLO API over mutual TLS; dedup spans the sessions of one
// invocation only (the long-running registrar keeps its table).
func runRegister(args []string) error {
	var c registerConfig
	f := daemon.NewFlags("register")
	c.natsFlags.bind(f, false)
	c.natsFlags.bindRecords(f, false)
	f.String(&c.outDir, "out-dir", "", "directory the device's keys file (di.json) is written to")
	f.String(&c.services, "services", "", "comma-separated service ids")
	f.String(&c.deviceIP, "device-ip", "", "the device's address inside the LOIS packets")
	f.String(&c.deviceWire, "device-wire", "", "the DI's wire address (ip:port)")
	f.Int(&c.n, "n", 1024, "keystreams per service and direction")
	f.Int(&c.provisionConfig.replicas, "partitions", 1, "SI replicas per service: the download partition count")
	f.Duration(&c.lifetime, "lifetime", time.Hour, "epoch lifetime")
	f.String(&c.replicas, "wait-for", "", "comma-separated replica names whose install acks the device's keys wait for")
	f.Duration(&c.wait, "timeout", 30*time.Second, "how long to wait for the acks")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	errs := append(c.natsFlags.validate(false), c.natsFlags.loadRecords(false)...)
	if c.url == "" {
		errs = append(errs, fmt.Errorf("--nats-url is required"))
	}
	if len(splitList(c.replicas)) == 0 {
		errs = append(errs, fmt.Errorf("--wait-for is required: install before use"))
	}
	if err := c.provisionConfig.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := daemon.JoinConfig(errs); err != nil {
		return err
	}
	js, closeNC, err := c.connect()
	if err != nil {
		return err
	}
	defer closeNC()
	ctx, cancel := context.WithTimeout(context.Background(), c.wait)
	defer cancel()
	if err := roles.EnsureSessionStream(ctx, js, 1, 25*time.Hour); err != nil {
		return err
	}
	sids, _ := parseSIDs(c.services)
	table, err := lois.NewDVT(lois.DVTConfig{TableCapacity: 2 * c.n * len(sids), Dedup: true})
	if err != nil {
		return err
	}
	reg := &roles.Registrar{JS: js, Cloud: c.cloud, Table: table, Replicas: splitList(c.replicas), Records: c.records}
	keys, err := reg.Open(ctx, roles.Provision{Services: sids, N: uint32(c.n), Lifetime: c.lifetime, Epoch: 1,
		DeviceIP: netip.MustParseAddr(c.deviceIP), DeviceWire: netip.MustParseAddrPort(c.deviceWire), Replicas: c.provisionConfig.replicas})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.outDir, 0o700); err != nil {
		return err
	}
	if err := contract.WriteKeys(filepath.Join(c.outDir, "di.json"), keys); err != nil {
		return err
	}
	fmt.Printf("session %s installed by %s\n", keys.Session, c.replicas)
	return nil
}
