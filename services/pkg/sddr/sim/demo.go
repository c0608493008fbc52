package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
	"github.com/obscura-iot/obscura/services/pkg/sddr/roles"
)

// DemoSummary is what the embedded demo (`obscura demo`, RunDemo) showed.
type DemoSummary struct {
	// Devices met in one place for Scans discovery intervals.
	Devices, Scans int
	// Recognized lists "who recognised whom" after the first meeting (sorted).
	Recognized []string
	// FriendsExact: exactly the friendships recognised, no stranger matched.
	FriendsExact bool
	// RevokedStops: after alice revoked carol, carol no longer recognised her while bob (not
	// re-keyed) still did.
	RevokedStops bool
	// Exchanged: alice and bob left each other a sealed message in the mailbox and opened the
	// other's; Opened is what bob read.
	Exchanged bool
	Opened    string
	// StoreOpaque: the mailbox's Redis held one key (an opaque address, not the encounter id)
	// and no plaintext.
	StoreOpaque bool
}

// Exact reports whether every step showed what it should.
func (s *DemoSummary) Exact() bool {
	return s.FriendsExact && s.RevokedStops && s.Exchanged && s.StoreOpaque
}

// demoDevice is one simulated phone.
type demoDevice struct {
	name string
	d    *sddr.Device
	// last sighting of each peer (by name) in the current scan
	seen map[string]sddr.Sighting
}

// RunDemo is SDDR's part of the embedded demo: four devices (alice, bob, carol and dave, a
// stranger) meet; alice and bob, and alice and carol, are friends (a shared link value, both
// directions), and recognise each other after a few beacons while nobody recognises dave;
// alice revokes carol (a new key and address at once) and carol stops recognising her, while
// bob, not re-keyed, still does; then alice and bob leave each other an AEAD-sealed message
// through the encounter mailbox (sddr/roles on an in-process Redis, over HTTP on loopback),
// which stores only ciphertext under an opaque address.
func RunDemo(ctx context.Context, out io.Writer) (*DemoSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	names := []string{"alice", "bob", "carol", "dave"}
	devs := map[string]*demoDevice{}
	for _, n := range names {
		d, err := sddr.New(sddr.Config{})
		if err != nil {
			return nil, err
		}
		devs[n] = &demoDevice{name: n, d: d}
	}
	for _, pair := range [][2]string{{"alice", "bob"}, {"alice", "carol"}} {
		v, err := sddr.NewLinkValue(nil)
		if err != nil {
			return nil, err
		}
		if err := devs[pair[0]].d.AddLink(pair[1], v, sddr.Advertise|sddr.Listen); err != nil {
			return nil, err
		}
		if err := devs[pair[1]].d.AddLink(pair[0], v, sddr.Advertise|sddr.Listen); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := devs[n].d.StartEpoch(now); err != nil {
			return nil, err
		}
	}
	hits := devs["alice"].d.RecognitionHits()
	fmt.Fprintf(out, "setup: %d devices with X25519 epoch keys, %d-byte beacons; friends alice–bob and alice–carol share a link value; dave is a stranger; a match is recognised after %d beacons\n",
		len(names), sddr.FrameSize, hits)

	// scan: every device answers the others' inquiry with its current beacon, then moves on to
	// its next one a discovery interval later.
	scan := func() error {
		for _, n := range names {
			devs[n].d.BeginInquiry()
			devs[n].seen = map[string]sddr.Sighting{}
		}
		for _, from := range names {
			adv := devs[from].d.Advert()
			for _, to := range names {
				if to == from {
					continue
				}
				s, err := devs[to].d.OnBeacon(adv.Frame[:], adv.Addr, now)
				if err != nil {
					return fmt.Errorf("%s hearing %s: %w", to, from, err)
				}
				devs[to].seen[from] = s
			}
		}
		now = now.Add(time.Minute)
		for _, n := range names {
			if err := devs[n].d.NextBeacon(now); err != nil {
				return err
			}
		}
		return nil
	}
	recognized := func() []string {
		var r []string
		for _, to := range names {
			for from, s := range devs[to].seen {
				for _, m := range s.Matches {
					if m.Recognized {
						r = append(r, fmt.Sprintf("%s→%s (as %q)", to, from, m.Label))
					}
				}
			}
		}
		sort.Strings(r)
		return r
	}
	sum := &DemoSummary{Devices: len(names), Scans: hits}
	for range hits {
		if err := scan(); err != nil {
			return nil, err
		}
	}
	sum.Recognized = recognized()
	want := []string{`alice→bob (as "bob")`, `alice→carol (as "carol")`, `bob→alice (as "alice")`, `carol→alice (as "alice")`}
	sum.FriendsExact = strings.Join(sum.Recognized, ",") == strings.Join(want, ",")
	fmt.Fprintf(out, "meeting: after %d beacons each, recognised %s; dave matched by nobody and matching nobody: %v\n",
		hits, strings.Join(sum.Recognized, ", "), sum.FriendsExact)

	// Revocation: alice stops advertising to carol and rotates at once; bob is not re-keyed.
	if err := devs["alice"].d.RevokeNow("carol", now); err != nil {
		return nil, err
	}
	for range hits {
		if err := scan(); err != nil {
			return nil, err
		}
	}
	after := recognized()
	carolSees, bobSees := false, false
	for _, r := range after {
		carolSees = carolSees || strings.HasPrefix(r, "carol→alice")
		bobSees = bobSees || strings.HasPrefix(r, "bob→alice")
	}
	sum.RevokedStops = !carolSees && bobSees
	fmt.Fprintf(out, "revocation: alice revoked carol (new key and address, nobody else re-keyed); %d beacons later carol recognises alice: %v, bob still does: %v\n",
		hits, carolSees, bobSees)

	// The mailbox: alice and bob hold the same encounter (their current epochs' keys).
	ab, ba := devs["alice"].seen["bob"], devs["bob"].seen["alice"]
	if ab.ID != ba.ID {
		return sum, errors.New("alice and bob derived different encounter ids")
	}
	boxA, err := client.FromDevice(devs["alice"].d, ab.ID)
	if err != nil {
		return sum, err
	}
	boxB, err := client.FromDevice(devs["bob"].d, ba.ID)
	if err != nil {
		return sum, err
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return sum, fmt.Errorf("miniredis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	mb, err := roles.NewMailbox(roles.MailboxOptions{Redis: rdb, TTL: time.Hour})
	if err != nil {
		return sum, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sum, err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mb.Serve(sctx, l) }()
	defer func() {
		stop()
		<-done
	}()
	url := "http://" + l.Addr().String()
	ca := &client.Client{BaseURL: url, Token: "alice-app-token"}
	cb := &client.Client{BaseURL: url, Token: "bob-app-token"}
	hello, reply := "coffee at the corner tomorrow?", "yes, 9:00"
	if err := ca.Send(ctx, boxA, []byte(hello)); err != nil {
		return sum, fmt.Errorf("alice sends: %w", err)
	}
	gotB, err := cb.Receive(ctx, boxB)
	if err != nil {
		return sum, fmt.Errorf("bob receives: %w", err)
	}
	if err := cb.Send(ctx, boxB, []byte(reply)); err != nil {
		return sum, fmt.Errorf("bob replies: %w", err)
	}
	gotA, err := ca.Receive(ctx, boxA)
	if err != nil {
		return sum, fmt.Errorf("alice receives: %w", err)
	}
	if len(gotB) == 1 {
		sum.Opened = string(gotB[0])
	}
	sum.Exchanged = len(gotB) == 1 && string(gotB[0]) == hello && len(gotA) == 1 && string(gotA[0]) == reply
	keys := mr.Keys()
	sum.StoreOpaque = len(keys) == 1 && keys[0] == "sddr:mb:"+boxA.Address.String() && !strings.Contains(keys[0], fmt.Sprintf("%x", ab.ID[:]))
	for _, k := range keys {
		members, _ := mr.ZMembers(k)
		for _, m := range members {
			if bytes.Contains([]byte(m), []byte(hello)) || bytes.Contains([]byte(m), []byte(reply)) {
				sum.StoreOpaque = false
			}
		}
	}
	fmt.Fprintf(out, "mailbox: alice sealed %q for bob under address %s… (derived from their encounter); bob opened %q and answered %q, which alice opened: %v\n",
		hello, boxA.Address.String()[:12], sum.Opened, reply, sum.Exchanged)
	fmt.Fprintf(out, "mailbox: its Redis holds %d key (the opaque address), ciphertext only, no encounter id: %v\n", len(keys), sum.StoreOpaque)
	return sum, nil
}
