package contract_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

func pw(u string) string { return u + "-pw" }

// TestTrustDomainIsolation proves that a vendor's credentials cannot read
// integrator-internal subjects or another vendor's traffic, and that the
// exported inboxes carry JetStream publishes (with their acks) across exactly
// one account boundary.
func TestTrustDomainIsolation(t *testing.T) {
	n := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig([][]string{{"d0"}, {"d1"}}, pw)))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	integ := n.Connect(t, nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	v0 := n.Connect(t, nats.UserInfo(contract.VendorUser(0), pw(contract.VendorUser(0))))
	v1 := n.Connect(t, nats.UserInfo(contract.VendorUser(1), pw(contract.VendorUser(1))))

	ijs, _ := jetstream.New(integ)
	v0js, _ := jetstream.New(v0)
	v1js, _ := jetstream.New(v1)
	if _, err := natsx.EnsureStream(ctx, ijs, "I_IN", "mohito.i.in.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureStream(ctx, ijs, "I_WORK", "mohito.r.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureStream(ctx, v0js, "V_IN", contract.VendorInbox(0)+".>"); err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.EnsureStream(ctx, v1js, "V_IN", contract.VendorInbox(1)+".>"); err != nil {
		t.Fatal(err)
	}

	// Eavesdroppers: vendor 1 listens to everything its account can see.
	spy1, err := v1.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	spy0, err := v0.SubscribeSync("mohito.>")
	if err != nil {
		t.Fatal(err)
	}
	v1.Flush()
	v0.Flush()

	// Integrator-internal work and a message for vendor 0 only.
	if err := natsx.Publish(ctx, ijs, "mohito.r.7.part.0", "p1", []byte("internal"), nil); err != nil {
		t.Fatal(err)
	}
	if err := natsx.Publish(ctx, ijs, contract.VendorInbox(0)+".r.7.fwd", "f1", []byte("for-v0"), nil); err != nil {
		t.Fatalf("cross-account JetStream publish to vendor 0: %v", err)
	}
	// Vendor 0 answers into the integrator's inbox; the ack comes back.
	if err := natsx.Publish(ctx, v0js, contract.IntegratorInbox(0)+".r.7.summary", "s1", []byte("from-v0"), nil); err != nil {
		t.Fatalf("cross-account JetStream publish from vendor 0: %v", err)
	}
	// Vendor 1 cannot reach vendor 0's inbox nor impersonate vendor 0 at the integrator.
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	if _, err := v1js.Publish(pctx, contract.IntegratorInbox(0)+".r.7.summary", []byte("forged")); err == nil {
		t.Fatal("vendor 1 published into vendor 0's slice of the integrator inbox")
	}
	pcancel()
	pctx, pcancel = context.WithTimeout(ctx, time.Second)
	if _, err := v1js.Publish(pctx, contract.VendorInbox(0)+".r.7.fwd", []byte("forged")); err == nil {
		t.Fatal("vendor 1 published into vendor 0's inbox")
	}
	pcancel()
	// Vendor 1's own marker: the last thing it may see is its own publish.
	v1.Publish("marker", nil)
	for {
		m, err := spy1.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("vendor 1 spy: %v", err)
		}
		if m.Subject == "marker" {
			break
		}
		if string(m.Data) == "forged" {
			continue // its own publishes, which went nowhere
		}
		if len(m.Subject) > 7 && m.Subject[:7] == "mohito." {
			t.Fatalf("vendor 1 saw %s (%q)", m.Subject, m.Data)
		}
	}
	// Vendor 0 sees exactly its inbox message, never the internal one.
	v0.Publish("mohito.marker", nil)
	var got []string
	for {
		m, err := spy0.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == "mohito.marker" {
			break
		}
		got = append(got, m.Subject)
	}
	for _, s := range got {
		if s == "mohito.r.7.part.0" {
			t.Fatal("vendor 0 saw an integrator-internal subject")
		}
	}
	// The vendor cannot read the integrator's streams: its JetStream API is its own.
	if _, err := v0js.Stream(ctx, "I_WORK"); err == nil {
		t.Fatal("vendor 0 opened the integrator's stream")
	}
	s, _ := v0js.Stream(ctx, "V_IN")
	if info, _ := s.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("vendor 0 inbox holds %d messages, want 1", info.State.Msgs)
	}
	is, _ := ijs.Stream(ctx, "I_IN")
	if info, _ := is.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("integrator inbox holds %d messages, want 1", info.State.Msgs)
	}
	// Device users are confined to device subjects.
	dev := n.Connect(t, nats.UserInfo(contract.DeviceUser(0, "d0"), pw(contract.DeviceUser(0, "d0"))))
	errs := make(chan error, 4)
	dev.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	if _, err := dev.SubscribeSync(contract.VendorInbox(0) + ".>"); err != nil {
		t.Fatal(err)
	}
	dev.Flush()
	select {
	case err := <-errs:
		t.Logf("device subscription to the vendor inbox refused: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("device user could subscribe to the vendor inbox")
	}
}
