// Package sddrrun is a real SDDR mailbox exchange for the e2e tests: two devices meet (each
// hears the other's beacon and derives the encounter), then leave each other sealed messages
// through a mailbox API — the service itself, the chart's edge in front of it, or a
// cluster's EncounterMailbox — and open the peer's.
package sddrrun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
)

// Pair is two devices that met, each with its side of the encounter's mailbox.
type Pair struct {
	ID         sddr.EncounterID
	BoxA, BoxB *client.Box
}

// Meet makes two fresh devices hear each other's beacon at now.
func Meet(now time.Time) (*Pair, error) {
	a, err := sddr.New(sddr.Config{})
	if err != nil {
		return nil, err
	}
	b, err := sddr.New(sddr.Config{})
	if err != nil {
		return nil, err
	}
	for _, d := range []*sddr.Device{a, b} {
		if err := d.StartEpoch(now); err != nil {
			return nil, err
		}
	}
	adA, adB := a.Advert(), b.Advert()
	sb, err := b.OnBeacon(adA.Frame[:], adA.Addr, now)
	if err != nil {
		return nil, err
	}
	sa, err := a.OnBeacon(adB.Frame[:], adB.Addr, now)
	if err != nil {
		return nil, err
	}
	if sa.ID != sb.ID {
		return nil, errors.New("the two devices derived different encounter ids")
	}
	boxA, err := client.FromDevice(a, sa.ID)
	if err != nil {
		return nil, err
	}
	boxB, err := client.FromDevice(b, sb.ID)
	if err != nil {
		return nil, err
	}
	return &Pair{ID: sa.ID, BoxA: boxA, BoxB: boxB}, nil
}

// Token is a random bearer token (what the mailbox and the edge rate-limit by).
func Token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run is one exchange: the encounter, the two clients' tokens and the plaintexts, none of
// which the mailbox may log.
type Run struct {
	Pair           *Pair
	TokenA, TokenB string
	Hello, Reply   []byte
}

// Exchange meets two devices and has them exchange one message each way through the mailbox
// at baseURL, each with its own token: A seals and puts, B gets and opens, then B answers and
// A opens. h is the HTTP client (nil: http.DefaultClient). The run is returned even on error.
func Exchange(ctx context.Context, baseURL string, h *http.Client) (*Run, error) {
	p, err := Meet(time.Now())
	if err != nil {
		return nil, err
	}
	r := &Run{Pair: p, TokenA: Token(), TokenB: Token(),
		Hello: []byte("we met at the bus stop " + Token()), Reply: []byte("nice to meet you again " + Token())}
	ca := &client.Client{BaseURL: baseURL, Token: r.TokenA, HTTP: h}
	cb := &client.Client{BaseURL: baseURL, Token: r.TokenB, HTTP: h}
	if err := ca.Send(ctx, p.BoxA, r.Hello); err != nil {
		return r, fmt.Errorf("device A puts: %w", err)
	}
	if err := expect(ctx, cb, p.BoxB, r.Hello); err != nil {
		return r, fmt.Errorf("device B gets: %w", err)
	}
	if err := cb.Send(ctx, p.BoxB, r.Reply); err != nil {
		return r, fmt.Errorf("device B puts: %w", err)
	}
	if err := expect(ctx, ca, p.BoxA, r.Reply); err != nil {
		return r, fmt.Errorf("device A gets: %w", err)
	}
	return r, nil
}

// expect fetches b's mailbox and wants exactly one message from the peer: want.
func expect(ctx context.Context, c *client.Client, b *client.Box, want []byte) error {
	got, err := c.Receive(ctx, b)
	if err != nil {
		return err
	}
	if len(got) != 1 || !bytes.Equal(got[0], want) {
		return fmt.Errorf("opened %q, want exactly %q", got, want)
	}
	return nil
}
