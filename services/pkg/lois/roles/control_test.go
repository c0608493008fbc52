package roles

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

var testPolicy = HelloPolicy{Services: []uint16{8080, 8081}, N: 64, MaxN: 256, Lifetime: time.Hour, Partitions: 2}

// TestHelloPolicyRefusals: a HELLO outside the registrar's policy opens nothing.
func TestHelloPolicyRefusals(t *testing.T) {
	ok := contract.HelloRequest{Version: 1, DeviceIP: "10.99.0.2", DeviceWire: "127.0.0.1:7401", Services: []uint16{8081, 8080}}
	p, err := testPolicy.provision(&ok)
	if err != nil || p.N != 64 || !slices.Equal(p.Services, []uint16{8080, 8081}) || p.Replicas != 2 || p.Epoch != 1 {
		t.Fatalf("valid HELLO: %+v %v", p, err)
	}
	for name, mut := range map[string]func(*contract.HelloRequest){
		"version":         func(r *contract.HelloRequest) { r.Version = 2 },
		"ipv6 device":     func(r *contract.HelloRequest) { r.DeviceIP = "2001:db8::1" },
		"no wire":         func(r *contract.HelloRequest) { r.DeviceWire = "" },
		"no services":     func(r *contract.HelloRequest) { r.Services = nil },
		"unknown service": func(r *contract.HelloRequest) { r.Services = []uint16{8080, 9999} },
		"service twice":   func(r *contract.HelloRequest) { r.Services = []uint16{8080, 8080} },
		"too many":        func(r *contract.HelloRequest) { r.N = 257 },
	} {
		r := ok
		mut(&r)
		if _, err := testPolicy.provision(&r); !errors.Is(err, errRefused) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

// FuzzHelloPolicy: a HELLO comes from the network; whatever it holds, an accepted one asks only
// for offered services, each once, within the keystream limit, for an IPv4 device.
func FuzzHelloPolicy(f *testing.F) {
	f.Add([]byte(`{"version":1,"device_ip":"10.99.0.2","device_wire":"127.0.0.1:7401","services":[8080],"n":64}`))
	f.Add([]byte(`{"version":1,"device_ip":"10.99.0.2","device_wire":"[::1]:1","services":[8081,8080,8080]}`))
	f.Add([]byte(`{"services":null,"n":4294967295}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req contract.HelloRequest
		if json.Unmarshal(b, &req) != nil {
			return
		}
		p, err := testPolicy.provision(&req)
		if err != nil {
			return
		}
		if len(p.Services) == 0 || p.N == 0 || p.N > testPolicy.MaxN || !p.DeviceIP.Is4() || !p.DeviceWire.IsValid() {
			t.Fatalf("accepted %+v", p)
		}
		for i, s := range p.Services {
			if !slices.Contains(testPolicy.Services, s) || (i > 0 && p.Services[i-1] >= s) {
				t.Fatalf("services %v", p.Services)
			}
		}
	})
}

// TestControlRequestsNeedTheSessionKey: an EPOCH_REQ or a rekey for an open session, sealed
// under another key, for another session or as another kind, is refused as unknown_session
// and grants nothing; sealed right, it is granted.
func TestControlRequestsNeedTheSessionKey(t *testing.T) {
	nc := testenv.StartNATS(t)
	js := nc.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureSessionStream(ctx, js, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	table, err := lois.NewDVT(lois.DVTConfig{TableCapacity: 1 << 12, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	r := &Registrar{JS: js, Cloud: "c1", Table: table, Policy: testPolicy}
	k, err := r.Open(ctx, Provision{Services: []uint16{8080}, N: 64, Lifetime: time.Hour, Epoch: 1,
		DeviceIP: netip.MustParseAddr("10.99.0.2"), DeviceWire: netip.MustParseAddrPort("127.0.0.1:7401")})
	if err != nil {
		t.Fatal(err)
	}
	key := k.ControlKey()
	other := make([]byte, contract.ControlKeySize)
	ask := mustJSON(contract.EpochAsk{SID: 8080, Dir: "up"})
	req := func(key []byte, kind, session, sealedFor string) []byte {
		s, err := contract.Seal(key, kind, sealedFor, ask)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(contract.ControlRequest{Session: session, Sealed: s})
	}
	for name, data := range map[string][]byte{
		"other key":     req(other, contract.SealEpoch, k.Session, k.Session),
		"other kind":    req(key, contract.SealRehello, k.Session, k.Session),
		"other session": req(key, contract.SealEpoch, k.Session, "00000000000000000000000000000000"),
		"unknown":       req(key, contract.SealEpoch, "00000000000000000000000000000000", "00000000000000000000000000000000"),
		"not json":      []byte("{"),
	} {
		rep, err := r.serveEpoch(ctx, data)
		if resultOf(err) != contract.ErrorUnknownSession || rep.(contract.ControlReply).Error != contract.ErrorUnknownSession {
			t.Errorf("%s: %+v %v, want unknown_session", name, rep, err)
		}
	}
	if rep, err := r.serveRehello(ctx, req(other, contract.SealRehello, k.Session, k.Session)); err == nil {
		t.Fatalf("rekey with another key: %+v", rep)
	}
	if r.Sessions() != 1 {
		t.Fatalf("%d sessions after refused requests", r.Sessions())
	}
	// Sealed right (no replicas to wait for here), the grant comes back sealed for the device.
	rep, err := r.serveEpoch(ctx, req(key, contract.SealEpoch, k.Session, k.Session))
	if err != nil {
		t.Fatal(err)
	}
	g, err := openKeys(key, contract.SealGrant, k.Session, rep.(contract.ControlReply).Sealed)
	if err != nil || !g.Grant || len(g.Streams) != 1 || g.Streams[0].Epoch != 2 || g.Streams[0].Dir != "up" {
		t.Fatalf("grant %+v %v", g, err)
	}
}
