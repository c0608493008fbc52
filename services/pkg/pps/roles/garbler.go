package roles

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// Defaults and bounds of GarblerOptions.
const (
	DefaultSeedTTL    = 26 * time.Hour
	DefaultChunkBytes = 1 << 20
	MaxChunkBytes     = 4 << 20
	// MinChunkBytes keeps a data message worth its framing.
	MinChunkBytes = 256
	// DefaultMaxRetained bounds the seeds one ratchet advance retains (D8): a day of
	// 5-minute values is 288.
	DefaultMaxRetained = 4096
	// MaxSeedTTL bounds a function's seed_ttl_seconds.
	MaxSeedTTL = 366 * 24 * time.Hour
)

// GarblerOptions configure a Garbler.
type GarblerOptions struct {
	// Functions, when not nil, are the only function ids the garbler registers (its own
	// trust domain's copy of the SecurePipelines, rendered by the operator into the
	// garbler's pipelines file): a broker cannot make it garble a function no pipeline
	// declares. Nil registers any function the broker relays (tests, the demo).
	Functions map[string]bool
	// Redis is the garbler's own Redis (trust domain G): ratchets, retained seeds and
	// function keys, every record sealed by Sealer.
	Redis redis.UniversalClient
	// Sealer seals every record (VaultSealer in production, FileSealer for the demo).
	Sealer Sealer
	// Signer is the garbler's Ed25519 identity, pinned by devices (D20).
	Signer Signer
	// Logger (nil: discard) never receives a label, a seed, Δ, a mask or a key.
	Logger *slog.Logger
	// Registerer receives the garbler's metrics (nil: unregistered).
	Registerer prometheus.Registerer
	// SeedTTL is how long a retained round seed lives unless its function says otherwise
	// (D8; default 26 h).
	SeedTTL time.Duration
	// ChunkBytes is the size of the garbled stream's data messages (default 1 MiB, at most
	// MaxChunkBytes); a broker may ask for smaller ones.
	ChunkBytes int
	// MaxRetained bounds how many skipped rounds' seeds one ratchet advance retains
	// (default DefaultMaxRetained).
	MaxRetained int
	// KKRTSessionTTL is how long a KKRT consistency-check session lives without a check
	// (default DefaultKKRTSessionTTL); its broker then sets up a new one.
	KKRTSessionTTL time.Duration
	// Rand supplies ephemeral keys, nonces and function keys (nil: crypto/rand). The
	// garbling engine always draws Δ, π and the execution id from crypto/rand (D22).
	Rand io.Reader
}

// Garbler is the PPS garbler (trust domain G, spec §2.1, §5.3): the key server of the
// publisher and function ratchets, the sender side of the consistency check and the garbler
// of every execution. It implements ppsv1.GarblerServer; its only peer is the broker, over
// gRPC with mutual TLS, and it has no NATS credentials at all (§10 #10). Its state lives in
// its own Redis, sealed, and every ratchet write is a compare-and-set, so replicas can run
// side by side.
type Garbler struct {
	ppsv1.UnimplementedGarblerServer

	opts   GarblerOptions
	rdb    redis.UniversalClient
	sealer Sealer
	signer Signer
	log    *slog.Logger
	m      *garblerMetrics
	rand   io.Reader

	mu  sync.Mutex
	fns map[string]*compiledFn

	// ots are the OT-extension sender sessions of H1 (D21), in memory only.
	ots *otSessions
	// kkrt are the KKRT consistency-check sessions (D16b), in memory only.
	kkrt *kkrtSessions
	// pre are the executions garbled ahead of their inputs (garbler_pregarble.go).
	pre pregarbledSet
	// inputsSeen, set only by this package's tests, sees each execution's garbler inputs
	// (both labels of every wire) so the broker's view can be checked against them.
	inputsSeen func(fn string, in []gc.Input)
}

// compiledFn is a function compiled on this replica: the DSL output and the gc plan,
// recompiled from the stored source after a restart.
type compiledFn struct {
	f    *dsl.Function
	plan *gc.Plan
	hash [32]byte
	mode ppsv1.Mode
	ttl  time.Duration
}

// NewGarbler checks the options and returns a Garbler.
func NewGarbler(opts GarblerOptions) (*Garbler, error) {
	var errs []error
	if opts.Redis == nil {
		errs = append(errs, errors.New("no Redis client"))
	}
	if opts.Sealer == nil {
		errs = append(errs, errors.New("no Sealer"))
	}
	if opts.Signer == nil {
		errs = append(errs, errors.New("no Signer"))
	}
	if opts.SeedTTL == 0 {
		opts.SeedTTL = DefaultSeedTTL
	}
	if opts.SeedTTL < time.Second || opts.SeedTTL > MaxSeedTTL {
		errs = append(errs, fmt.Errorf("seed TTL %s: want 1s to %s", opts.SeedTTL, MaxSeedTTL))
	}
	if opts.ChunkBytes == 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	if opts.ChunkBytes < MinChunkBytes || opts.ChunkBytes > MaxChunkBytes {
		errs = append(errs, fmt.Errorf("chunk bytes %d: want %d to %d", opts.ChunkBytes, MinChunkBytes, MaxChunkBytes))
	}
	if opts.MaxRetained == 0 {
		opts.MaxRetained = DefaultMaxRetained
	}
	if opts.MaxRetained < 0 || opts.MaxRetained > pps.DefaultMaxSkip {
		errs = append(errs, fmt.Errorf("max retained %d: want 1 to %d", opts.MaxRetained, pps.DefaultMaxSkip))
	}
	if opts.KKRTSessionTTL == 0 {
		opts.KKRTSessionTTL = DefaultKKRTSessionTTL
	}
	if opts.KKRTSessionTTL < time.Second || opts.KKRTSessionTTL > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("KKRT session TTL %s: want 1s to 168h", opts.KKRTSessionTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("garbler: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	m := newGarblerMetrics(opts.Registerer)
	return &Garbler{opts: opts, rdb: opts.Redis, sealer: opts.Sealer, signer: opts.Signer, log: opts.Logger,
		m: m, rand: opts.Rand, fns: map[string]*compiledFn{},
		ots:  newOTSessions(MaxOTSessions),
		kkrt: newKKRTSessions(MaxKKRTSessions, opts.KKRTSessionTTL, m, opts.Logger.Info)}, nil
}

// Register registers the Garbler service on s.
func (g *Garbler) Register(s grpc.ServiceRegistrar) { ppsv1.RegisterGarblerServer(s, g) }

// Identity is the garbler's public identity key (what devices pin, D20).
func (g *Garbler) Identity() []byte { return g.signer.Public() }

// reject counts a refusal and returns its gRPC status.
func (g *Garbler) reject(code codes.Code, reason string, err error) error {
	g.m.rejections.WithLabelValues(reason).Inc()
	return status.Error(code, err.Error())
}

// --- Setup (spec §8.9) ---

// Setup answers a device's relayed setup message: a publisher's hello (the publisher
// ratchet key K_0 from a crypto_kx exchange with a fresh ephemeral key) or a subscriber's
// sub (the function key, sealed). The answer is signed by the garbler's identity over the
// hello's transcript, so a broker that changes a relayed byte or substitutes a key exchange
// is caught by the device (§10 #11).
func (g *Garbler) Setup(ctx context.Context, req *ppsv1.SetupRequest) (*ppsv1.SetupResponse, error) {
	h, err := contract.DecodeHello(req.GetMessage())
	if err != nil {
		g.m.setups.WithLabelValues("unknown", "malformed").Inc()
		return nil, g.reject(codes.InvalidArgument, "malformed_setup", fmt.Errorf("setup: %w", err))
	}
	var resp *ppsv1.SetupResponse
	if h.Type == contract.TypeHello {
		resp, err = g.setupPublisher(ctx, h)
	} else {
		resp, err = g.setupSubscriber(ctx, h)
	}
	outcome := "ok"
	switch status.Code(err) {
	case codes.OK:
	case codes.PermissionDenied, codes.InvalidArgument:
		outcome = "refused"
	default:
		outcome = "error"
	}
	g.m.setups.WithLabelValues(h.Type, outcome).Inc()
	return resp, err
}

// refuse answers a setup with a contract.Notice "refused" for the device, carried as the
// status's detail (a SetupResponse), so the broker can relay it.
func (g *Garbler) refuse(code codes.Code, reason string, h *contract.Hello, why string) error {
	g.m.rejections.WithLabelValues(reason).Inc()
	n := contract.Notice{V: contract.Version, Type: contract.TypeRefused, Fn: h.Fn, Reason: why}
	b, err := json.Marshal(&n)
	st := status.New(code, "setup refused: "+why)
	if err == nil {
		if d, err := st.WithDetails(&ppsv1.SetupResponse{Message: b, DeviceId: h.DeviceID()}); err == nil {
			st = d
		}
	}
	return st.Err()
}

// handshake draws the garbler's ephemeral X25519 key and derives the session keys with the
// device's (crypto_kx, server side).
func (g *Garbler) handshake(h *contract.Hello) (*ecdh.PrivateKey, pps.SessionKeys, []byte, error) {
	eph, err := ecdh.X25519().GenerateKey(g.rand)
	if err != nil {
		return nil, pps.SessionKeys{}, nil, status.Errorf(codes.Internal, "ephemeral key: %v", err)
	}
	keys, err := pps.ServerSessionKeys(eph, h.XEphPK)
	if err != nil {
		return nil, pps.SessionKeys{}, nil, g.reject(codes.InvalidArgument, "bad_key_exchange", fmt.Errorf("%s: %w", h.Type, err))
	}
	nonce := make([]byte, contract.NonceSize)
	if _, err := io.ReadFull(g.rand, nonce); err != nil {
		keys.Zero()
		return nil, pps.SessionKeys{}, nil, status.Errorf(codes.Internal, "nonce: %v", err)
	}
	return eph, keys, nonce, nil
}

// signAck signs ack over the transcript of the hello it answers and encodes it.
func (g *Garbler) signAck(ctx context.Context, ack *contract.Ack, transcript [32]byte) ([]byte, error) {
	sig, err := g.signer.Sign(ctx, ack.SigningBytes(transcript))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "sign %s: %v", ack.Type, err)
	}
	ack.Sig = sig
	b, err := json.Marshal(ack)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode %s: %v", ack.Type, err)
	}
	return b, nil
}

func (g *Garbler) setupPublisher(ctx context.Context, h *contract.Hello) (*ppsv1.SetupResponse, error) {
	// D13: the broker enforces the signed policy; the garbler keeps it and checks it again
	// at every execution. A policy that allows nothing is refused here.
	if len(h.Policy.Fns) == 0 {
		return nil, g.refuse(codes.PermissionDenied, "empty_policy", h, "the policy allows no function")
	}
	eph, keys, nonce, err := g.handshake(h)
	if err != nil {
		return nil, err
	}
	rec := pubRecord{Key: pps.PublisherRatchetKey(&keys), Round: 0,
		Policy: contract.Policy{Fns: slices.Clone(h.Policy.Fns), MinInputs: h.Policy.MinInputs}}
	keys.Zero()
	defer rec.Key.Zero()
	pub := h.DeviceID()
	// A new hello restarts the publisher's ratchet at round 0; seeds retained from its
	// previous ratchet are erased with it.
	err = g.update(ctx, func(tx *redis.Tx) error {
		old, err := tx.ZRange(ctx, seedsKey(pub), 0, -1).Result()
		if err != nil {
			return err
		}
		sealed, err := g.seal(ctx, pubKey(pub), rec.marshal())
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range old {
				var r uint64
				if _, err := fmt.Sscan(m, &r); err == nil {
					p.Del(ctx, seedKey(pub, r))
				}
			}
			p.Del(ctx, seedsKey(pub))
			p.Set(ctx, pubKey(pub), sealed, 0)
			return nil
		})
		return err
	}, pubKey(pub))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "store publisher ratchet: %v", err)
	}
	ack := &contract.Ack{V: contract.Version, Type: contract.TypeHelloAck, XEphPK: eph.PublicKey().Bytes(), Nonce: nonce}
	msg, err := g.signAck(ctx, ack, h.Transcript())
	if err != nil {
		return nil, err
	}
	g.log.Info("publisher set up", "policy_functions", len(h.Policy.Fns))
	return &ppsv1.SetupResponse{Message: msg, DeviceId: pub, PolicyFns: slices.Clone(h.Policy.Fns),
		PolicyMinInputs: uint32(h.Policy.MinInputs)}, nil
}

func (g *Garbler) setupSubscriber(ctx context.Context, h *contract.Hello) (*ppsv1.SetupResponse, error) {
	if _, err := g.function(ctx, h.Fn); errors.Is(err, errNotFound) {
		return nil, g.refuse(codes.PermissionDenied, "unknown_function", h, "function "+h.Fn+" is not registered")
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "sub: %v", err)
	}
	eph, keys, nonce, err := g.handshake(h)
	if err != nil {
		return nil, err
	}
	defer keys.Zero()
	transcript := h.Transcript()
	ad := contract.GrantAD(h.Fn, h.EdPK, transcript)
	dev := h.DeviceID()
	sub := subRecord{ServerToClient: keys.ServerToClient, Transcript: transcript}
	copy(sub.EdPK[:], h.EdPK)
	defer sub.ServerToClient.Zero()
	var grant []byte
	err = g.update(ctx, func(tx *redis.Tx) error {
		rec, err := g.loadFn(ctx, tx, h.Fn)
		if err != nil {
			return err
		}
		defer rec.Key.Zero()
		// The grant is K' at the next unallocated round: the subscriber can unmask nothing
		// masked before it subscribed.
		fk := pps.RestoreFunctionKeys(g.rand, rec.Epoch, rec.Round, &rec.Key)
		defer fk.Zero()
		grant, err = fk.Subscribe(dev, &keys, ad)
		if err != nil {
			return err
		}
		sealed, err := g.seal(ctx, subKey(h.Fn, dev), sub.marshal())
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, subKey(h.Fn, dev), sealed, 0)
			p.SAdd(ctx, subsKey(h.Fn), dev)
			return nil
		})
		return err
	}, fnKey(h.Fn), subsKey(h.Fn))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "subscribe: %v", err)
	}
	ack := &contract.Ack{V: contract.Version, Type: contract.TypeSubAck, Fn: h.Fn, XEphPK: eph.PublicKey().Bytes(), Nonce: nonce, Grant: grant}
	msg, err := g.signAck(ctx, ack, transcript)
	if err != nil {
		return nil, err
	}
	g.log.Info("subscriber set up", "fn", h.Fn)
	return &ppsv1.SetupResponse{Message: msg, DeviceId: dev}, nil
}

// --- Functions (spec §5.2 step 2, D14) ---

// function returns fn compiled, from this replica's memory or recompiled from its record.
func (g *Garbler) function(ctx context.Context, fn string) (*compiledFn, error) {
	if err := contract.ValidFnID(fn); err != nil {
		return nil, errNotFound
	}
	g.mu.Lock()
	cf := g.fns[fn]
	g.mu.Unlock()
	if cf != nil {
		return cf, nil
	}
	rec, err := g.loadFn(ctx, g.rdb, fn)
	if err != nil {
		return nil, err
	}
	rec.Key.Zero()
	f, err := dsl.Compile(rec.Source)
	if err != nil {
		return nil, fmt.Errorf("recompile function %s: %w", fn, err)
	}
	if f.ID != fn {
		return nil, fmt.Errorf("function record %s holds the source of %s: %w", fn, f.ID, ErrSealed)
	}
	return g.remember(f, ppsv1.Mode(rec.Mode), g.ttl(rec.SeedTTL))
}

func (g *Garbler) remember(f *dsl.Function, mode ppsv1.Mode, ttl time.Duration) (*compiledFn, error) {
	plan, err := gc.Compile(f.Circuit)
	if err != nil {
		return nil, fmt.Errorf("plan of function %s: %w", f.ID, err)
	}
	cf := &compiledFn{f: f, plan: plan, hash: plan.Hash(), mode: mode, ttl: ttl}
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.fns[f.ID]; old != nil && old.mode == mode && old.ttl == ttl {
		return old, nil
	}
	g.fns[f.ID] = cf
	return cf, nil
}

func (g *Garbler) ttl(seconds uint64) time.Duration {
	if seconds == 0 {
		return g.opts.SeedTTL
	}
	return time.Duration(seconds) * time.Second
}

// retention is how long seeds retained now live: a seed serves every function that reads
// its publisher, so the longest TTL of the functions this replica knows.
func (g *Garbler) retention(cf *compiledFn) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	ttl := cf.ttl
	for _, f := range g.fns {
		ttl = max(ttl, f.ttl)
	}
	return ttl
}

// RegisterFunction compiles a function (dsl.Compile, then gc.Compile) and creates its
// record with epoch 0 and a fresh K'_0, or — idempotently — returns the existing one.
func (g *Garbler) RegisterFunction(ctx context.Context, req *ppsv1.RegisterFunctionRequest) (*ppsv1.RegisterFunctionResponse, error) {
	switch req.GetMode() {
	case ppsv1.Mode_MODE_FAITHFUL, ppsv1.Mode_MODE_HARDENED:
	default:
		return nil, g.reject(codes.InvalidArgument, "bad_mode", fmt.Errorf("register function: mode %v, want MODE_FAITHFUL or MODE_HARDENED", req.GetMode()))
	}
	if req.GetSeedTtlSeconds() > uint64(MaxSeedTTL/time.Second) {
		return nil, g.reject(codes.InvalidArgument, "bad_seed_ttl", fmt.Errorf("register function: seed_ttl_seconds %d above %s", req.GetSeedTtlSeconds(), MaxSeedTTL))
	}
	if len(req.GetSource()) > maxSource {
		return nil, g.reject(codes.InvalidArgument, "bad_source", fmt.Errorf("register function: source of %d bytes, at most %d", len(req.GetSource()), maxSource))
	}
	f, err := dsl.Compile(req.GetSource())
	if err != nil {
		return nil, g.reject(codes.InvalidArgument, "bad_source", fmt.Errorf("register function: %w", err))
	}
	if g.opts.Functions != nil && !g.opts.Functions[f.ID] {
		return nil, g.reject(codes.PermissionDenied, "function_not_declared", fmt.Errorf("register function %s: not in the garbler's pipelines file", f.ID))
	}
	var rec *fnRecord
	err = g.update(ctx, func(tx *redis.Tx) error {
		var err error
		rec, err = g.loadFn(ctx, tx, f.ID)
		switch {
		case errors.Is(err, errNotFound):
			rec = &fnRecord{Source: f.Source}
			if _, err := io.ReadFull(g.rand, rec.Key[:]); err != nil {
				return fmt.Errorf("function key: %w", err)
			}
		case err != nil:
			return err
		case rec.Source != f.Source:
			return fmt.Errorf("function record %s holds another source: %w", f.ID, ErrSealed)
		case rec.Mode == byte(req.GetMode()) && rec.SeedTTL == req.GetSeedTtlSeconds():
			return nil // registered already: nothing to write
		}
		rec.Mode, rec.SeedTTL = byte(req.GetMode()), req.GetSeedTtlSeconds()
		sealed, err := g.seal(ctx, fnKey(f.ID), rec.marshal())
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, fnKey(f.ID), sealed, 0)
			return nil
		})
		return err
	}, fnKey(f.ID))
	if rec != nil {
		defer rec.Key.Zero()
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "register function %s: %v", f.ID, err)
	}
	cf, err := g.remember(f, req.GetMode(), g.ttl(rec.SeedTTL))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "register function %s: %v", f.ID, err)
	}
	g.m.functions.Inc()
	g.log.Info("function registered", "fn", f.ID, "mode", modeName(req.GetMode()), "slots", len(f.Layout.Slots), "and_gates", cf.plan.ANDCount(),
		"epoch", rec.Epoch, "round", rec.Round)
	return &ppsv1.RegisterFunctionResponse{FnId: f.ID, CircuitHash: cf.hash[:], AndGates: uint64(cf.plan.ANDCount()),
		Slots: uint32(len(f.Layout.Slots)), OutputBits: uint32(f.OutputBits()), Epoch: rec.Epoch, Round: rec.Round}, nil
}

// Revoke removes a subscriber and starts a new function key epoch with a fresh K'_0 at
// round 0 (D14, pps.FunctionKeys.Revoke): the remaining subscribers get it in a "regrant"
// sealed under their own session and signed over their own hello's transcript; the revoked
// one can unmask nothing masked afterwards.
func (g *Garbler) Revoke(ctx context.Context, req *ppsv1.RevokeRequest) (*ppsv1.RevokeResponse, error) {
	fn, dev := req.GetFnId(), req.GetDeviceId()
	if err := errors.Join(contract.ValidFnID(fn), contract.ValidDeviceID(dev)); err != nil {
		return nil, g.reject(codes.InvalidArgument, "bad_request", fmt.Errorf("revoke: %w", err))
	}
	type regrant struct {
		dev        string
		grant      []byte
		transcript [32]byte
	}
	var (
		grants   []regrant
		epoch    uint64
		notFound error
	)
	err := g.update(ctx, func(tx *redis.Tx) error {
		grants, notFound = nil, nil
		rec, err := g.loadFn(ctx, tx, fn)
		if errors.Is(err, errNotFound) {
			notFound = fmt.Errorf("revoke: function %s is not registered", fn)
			return nil
		}
		if err != nil {
			return err
		}
		defer rec.Key.Zero()
		subs, err := tx.SMembers(ctx, subsKey(fn)).Result()
		if err != nil {
			return err
		}
		if !slices.Contains(subs, dev) {
			notFound = fmt.Errorf("revoke: %s is not a subscriber of %s", dev, fn)
			return nil
		}
		// The remaining subscribers' session keys from their records; pps.FunctionKeys.Revoke
		// starts the new epoch (a fresh K'_0 at round 0) and seals their regrants.
		fk := pps.RestoreFunctionKeys(g.rand, rec.Epoch, rec.Round, &rec.Key)
		defer fk.Zero()
		transcripts := map[string][32]byte{}
		for _, s := range subs {
			if s == dev {
				fk.Known(s, &pps.SessionKeys{}, nil)
				continue
			}
			pt, err := g.open(ctx, tx, subKey(fn, s))
			if errors.Is(err, errNotFound) {
				continue // a subscriber whose record is gone cannot be re-granted
			}
			if err != nil {
				return err
			}
			sr, err := decodeSubRecord(pt)
			clear(pt)
			if err != nil {
				return err
			}
			keys := pps.SessionKeys{ServerToClient: sr.ServerToClient}
			fk.Known(s, &keys, contract.GrantAD(fn, sr.EdPK[:], sr.Transcript))
			keys.Zero()
			sr.ServerToClient.Zero()
			transcripts[s] = sr.Transcript
		}
		sealedGrants, err := fk.Revoke(dev)
		if err != nil {
			return err
		}
		for _, s := range slices.Sorted(maps.Keys(sealedGrants)) {
			grants = append(grants, regrant{dev: s, grant: sealedGrants[s], transcript: transcripts[s]})
		}
		rec.Epoch, rec.Round, rec.Key = fk.Export()
		sealed, err := g.seal(ctx, fnKey(fn), rec.marshal())
		if err != nil {
			return err
		}
		epoch = rec.Epoch
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, fnKey(fn), sealed, 0)
			p.Del(ctx, subKey(fn, dev))
			p.SRem(ctx, subsKey(fn), dev)
			return nil
		})
		return err
	}, fnKey(fn), subsKey(fn))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "revoke: %v", err)
	}
	if notFound != nil {
		return nil, g.reject(codes.NotFound, "unknown_subscriber", notFound)
	}
	resp := &ppsv1.RevokeResponse{Epoch: epoch}
	for _, r := range grants {
		ack := &contract.Ack{V: contract.Version, Type: contract.TypeRegrant, Fn: fn, Grant: r.grant}
		msg, err := g.signAck(ctx, ack, r.transcript)
		if err != nil {
			return nil, err
		}
		resp.Regrants = append(resp.Regrants, &ppsv1.Regrant{DeviceId: r.dev, Message: msg})
	}
	g.m.revokes.Inc()
	g.log.Info("subscriber revoked", "fn", fn, "epoch", epoch, "regrants", len(resp.Regrants))
	return resp, nil
}

// Release erases the retained seeds of the publisher rounds the broker will not ask for
// again (D8), and moves each ratchet past them.
func (g *Garbler) Release(ctx context.Context, req *ppsv1.ReleaseRequest) (*ppsv1.ReleaseResponse, error) {
	for _, r := range req.GetReleases() {
		if err := contract.ValidDeviceID(r.GetPubId()); err != nil {
			return nil, g.reject(codes.InvalidArgument, "bad_request", fmt.Errorf("release: %w", err))
		}
	}
	total := 0
	for _, r := range req.GetReleases() {
		n, err := g.releasePublisher(ctx, r.GetPubId(), r.GetBeforeRound())
		if errors.Is(err, pps.ErrRoundTooFar) {
			return nil, g.reject(codes.InvalidArgument, "round_too_far", err)
		}
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "release: %v", err)
		}
		total += n
	}
	g.m.released.Add(float64(total))
	g.log.Debug("rounds released", "publishers", len(req.GetReleases()), "seeds_erased", total)
	return &ppsv1.ReleaseResponse{}, nil
}
