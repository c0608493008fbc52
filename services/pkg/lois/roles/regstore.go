package roles

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// RegistrarBucket is the KV bucket where the registrar keeps its open sessions, one entry
// <cloud>.<session> each. It is on file storage: it holds seeds only wrapped by Vault Transit
// (SeedWrapper), the device fields, the epoch counter and the live epochs — never a seed, a
// stream key or a control key in clear.
const RegistrarBucket = "LOIS_REGISTRAR"

// EnsureRegistrarStore creates the registrar's bucket. Entries live ttl after their last
// write (a session's seed is due for a new HELLO after 24 h at most).
func EnsureRegistrarStore(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (jetstream.KeyValue, error) {
	return natsx.EnsureKV(ctx, js, RegistrarBucket, ttl)
}

// storedStream names one registered epoch of a session (no key: it is derived again from
// the seed).
type storedStream struct {
	Dir    string `json:"dir"`
	SID    uint16 `json:"sid"`
	Epoch  uint32 `json:"epoch"`
	Expiry int64  `json:"expiry_unix"`
}

// storedSession is a session's entry in RegistrarBucket.
type storedSession struct {
	// WrappedSeed is the seed as Vault Transit wrapped it (vault:v<n>:…).
	WrappedSeed string         `json:"wrapped_seed"`
	Base        contract.Keys  `json:"base"` // the record's device fields, no streams
	Services    []uint16       `json:"services"`
	N           uint32         `json:"n"`
	Lifetime    time.Duration  `json:"lifetime"`
	Epoch       uint32         `json:"epoch"`
	RekeyStart  int64          `json:"rekey_start_unix"`
	RekeyUsed   uint64         `json:"rekey_used"`
	Live        []storedStream `json:"live"`
}

// ControlKey is a session's control key: HKDF-SHA256 of its seed. The DI gets it with its
// keys; the registrar derives it again from the seed after a restart.
func ControlKey(seed *[lois.SeedSize]byte) [contract.ControlKeySize]byte {
	var out [contract.ControlKeySize]byte
	k, err := hkdf.Key(sha256.New, seed[:], nil, "LOIS/v1/control", contract.ControlKeySize)
	if err != nil {
		panic(err) // fixed sizes: never
	}
	copy(out[:], k)
	clear(k)
	return out
}

func (r *Registrar) storeKey(session string) string { return r.Cloud + "." + session }

// storeNew wraps a new session's seed and stores the session.
func (r *Registrar) storeNew(ctx context.Context, session string, ss *regSession) error {
	if r.Store == nil {
		return nil
	}
	if r.Wrapper == nil {
		return errors.New("lois registrar: a store without a seed wrapper would hold seeds in clear")
	}
	r.mu.Lock()
	seed := ss.seed
	r.mu.Unlock()
	w, err := r.Wrapper.Wrap(ctx, session, &seed)
	clear(seed[:])
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ss.wrapped = w
	return r.put(ctx, session, ss)
}

// put writes a session's entry (the caller holds r.mu).
func (r *Registrar) put(ctx context.Context, session string, ss *regSession) error {
	if r.Store == nil {
		return nil
	}
	if ss.wrapped == "" {
		return errors.New("lois registrar: session seed not wrapped")
	}
	e := storedSession{WrappedSeed: ss.wrapped, Base: ss.base, N: ss.n, Lifetime: ss.lifetime, Epoch: ss.epoch,
		RekeyStart: ss.rekey.Start, RekeyUsed: ss.rekey.Used, Live: ss.live}
	for sid := range ss.services {
		e.Services = append(e.Services, sid)
	}
	b, err := json.Marshal(&e)
	if err != nil {
		return err
	}
	if _, err := r.Store.Put(ctx, r.storeKey(session), b); err != nil {
		return fmt.Errorf("lois registrar: store session: %w", err)
	}
	return nil
}

// Restore loads the sessions in Store (a restarted registrar): each seed is unwrapped, the
// epochs still live are registered again in the deduplicating table, and later grants carry
// on from the stored epoch counter. It returns the number of sessions restored; an entry that
// does not unwrap is logged and left alone.
func (r *Registrar) Restore(ctx context.Context, log *slog.Logger) (int, error) {
	if r.Store == nil {
		return 0, nil
	}
	if r.Wrapper == nil {
		return 0, errors.New("lois registrar: a store needs a seed wrapper")
	}
	keys, err := r.Store.ListKeysFiltered(ctx, r.Cloud+".*")
	if err != nil {
		return 0, fmt.Errorf("lois registrar: list sessions: %w", err)
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	_ = keys.Stop()
	now := time.Now()
	restored := 0
	for _, key := range names {
		ent, err := r.Store.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return restored, err
		}
		var e storedSession
		if err := json.Unmarshal(ent.Value(), &e); err != nil || e.Base.Session == "" || r.storeKey(e.Base.Session) != key {
			log.Warn("registrar store entry dropped", "key", key, "err", err)
			continue
		}
		seed, err := r.Wrapper.Unwrap(ctx, e.Base.Session, e.WrappedSeed)
		if err != nil {
			log.Warn("stored session not restored", "err", err)
			continue
		}
		ss := &regSession{seed: seed, base: e.Base, services: map[uint16]bool{}, n: e.N, lifetime: e.Lifetime, epoch: e.Epoch,
			rekey: lois.Rekey{Start: e.RekeyStart, Used: e.RekeyUsed}, wrapped: e.WrappedSeed}
		clear(seed[:])
		ss.ctl = ControlKey(&ss.seed)
		for _, sid := range e.Services {
			ss.services[sid] = true
		}
		r.mu.Lock()
		for _, ls := range e.Live {
			if ls.Expiry < now.Unix() {
				continue
			}
			d := lois.Up
			if ls.Dir == lois.Down.String() {
				d = lois.Down
			}
			st := lois.Stream{Key: lois.StreamKey(ss.seed, d, ls.SID, ls.Epoch), Dir: d, SID: ls.SID, Epoch: ls.Epoch, N: ss.n, Expiry: ls.Expiry}
			_, err := r.Table.Register(&st)
			clear(st.Key[:])
			if err != nil {
				r.mu.Unlock()
				return restored, fmt.Errorf("lois registrar: re-register a restored epoch: %w", err)
			}
			ss.live = append(ss.live, ls)
		}
		if r.DeviceLinksOverNATS {
			ss.device = &natsLink{nc: r.JS.Conn(), cloud: r.Cloud, session: e.Base.Session, ctl: ss.ctl}
		}
		if r.sessions == nil {
			r.sessions = map[string]*regSession{}
		}
		r.sessions[e.Base.Session] = ss
		r.mu.Unlock()
		restored++
	}
	return restored, nil
}
