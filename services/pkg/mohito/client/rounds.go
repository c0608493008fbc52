package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	mohitov1 "github.com/obscura-iot/obscura/services/proto/obscura/mohito/v1"
)

// feedIdle is how long the round feed stays open after the last NextRound: a user that
// stops sending closes its stream when the gateway next ends it.
const feedIdle = 30 * time.Second

// roundFeed keeps the latest round a gateway pushed on its Rounds stream, for every user of
// one gateway connection: the GatewayClients on one *grpc.ClientConn share one feed and one
// stream (feedOf), so a connection carrying many users' tokens gets each round once, not once
// per user (the bench's 1,600 users on 4 connections read ≈ 4 pushes per command). M0 is the
// same public, fixed-size envelope for every user, and the gateway already sees which tokens
// share a connection, so sharing the stream tells it nothing new. The stream runs while
// NextRound is used and stops when idle, when the connection closes, or for good when the
// gateway does not push rounds (Unimplemented): NextRound then polls RoundInfo.
type roundFeed struct {
	rpc  mohitov1.GatewayClient // the connection's stub (nil in unit tests of the timing)
	conn *grpc.ClientConn       // the shared connection (nil: a feed of one GatewayClient)

	mu        sync.Mutex
	ri        *mohito.RoundInfo
	at        time.Time     // when ri arrived
	period    time.Duration // the interval between the last two rounds' arrivals (0: unknown)
	changed   chan struct{} // closed and replaced when ri changes or the feed stops
	running   bool
	unpushed  bool // the gateway has no Rounds: poll
	lastUse   time.Time
	lastError error
	submitLag time.Duration // smoothed time from NextRound's answer to Submit's (observeSubmit)
	// token authenticates the next Rounds stream: the token of the user that last asked
	// NextRound (a user whose token the gateway refuses does not deafen the others for
	// longer than the backoff, once another user asks).
	token string
}

func newRoundFeed(rpc mohitov1.GatewayClient, conn *grpc.ClientConn) *roundFeed {
	return &roundFeed{rpc: rpc, conn: conn, changed: make(chan struct{})}
}

// feeds holds the round feed of each connection, weakly: an entry goes when every
// GatewayClient of its connection is gone and its stream has stopped.
var feeds = struct {
	mu sync.Mutex
	m  map[*grpc.ClientConn]weak.Pointer[roundFeed]
}{m: map[*grpc.ClientConn]weak.Pointer[roundFeed]{}}

// feedOf returns the round feed shared by the GatewayClients of conn; a connection of another
// type (not a *grpc.ClientConn) gets a feed of its own.
func feedOf(conn grpc.ClientConnInterface, rpc mohitov1.GatewayClient) *roundFeed {
	cc, ok := conn.(*grpc.ClientConn)
	if !ok || cc == nil {
		return newRoundFeed(rpc, nil)
	}
	feeds.mu.Lock()
	defer feeds.mu.Unlock()
	if f := feeds.m[cc].Value(); f != nil {
		return f
	}
	f := newRoundFeed(rpc, cc)
	feeds.m[cc] = weak.Make(f)
	runtime.AddCleanup(f, func(cc *grpc.ClientConn) {
		feeds.mu.Lock()
		defer feeds.mu.Unlock()
		if feeds.m[cc].Value() == nil {
			delete(feeds.m, cc)
		}
	}, cc)
	return f
}

// NextRound returns the current round once its t is greater than after: from the rounds the
// gateway pushes, without a call per command. Where the gateway cannot push (an older
// gateway, or a proxy that does not carry server streams) it polls RoundInfo every poll.
func (c *GatewayClient) NextRound(ctx context.Context, after uint64, poll time.Duration) (*mohito.RoundInfo, error) {
	f := c.rounds
	for {
		f.mu.Lock()
		f.lastUse, f.token = time.Now(), c.token
		ri, ch, unpushed := f.ri, f.changed, f.unpushed
		if !f.running && !unpushed {
			if f.closed() {
				err := f.lastError
				f.mu.Unlock()
				return nil, err
			}
			f.running = true
			go f.feed()
		}
		f.mu.Unlock()
		if unpushed {
			ri, err := c.RoundInfo(ctx)
			if err == nil && ri.T > after {
				return ri, nil
			}
			if !clock.Sleep(ctx, poll) {
				return nil, context.Cause(ctx)
			}
			continue
		}
		if ri != nil && ri.T > after {
			// A round near the end of its period is likely closed by the time the
			// submission arrives (rounds are pipelined: t closes as t+1 opens), and a
			// refused submission costs a call and a round. Wait for the next one instead,
			// for at most the rest of the period and a little more.
			if late := f.lateBy(ri); late > 0 {
				select {
				case <-ch:
					continue
				case <-time.After(late):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			return ri, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// refreshRound asks the gateway for its current round once and, when it is newer than
// after, offers it to the feed as if pushed. A refusal's trailer usually brought it already
// (Submit): then no call is made.
func (c *GatewayClient) refreshRound(ctx context.Context, after uint64) {
	if c.rounds.newest() > after {
		return
	}
	ri, age, err := c.roundInfo(ctx)
	if err != nil || ri.T <= after {
		return
	}
	c.rounds.offer(ri, age)
}

// newest returns the newest round the feed holds (0: none).
func (f *roundFeed) newest() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ri == nil {
		return 0
	}
	return f.ri.T
}

// observeSubmit records how long a submission took from choosing its round to the gateway's
// answer (sealing M1 and the call): lateBy keeps that much of a round's period, twice over,
// as the margin a submission needs to arrive before the round closes.
func (f *roundFeed) observeSubmit(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitLag == 0 {
		f.submitLag = d
		return
	}
	f.submitLag += (d - f.submitLag) / 4
}

// lastFraction is the part of a round's period after which NextRound prefers the next round.
const lastFraction = 0.25

// lateBy returns how long to wait for ri's successor when ri, the current round, is in the
// last lastFraction of its period (0: submit to ri).
func (f *roundFeed) lateBy(ri *mohito.RoundInfo) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.period <= 0 || f.ri != ri {
		return 0
	}
	age := time.Since(f.at)
	// The last quarter of the period, or more when this client's submissions take longer
	// than an eighth of it (a loaded client; at most the last three quarters).
	margin := max(time.Duration(lastFraction*float64(f.period)), min(2*f.submitLag, 3*f.period/4))
	if age < f.period-margin || age > 2*f.period {
		return 0
	}
	// Past its period the round is closed or closing and its successor's push is late (a
	// loaded client reads its pushes late): wait for it a quarter period rather than not at all.
	return max(f.period-age+f.period/10, f.period/4)
}

// offer makes ri the feed's round if it is newer; age is how long ago it opened at the
// gateway (negative: unknown, taken as now — a push is sent the moment it opens).
func (f *roundFeed) offer(ri *mohito.RoundInfo, age time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ri == nil || ri.T > f.ri.T {
		now := time.Now().Add(-max(age, 0))
		if f.ri != nil && ri.T == f.ri.T+1 {
			f.period = now.Sub(f.at)
		}
		f.ri, f.at = ri, now
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// closed reports whether the feed stopped because its connection was closed (f.mu held): a
// closed *grpc.ClientConn never carries a stream again, so NextRound returns the error
// instead of starting the feed over and over.
func (f *roundFeed) closed() bool {
	return status.Code(f.lastError) == codes.Canceled && f.conn != nil && f.conn.GetState() == connectivity.Shutdown
}

// feed holds the Rounds stream open, re-opening it when the gateway ends it, until the feed
// is idle, the connection closes or the gateway turns out not to push rounds.
func (f *roundFeed) feed() {
	backoff := 50 * time.Millisecond
	stop := func(unpushed bool, err error) {
		f.mu.Lock()
		f.running, f.lastError = false, err
		f.unpushed = f.unpushed || unpushed
		close(f.changed)
		f.changed = make(chan struct{})
		f.mu.Unlock()
	}
	for {
		f.mu.Lock()
		var after uint64
		if f.ri != nil {
			after = f.ri.T
		}
		idle := time.Since(f.lastUse) > feedIdle
		f.mu.Unlock()
		if idle {
			stop(false, nil)
			return
		}
		err := f.follow(after)
		switch status.Code(err) {
		case codes.OK:
			backoff = 50 * time.Millisecond
			continue
		case codes.Unimplemented:
			stop(true, err)
			return
		case codes.Canceled:
			stop(false, err) // the connection is closing
			return
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// follow reads one Rounds stream to its end (nil when the gateway ended it), authenticated
// with the token of the user that last asked NextRound.
func (f *roundFeed) follow(after uint64) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.mu.Lock()
	token := f.token
	f.mu.Unlock()
	ctx = metadata.AppendToOutgoingContext(ctx, contract.AuthorizationMetadata, token)
	stream, err := f.rpc.Rounds(ctx, &mohitov1.RoundsRequest{After: &after})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ri, err := mohito.ParseRoundInfo(resp.GetRoundInfo())
		if err != nil {
			return status.Error(codes.Internal, "malformed M0 on the rounds stream")
		}
		f.offer(ri, -1)
	}
}
