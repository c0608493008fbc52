package roles

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestDeviceLimiterBuckets: each device has its own bucket of burst answers refilled at rate
// per second; one device's flood never takes a sibling's tokens.
func TestDeviceLimiterBuckets(t *testing.T) {
	c := clock.NewManual(time.Unix(1_800_000_000, 0))
	l := newDeviceLimiter(2, 3, c.Now)
	allowed := func(d, n int) (k int) {
		for range n {
			if l.allow(d) {
				k++
			}
		}
		return k
	}
	if k := allowed(0, 100); k != 3 {
		t.Fatalf("a flood at one instant passed %d answers, want the burst 3", k)
	}
	if k := allowed(1, 2); k != 2 {
		t.Fatalf("the sibling passed %d of 2 answers after device 0's flood", k)
	}
	c.Set(c.Now().Add(time.Second))
	if k := allowed(0, 100); k != 2 {
		t.Fatalf("a second later %d answers passed, want the rate 2", k)
	}
	c.Set(c.Now().Add(time.Hour))
	if k := allowed(0, 100); k != 3 {
		t.Fatalf("after an hour %d answers passed, want the burst 3 (it never accumulates more)", k)
	}
	if r := DeviceRate(2 * time.Second); r != 2 {
		t.Fatalf("DeviceRate(2s) = %v, want 2 (4 answers a round)", r)
	}
	if r := DeviceRate(time.Minute); r != 1 {
		t.Fatalf("DeviceRate(1m) = %v, want the floor 1", r)
	}
}

// TestDeviceFloodDroppedAndCounted: a device flooding its own response subject over its own
// credential, on a real nats-server, gets no more than its burst (plus the refill of the time
// the flood took) to the agent's decoding; the rest is dropped and counted as
// mohito_dropped_total{reason="device_rate"}, and its sibling's answer still gets through.
// Without the per-device limit every message of the flood reaches the decoding.
func TestDeviceFloodDroppedAndCounted(t *testing.T) {
	pw := func(u string) string { return u + "-pw" }
	n := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig([][]string{{"a", "b"}}, pw)))
	nc := n.Connect(t, nats.UserInfo(contract.VendorUser(0), pw(contract.VendorUser(0))))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	const rate, burst, flood = 1, 4, 500
	a, err := NewVendorAgent(t.Context(), VendorConfig{Deployment: Deployment{Params: testParams(t), Round: time.Second},
		Vendor: 0, NC: nc, JS: js, Devices: []RegisteredDevice{{ID: "a"}, {ID: "b"}}, DeviceRate: rate, DeviceBurst: burst, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(contract.DeviceResponses, a.onResponse)
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	defer sub.Unsubscribe()
	nc.Flush()

	dropped := func(reason string) int { return int(testutil.ToFloat64(m.Dropped.WithLabelValues(reason))) }
	dev := n.Connect(t, nats.UserInfo(contract.DeviceUser(0, "a"), pw(contract.DeviceUser(0, "a"))))
	start := time.Now()
	for i := range flood {
		if err := dev.Publish(contract.DeviceResponseSubject("a"), fmt.Appendf(nil, "junk %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	dev.Flush()
	testenv.Eventually(t, 20*time.Second, "the agent saw the whole flood", func() error {
		if got := dropped("device_rate") + dropped("device_response"); got != flood {
			return fmt.Errorf("%d of %d messages counted", got, flood)
		}
		return nil
	})
	// What passed the limit went on to decoding (and was dropped there as junk): at most the
	// burst and the refill of the time the flood took to arrive.
	passed, limit := dropped("device_response"), burst+int(time.Since(start).Seconds()*rate)+1
	if passed > limit {
		t.Fatalf("%d of the flood's %d messages passed the limit, want at most %d", passed, flood, limit)
	}
	if dropped("device_rate") < flood-limit {
		t.Fatalf("%d messages dropped for the rate, want at least %d", dropped("device_rate"), flood-limit)
	}
	sib := n.Connect(t, nats.UserInfo(contract.DeviceUser(0, "b"), pw(contract.DeviceUser(0, "b"))))
	before := dropped("device_rate")
	if err := sib.Publish(contract.DeviceResponseSubject("b"), []byte("junk")); err != nil {
		t.Fatal(err)
	}
	sib.Flush()
	testenv.Eventually(t, 10*time.Second, "the sibling's answer reaches decoding", func() error {
		if dropped("device_response") != passed+1 {
			return fmt.Errorf("device_response %d, want %d", dropped("device_response"), passed+1)
		}
		return nil
	})
	if dropped("device_rate") != before {
		t.Fatal("the sibling's answer was dropped for device a's flood")
	}
}
