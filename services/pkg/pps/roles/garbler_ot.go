package roles

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/ot"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// MaxOTSessions bounds the OT-extension sessions a garbler replica holds (H1, D21): one per
// broker replica, so a few; the least recently used is evicted beyond it, and its broker
// runs OTSetup again on its next execution (ABORTED).
const MaxOTSessions = 64

// errOTSessionUnknown: a garble request's OT request names a session this replica does not
// hold (restart, eviction, or another replica's session).
var errOTSessionUnknown = errors.New("unknown OT session: run OTSetup again")

// otSession is the sender's side of one broker's OT-extension session. Its batches run in
// order, one at a time (IKNP's column PRG is at the batch's offset), so mu is held from the
// request's extension to the correlated reply.
type otSession struct {
	mu     sync.Mutex
	sender *ot.Sender
	elem   *list.Element
}

// otSessions is the garbler's in-memory table of sender sessions, keyed by session id.
// Nothing is persisted: the sender's base-OT secrets never leave the process, and a restart
// simply makes the brokers run OTSetup again.
type otSessions struct {
	mu   sync.Mutex
	byID map[ot.SessionID]*otSession
	lru  *list.List // of ot.SessionID, most recent first
	max  int
}

func newOTSessions(max int) *otSessions {
	return &otSessions{byID: map[ot.SessionID]*otSession{}, lru: list.New(), max: max}
}

// add stores a new session, evicting the least recently used beyond max.
func (t *otSessions) add(id ot.SessionID, s *ot.Sender) (evicted bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; ok {
		return false, fmt.Errorf("OT session %x exists", id[:4])
	}
	for len(t.byID) >= t.max {
		old := t.lru.Back()
		delete(t.byID, old.Value.(ot.SessionID))
		t.lru.Remove(old)
		evicted = true
	}
	t.byID[id] = &otSession{sender: s, elem: t.lru.PushFront(id)}
	return evicted, nil
}

// get returns the session id, marking it used.
func (t *otSessions) get(id ot.SessionID) (*otSession, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[id]
	if ok {
		t.lru.MoveToFront(s.elem)
	}
	return s, ok
}

// drop forgets a session whose state can no longer be trusted to match its broker's.
func (t *otSessions) drop(id ot.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byID[id]; ok {
		t.lru.Remove(s.elem)
		delete(t.byID, id)
	}
}

func (t *otSessions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// OTSetup answers a broker's base-OT setup (H1, D21): the garbler is the OT sender, and
// keeps the session's state in memory for the broker's later Garble requests.
func (g *Garbler) OTSetup(ctx context.Context, req *ppsv1.OTSetupRequest) (*ppsv1.OTSetupResponse, error) {
	var setup ot.Setup
	if err := setup.UnmarshalBinary(req.GetSetup()); err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_ot", fmt.Errorf("ot setup: %w", err))
	}
	s, reply, err := ot.NewSender(g.rand, &setup)
	if err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_ot", fmt.Errorf("ot setup: %w", err))
	}
	b, err := reply.MarshalBinary()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ot setup: %v", err)
	}
	evicted, err := g.ots.add(setup.Session, s)
	if err != nil {
		return nil, g.reject(codes.AlreadyExists, "ot_session_exists", fmt.Errorf("ot setup: %w", err))
	}
	if evicted {
		g.log.Warn("OT session table full, evicted the least recently used", "max", g.ots.max)
	}
	g.m.otSessions.Set(float64(g.ots.len()))
	g.log.Info("OT session set up", "session", fmt.Sprintf("%x", setup.Session[:4]))
	return &ppsv1.OTSetupResponse{SetupReply: b, SessionId: append([]byte(nil), setup.Session[:]...)}, nil
}
