// Package sim runs a whole Mohito deployment in one process against one
// NATS server: every integrator and vendor role as in production (separate
// accounts, separate connections), simulated users and devices, and hooks to
// kill and restart any role. The embedded demo, the load generator and the
// integration tests all use it.
package sim

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Config describes a simulated deployment.
type Config struct {
	Deployment       roles.Deployment
	DevicesPerVendor []int
	Users            int
	Gateways         int
	DecryptWorkers   int
	NATSURL          string
	Password         func(user string) string
	Store            roundstate.Store
	MaxRounds        int
	AckWait          time.Duration
	MQTTAddr         string // if set, MQTTDevices devices of vendor 0 connect over MQTT
	MQTTDevices      int
	Log              *slog.Logger
	Registry         prometheus.Registerer
	OnRound          func(roles.RoundReport)
	OnDone           func(t uint64, k int)
	KeyRetention     int // W of spec O16 (default roles.DefaultKeyRetention)
	// Execute is how long a device takes to execute a real command (a slow
	// actuator); dummy slots cost nothing to execute.
	Execute time.Duration
	// Replicas is the replica count of every stream, bucket and object store the roles
	// create (natsx.WithReplicas): 3 on a three-node JetStream cluster (NATSURL then lists
	// its nodes, comma-separated); 0 means 1.
	Replicas int
}

// Cluster is a running simulated deployment.
type Cluster struct {
	cfg          Config
	Metrics      *roles.Metrics
	ikey         *mohito.KeyRing   // sk_I by epoch, shared by the coordinator and the decrypt workers
	vkeys        []*mohito.KeyRing // sk_V by epoch, shared by each vendor's shuffler and agent
	vendorDir    *roles.KeyDirectory
	Creds        [][]mohito.DeviceCredentials // [vendor][device]
	secrets      [][]mohito.DeviceSecret
	Devices      [][]*client.Device
	Owner        [][]int // [vendor][device] → user
	Users        []*client.User
	GatewayAddrs []string

	mu         sync.Mutex
	procs      map[string]*proc
	deliveries Deliveries // every device's executor
	conns      []*grpc.ClientConn
	mqtt       []*client.MQTTTransport // devices over MQTT, closed by Stop
}

type proc struct {
	cancel context.CancelFunc
	done   chan struct{}
	nc     *nats.Conn
	srv    *grpc.Server
}

// DeviceID names device d of vendor v on the vendor's channel.
func DeviceID(v, d int) string { return fmt.Sprintf("v%dd%d", v, d) }

// DeviceIDs are the ids of every vendor's devices (by vendor): each needs its own NATS user
// (contract.AccountsConfig).
func DeviceIDs(devicesPerVendor []int) [][]string {
	ids := make([][]string, len(devicesPerVendor))
	for v, n := range devicesPerVendor {
		for d := range n {
			ids[v] = append(ids[v], DeviceID(v, d))
		}
	}
	return ids
}

// Start builds keys, devices and users and starts every role.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Deployment.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Gateways == 0 {
		cfg.Gateways = 1
	}
	if cfg.DecryptWorkers == 0 {
		cfg.DecryptWorkers = 1
	}
	p := cfg.Deployment.Params
	c := &Cluster{cfg: cfg, Metrics: roles.NewMetrics(cfg.Registry), procs: map[string]*proc{}}
	var err error
	if cfg.KeyRetention == 0 {
		cfg.KeyRetention = roles.DefaultKeyRetention
		c.cfg.KeyRetention = cfg.KeyRetention
	}
	ring := func() (*mohito.KeyRing, error) {
		k, err := mohito.GenerateKey(p.Suite)
		if err != nil {
			return nil, err
		}
		return mohito.SingleKeyRing(k, cfg.KeyRetention)
	}
	if c.ikey, err = ring(); err != nil {
		return nil, err
	}
	var vpub []*mohito.PublicKey
	for v := range p.Vendors {
		k, err := ring()
		if err != nil {
			return nil, err
		}
		c.vkeys = append(c.vkeys, k)
		vk, _ := k.Key(0)
		vpub = append(vpub, vk.PublicKey())
		n := cfg.DevicesPerVendor[v]
		creds := make([]mohito.DeviceCredentials, n)
		secrets := make([]mohito.DeviceSecret, n)
		owner := make([]int, n)
		for d := range n {
			if secrets[d], err = mohito.NewDeviceSecret(rand.Reader); err != nil {
				return nil, err
			}
			creds[d] = mohito.DeviceCredentials{Vendor: uint32(v), Keys: secrets[d].Keys()}
			owner[d] = (d*p.Vendors + v) % max(cfg.Users, 1)
		}
		c.Creds = append(c.Creds, creds)
		c.secrets = append(c.secrets, secrets)
		c.Owner = append(c.Owner, owner)
	}
	c.vendorDir = roles.StaticKeyDirectory(vpub)
	// Vendor side first, so every inbox exists before the first round.
	for v := range p.Vendors {
		if err := c.StartRole(ctx, "shuffler", v); err != nil {
			return nil, err
		}
		if err := c.StartRole(ctx, "agent", v); err != nil {
			return nil, err
		}
		if err := c.startDevices(ctx, v); err != nil {
			return nil, err
		}
	}
	for w := range cfg.DecryptWorkers {
		if err := c.StartRole(ctx, "decrypt", w); err != nil {
			return nil, err
		}
	}
	for e := range cfg.Deployment.Encoders {
		if err := c.StartRole(ctx, "encoder", e); err != nil {
			return nil, err
		}
	}
	if err := c.StartRole(ctx, "responder", 0); err != nil {
		return nil, err
	}
	for g := range cfg.Gateways {
		if err := c.StartRole(ctx, "gateway", g); err != nil {
			return nil, err
		}
	}
	for u := range cfg.Users {
		conn, err := client.DialGateway(c.GatewayAddrs[u%len(c.GatewayAddrs)])
		if err != nil {
			return nil, err
		}
		c.conns = append(c.conns, conn)
		c.Users = append(c.Users, &client.User{Name: userName(u), GW: client.NewGatewayClient(conn, token(u))})
	}
	if err := c.StartRole(ctx, "coordinator", 0); err != nil {
		return nil, err
	}
	return c, nil
}

func userName(u int) string { return fmt.Sprintf("user%d", u) }
func token(u int) string    { return fmt.Sprintf("token-%d-secret", u) }

func (c *Cluster) connect(user string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(c.cfg.NATSURL, nats.UserInfo(user, c.cfg.Password(user)), nats.Name(user), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", user, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, natsx.WithReplicas(js, c.cfg.Replicas), nil
}

// RotateIntegratorKey adds a fresh integrator key under epoch, as a
// rotation does: the coordinator names it from its next round and announces
// it to the vendors; the decrypt workers hold both epochs until the old one
// is W rounds behind.
func (c *Cluster) RotateIntegratorKey(epoch uint32) error {
	k, err := mohito.GenerateKey(c.cfg.Deployment.Params.Suite)
	if err != nil {
		return err
	}
	return c.ikey.Add(epoch, k)
}

// RotateVendorKey adds a fresh key for vendor v under epoch and announces
// v's key set to the integrator (as its shuffler does on start), which puts
// the epoch in force from the next round the coordinator opens.
func (c *Cluster) RotateVendorKey(ctx context.Context, v int, epoch uint32) error {
	k, err := mohito.GenerateKey(c.cfg.Deployment.Params.Suite)
	if err != nil {
		return err
	}
	if err := c.vkeys[v].Add(epoch, k); err != nil {
		return err
	}
	return c.AnnounceVendorKeys(ctx, v, c.vkeys[v].PublicKeys())
}

// AnnounceVendorKeys publishes ks as vendor v's key set over v's account.
func (c *Cluster) AnnounceVendorKeys(ctx context.Context, v int, ks mohito.KeySet) error {
	nc, js, err := c.connect(contract.VendorUser(v))
	if err != nil {
		return err
	}
	defer nc.Close()
	return roles.AnnounceVendorKey(ctx, js, v, ks)
}

// IntegratorKeys and VendorKeys are the rings the roles hold (tests inspect
// retention through them).
func (c *Cluster) IntegratorKeys() *mohito.KeyRing { return c.ikey }

// VendorKeys returns vendor v's ring.
func (c *Cluster) VendorKeys(v int) *mohito.KeyRing { return c.vkeys[v] }

// StartRole starts replica i of a role: coordinator, gateway, decrypt,
// encoder, responder, shuffler (i = vendor) or agent (i = vendor).
func (c *Cluster) StartRole(ctx context.Context, role string, i int) error {
	return c.startRole(ctx, role, i, c.cfg.Deployment)
}

// StartEncoder starts encoder partition p of a deployment scaled to
// partitions encoders (the operator rolls the StatefulSet with the new
// count; pods of the old and the new count overlap while it rolls).
func (c *Cluster) StartEncoder(ctx context.Context, p, partitions int) error {
	d := c.cfg.Deployment
	d.Encoders = partitions
	return c.startRole(ctx, "encoder", p, d)
}

// StartReplica starts another replica r (> 0) of role for index i (replica 0 is StartRole's), as
// a rolling update or a second replica would: the coordinators share the leader lease, a
// vendor's agents and shufflers theirs.
func (c *Cluster) StartReplica(ctx context.Context, role string, i, r int) error {
	return c.startNamed(ctx, fmt.Sprintf("%s-%d-r%d", role, i, r), role, i, c.cfg.Deployment)
}

// StopReplica stops replica r of role for index i gracefully.
func (c *Cluster) StopReplica(role string, i, r int) {
	c.stop(fmt.Sprintf("%s-%d-r%d", role, i, r), true)
}

func (c *Cluster) startRole(ctx context.Context, role string, i int, d roles.Deployment) error {
	return c.startNamed(ctx, fmt.Sprintf("%s-%d", role, i), role, i, d)
}

// startNamed starts a role replica. On a replicated JetStream (Replicas > 1) a role's first
// requests can meet a stream or bucket whose group is still electing its leader ("no
// responders"), as the daemons' setup does; it is retried for up to replicatedStartRetry.
func (c *Cluster) startNamed(ctx context.Context, name, role string, i int, d roles.Deployment) error {
	err := c.startOnce(ctx, name, role, i, d)
	if c.cfg.Replicas <= 1 {
		return err
	}
	deadline := time.Now().Add(replicatedStartRetry)
	for wait := 100 * time.Millisecond; err != nil && time.Now().Before(deadline); wait = min(2*wait, 2*time.Second) {
		c.cfg.Log.Warn("role not started, retrying", "role", name, "err", err)
		if !clock.Sleep(ctx, wait) {
			return err
		}
		err = c.startOnce(ctx, name, role, i, d)
	}
	return err
}

// replicatedStartRetry bounds startNamed's retries on a replicated JetStream.
const replicatedStartRetry = 60 * time.Second

func (c *Cluster) startOnce(ctx context.Context, name, role string, i int, d roles.Deployment) error {
	user := contract.IntegratorUser
	if role == "shuffler" || role == "agent" {
		user = contract.VendorUser(i)
	}
	nc, js, err := c.connect(user)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	pr := &proc{cancel: cancel, done: make(chan struct{}), nc: nc}
	log := c.cfg.Log.With("role", role, "replica", i)
	wcfg := roles.WorkerConfig{Deployment: d, JS: js, Store: c.cfg.Store, Keys: c.ikey, Partition: i, AckWait: c.cfg.AckWait, Log: log, Metrics: c.Metrics}
	vcfg := roles.VendorConfig{Deployment: d, Vendor: i, NC: nc, JS: js, Integrator: c.ikey.PublicKeys(), ID: name, Log: log, Metrics: c.Metrics}
	var run func(context.Context) error
	fail := func(err error) error {
		cancel()
		nc.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	switch role {
	case "coordinator":
		co, err := roles.NewCoordinator(rctx, roles.CoordinatorConfig{
			Deployment: d, JS: js, Store: c.cfg.Store, Keys: c.ikey, VendorKeys: c.vendorDir,
			ID: name, MaxRounds: c.cfg.MaxRounds, Log: log, Metrics: c.Metrics, OnRound: c.cfg.OnRound, LeaseTTL: 2 * time.Second,
		})
		if err != nil {
			return fail(err)
		}
		run = co.Run
	case "gateway":
		tokens := map[string]string{}
		for u := range c.cfg.Users {
			tokens[token(u)] = userName(u)
		}
		gw, err := roles.NewGateway(rctx, roles.GatewayConfig{Deployment: d, JS: js, Store: c.cfg.Store, Tokens: tokens, Log: log, Metrics: c.Metrics})
		if err != nil {
			return fail(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		pr.srv = roles.NewGRPCServer()
		gw.Register(pr.srv)
		if i < len(c.GatewayAddrs) {
			c.GatewayAddrs[i] = l.Addr().String()
		} else {
			c.GatewayAddrs = append(c.GatewayAddrs, l.Addr().String())
		}
		srv := pr.srv
		run = func(ctx context.Context) error {
			go func() { <-ctx.Done(); srv.Stop() }()
			return srv.Serve(l)
		}
	case "decrypt":
		w, err := roles.NewDecryptWorker(rctx, wcfg)
		if err != nil {
			return fail(err)
		}
		run = w.Run
	case "encoder":
		e, err := roles.NewEncoder(rctx, wcfg)
		if err != nil {
			return fail(err)
		}
		run = e.Run
	case "responder":
		r := roles.NewResponder(wcfg)
		r.OnDone = c.cfg.OnDone
		run = r.Run
	case "shuffler":
		vcfg.Keys = c.vkeys[i]
		s, err := roles.NewShufflerService(rctx, vcfg)
		if err != nil {
			return fail(err)
		}
		run = s.Run
	case "agent":
		for d, cr := range c.Creds[i] {
			vcfg.Devices = append(vcfg.Devices, roles.RegisteredDevice{ID: DeviceID(i, d), PRF: cr.Keys.PRF})
		}
		a, err := roles.NewVendorAgent(rctx, vcfg)
		if err != nil {
			return fail(err)
		}
		run = a.Run
	default:
		return fail(fmt.Errorf("unknown role %q", role))
	}
	c.mu.Lock()
	c.procs[name] = pr
	c.mu.Unlock()
	go func() {
		defer close(pr.done)
		if err := run(rctx); err != nil && rctx.Err() == nil {
			log.Error("role stopped", "err", err)
		}
	}()
	return nil
}

// Kill stops replica i of role abruptly: its connection is closed and
// whatever it had not acked is redelivered to the next replica.
func (c *Cluster) Kill(role string, i int) { c.stop(fmt.Sprintf("%s-%d", role, i), false) }

// StopRole stops replica i of role gracefully: in-flight handlers finish,
// then its connection closes; what it held unacked is redelivered.
func (c *Cluster) StopRole(role string, i int) { c.stop(fmt.Sprintf("%s-%d", role, i), true) }

func (c *Cluster) stop(name string, graceful bool) {
	c.mu.Lock()
	pr := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if pr == nil {
		return
	}
	if !graceful {
		pr.nc.Close()
	}
	pr.cancel()
	<-pr.done
	pr.nc.Close()
}

func (c *Cluster) startDevices(ctx context.Context, v int) error {
	p := c.cfg.Deployment.Params
	devs := make([]*client.Device, len(c.Creds[v]))
	for d := range devs {
		// Every device logs in as its own user: it reaches only its own subjects.
		user := contract.DeviceUser(v, DeviceID(v, d))
		var tr client.Transport
		if v == 0 && d < c.cfg.MQTTDevices && c.cfg.MQTTAddr != "" {
			m, err := client.DialMQTT(c.cfg.MQTTAddr, user, c.cfg.Password(user))
			if err != nil {
				return err
			}
			// Closed by Stop: an MQTT device reconnects until closed, and a leftover one
			// would find a later test's NATS on the same port.
			c.mu.Lock()
			c.mqtt = append(c.mqtt, m)
			c.mu.Unlock()
			tr = m
		} else {
			nc, _, err := c.connect(user)
			if err != nil {
				return err
			}
			c.mu.Lock()
			c.procs[fmt.Sprintf("device-%d-%d", v, d)] = &proc{cancel: func() {}, done: closedChan(), nc: nc}
			c.mu.Unlock()
			tr = client.NATSTransport{NC: nc}
		}
		devs[d] = client.NewDevice(DeviceID(v, d), &c.secrets[v][d], p, tr, func(cmd *mohito.Command) []byte {
			time.Sleep(c.cfg.Execute)
			return c.deliveries.Ack(cmd)
		})
		devs[d].AnswerAfter = c.cfg.Deployment.AnswerAfter()
		if err := devs[d].Start(); err != nil {
			return err
		}
	}
	c.Devices = append(c.Devices, devs)
	return nil
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Deployment returns the deployment the cluster runs.
func (c *Cluster) Deployment() roles.Deployment { return c.cfg.Deployment }

// Delivered returns how many times each payload reached a device.
func (c *Cluster) Delivered() map[string]int { return c.deliveries.Counts() }

// Stop stops every role.
func (c *Cluster) Stop() {
	c.mu.Lock()
	var names []string
	for n := range c.procs {
		names = append(names, n)
	}
	c.mu.Unlock()
	for _, n := range names {
		c.mu.Lock()
		pr := c.procs[n]
		delete(c.procs, n)
		c.mu.Unlock()
		pr.cancel()
		<-pr.done
		pr.nc.Close()
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Lock()
	mqtt := c.mqtt
	c.mqtt = nil
	c.mu.Unlock()
	for _, m := range mqtt {
		m.Close()
	}
}
