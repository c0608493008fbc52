package roles

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// The KKRT consistency check on the garbler (D16b): SetupKKRT creates a pps.KKRTResponder
// per broker session, EvaluateKKRT answers a check with it. Sessions live in memory only
// (the OPRF sender's secret s never leaves the process), bounded by MaxKKRTSessions (least
// recently used evicted beyond it) and dropped after KKRTSessionTTL without a check; a
// broker whose session is gone gets ABORTED and sets up again.

const (
	// MaxKKRTSessions bounds the KKRT sessions a garbler replica holds: one per broker
	// replica, so a few.
	MaxKKRTSessions = 64
	// DefaultKKRTSessionTTL is how long a KKRT session lives without a check: longer than a
	// daily schedule (like DefaultSeedTTL), so a daily pipeline's broker finds its session
	// at the next tick. A broker checks at every execution, so a session idle this long
	// belongs to a broker that is gone or has set up a new one; a session is a few KB and
	// MaxKKRTSessions bounds them.
	DefaultKKRTSessionTTL = 26 * time.Hour
)

// GarblerMaxRecvMsgSize is the gRPC receive limit a garbler server needs: the largest KKRT
// check request (pps.MaxKKRTRequestSize) and the largest OPRF-PSI request, with the
// protobuf framing and the slot list around it.
func GarblerMaxRecvMsgSize() int {
	return max(pps.MaxKKRTRequestSize, pps.MaxPSIElements*36) + slotListBound + 1<<10
}

// GarblerMaxSendMsgSize is the gRPC send limit of a garbler server (and the broker's
// receive limit for unary answers): the largest KKRT or OPRF-PSI response and a garbled
// stream chunk.
func GarblerMaxSendMsgSize() int {
	return max(pps.MaxKKRTResponseSize, pps.MaxPSIResponseSize, MaxChunkBytes) + 1<<20
}

// slotListBound bounds the protobuf bytes of a request's SlotInput list: every slot of the
// largest check (one slot per 32 positions), each at most a 64-hex-character publisher id
// and three varints with their tags.
const slotListBound = (pps.MaxKKRTPositions / pps.ValueBits) * (2 + 2 + 2 + 64 + 3*10 + 3)

// kkrtSession is one broker's KKRT session: the responder, and its expiry timer.
type kkrtSession struct {
	id    ot.SessionID
	resp  *pps.KKRTResponder
	elem  *list.Element
	timer *time.Timer
}

// kkrtSessions is the garbler's table of KKRT sessions.
type kkrtSessions struct {
	mu   sync.Mutex
	byID map[ot.SessionID]*kkrtSession
	lru  *list.List // of *kkrtSession, most recent first
	max  int
	ttl  time.Duration
	// ended counts sessions that ended other than by a new setup: "expired", "evicted",
	// "dropped" (a batch the sender refused).
	ended  func(reason string)
	gauge  func(n int)
	logger func(msg string, args ...any)
}

func newKKRTSessions(max int, ttl time.Duration, m *garblerMetrics, log func(string, ...any)) *kkrtSessions {
	return &kkrtSessions{byID: map[ot.SessionID]*kkrtSession{}, lru: list.New(), max: max, ttl: ttl,
		ended:  func(r string) { m.kkrtEnded.WithLabelValues(r).Inc() },
		gauge:  func(n int) { m.kkrtSessions.Set(float64(n)) },
		logger: log}
}

// add stores a new session, evicting the least recently used beyond max.
func (t *kkrtSessions) add(id ot.SessionID, r *pps.KKRTResponder) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; ok {
		return fmt.Errorf("KKRT session %x exists", id[:4])
	}
	for len(t.byID) >= t.max {
		t.removeLocked(t.lru.Back().Value.(*kkrtSession), "evicted")
	}
	s := &kkrtSession{id: id, resp: r}
	s.elem = t.lru.PushFront(s)
	s.timer = time.AfterFunc(t.ttl, func() { t.expire(s) })
	t.byID[id] = s
	t.gauge(len(t.byID))
	return nil
}

// get returns the session id, marking it used and pushing its expiry back.
func (t *kkrtSessions) get(id ot.SessionID) (*kkrtSession, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[id]
	if ok {
		t.lru.MoveToFront(s.elem)
		s.timer.Reset(t.ttl)
	}
	return s, ok
}

// expire drops s if it is still the table's session of its id (its timer fired).
func (t *kkrtSessions) expire(s *kkrtSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] == s {
		t.removeLocked(s, "expired")
	}
}

// drop forgets a session whose state no longer matches its broker's.
func (t *kkrtSessions) drop(s *kkrtSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] == s {
		t.removeLocked(s, "dropped")
	}
}

func (t *kkrtSessions) removeLocked(s *kkrtSession, reason string) {
	s.timer.Stop()
	t.lru.Remove(s.elem)
	delete(t.byID, s.id)
	t.ended(reason)
	t.gauge(len(t.byID))
	t.logger("KKRT session ended", "session", fmt.Sprintf("%x", s.id[:4]), "reason", reason)
}

func (t *kkrtSessions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// SetupKKRT answers a broker's KKRT base-OT setup (D16b): the garbler is the OPRF sender
// and keeps the session's responder in memory for the broker's later EvaluateKKRT calls.
func (g *Garbler) SetupKKRT(ctx context.Context, req *ppsv1.SetupKKRTRequest) (*ppsv1.SetupKKRTResponse, error) {
	var setup ot.KKRTSetup
	if err := setup.UnmarshalBinary(req.GetSetup()); err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_kkrt", fmt.Errorf("kkrt setup: %w", err))
	}
	r, reply, err := pps.NewKKRTResponder(g.rand, &setup)
	if err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_kkrt", fmt.Errorf("kkrt setup: %w", err))
	}
	b, err := reply.MarshalBinary()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "kkrt setup: %v", err)
	}
	if err := g.kkrt.add(setup.Session, r); err != nil {
		return nil, g.reject(codes.AlreadyExists, "kkrt_session_exists", fmt.Errorf("kkrt setup: %w", err))
	}
	g.m.kkrtSetups.Inc()
	g.log.Info("KKRT session set up", "session", fmt.Sprintf("%x", setup.Session[:4]), "sessions", g.kkrt.len())
	return &ppsv1.SetupKKRTResponse{SetupReply: b, SessionId: append([]byte(nil), setup.Session[:]...)}, nil
}

// EvaluateKKRT answers one KKRT consistency check (spec §3.4, §8.4, D16b): it regenerates
// both labels of every requested position from the publishers' round seeds and sends their
// OPRF tags, sorted per position. A slot whose seed it no longer holds is reported erased
// and gets random tags, so the broker also finds it inconsistent.
func (g *Garbler) EvaluateKKRT(ctx context.Context, req *ppsv1.EvaluateKKRTRequest) (*ppsv1.EvaluateKKRTResponse, error) {
	cf, err := g.execFunction(ctx, req.GetFnId(), "kkrt check", true)
	if err != nil {
		return nil, err
	}
	var kr pps.KKRTCheckRequest
	if err := kr.UnmarshalBinary(req.GetKkrtRequest()); err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_kkrt", fmt.Errorf("kkrt check: %w", err))
	}
	if n := len(kr.Positions); n > 0 && kr.Positions[n-1].Slot() >= len(cf.f.Layout.Slots) {
		return nil, g.reject(codes.InvalidArgument, "malformed_kkrt", fmt.Errorf("kkrt check: position %d beyond the function's %d slots", kr.Positions[n-1], len(cf.f.Layout.Slots)))
	}
	sess, ok := g.kkrt.get(kr.OT.Session)
	if !ok {
		return nil, g.reject(codes.Aborted, "kkrt_session_unknown", fmt.Errorf("kkrt check: unknown KKRT session %x: run SetupKKRT again", kr.OT.Session[:4]))
	}
	ss, err := g.slotSeeds(ctx, cf, req.GetSlots(), false)
	if err != nil {
		return nil, err
	}
	defer ss.zero()
	source, done := ss.labelSource()
	defer done()
	resp, err := sess.resp.Respond(&kr, source)
	if errors.Is(err, ot.ErrSession) || errors.Is(err, ot.ErrOutOfOrder) {
		g.kkrt.drop(sess)
		return nil, g.reject(codes.Aborted, "kkrt_out_of_order", fmt.Errorf("kkrt check: %w: run SetupKKRT again", err))
	}
	if err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_kkrt", fmt.Errorf("kkrt check: %w", err))
	}
	b, err := resp.MarshalBinary()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "kkrt check: %v", err)
	}
	g.m.checks.Inc()
	g.m.kkrtPositions.Add(float64(len(kr.Positions)))
	erased := ss.gone()
	g.log.Debug("KKRT check answered", "fn", cf.f.ID, "positions", len(kr.Positions), "erased_slots", len(erased))
	return &ppsv1.EvaluateKKRTResponse{KkrtResponse: b, ErasedSlots: erased}, nil
}
