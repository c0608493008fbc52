package sddr_test

import (
	"fmt"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
)

// Alice and Bob share a link value; Alice advertises it, Bob listens for it. After three of
// Alice's beacons Bob recognises her; after she revokes Bob and her epoch rotates, he sees a
// stranger.
func Example() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	alice, _ := sddr.New(sddr.Config{})
	bob, _ := sddr.New(sddr.Config{})
	link, _ := sddr.NewLinkValue(nil)
	_ = alice.AddLink("bob", link, sddr.Advertise)
	_ = bob.AddLink("alice", link, sddr.Listen)
	_ = alice.StartEpoch(now)
	_ = bob.StartEpoch(now)

	for i := range 3 {
		adv := alice.Advert() // what Alice's radio answers inquiries with
		s, _ := bob.OnBeacon(adv.Frame[:], adv.Addr, now)
		fmt.Printf("beacon %d: matches %d, recognised %v\n", i+1, len(s.Matches), s.Matches[0].Recognized)
		now = now.Add(time.Minute)
		_ = alice.NextBeacon(now)
		_ = bob.NextBeacon(now)
	}

	_ = alice.RevokeNow("bob", now) // new key and address at once; nobody else is re-keyed
	adv := alice.Advert()
	s, _ := bob.OnBeacon(adv.Frame[:], adv.Addr, now)
	fmt.Println("after revocation: new peer", s.NewPeer)
	// Output:
	// beacon 1: matches 1, recognised false
	// beacon 2: matches 1, recognised false
	// beacon 3: matches 1, recognised true
	// after revocation: new peer true
}
