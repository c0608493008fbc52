package roles

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// gtWindowFn reads three latest values and a window of three rounds of a fourth topic, and
// outputs their sum, mean (a division: thousands of AND gates, so many chunks) and max.
const gtWindowFn = `(begin
  (define a (val "a")) (define b (val "b")) (define c (val "c"))
  (define w (window "d" 3))
  (define all (cons a (cons b (cons c w))))
  (start-building)
  (list (sum all) (mean all) (max all)))`

// gtScenario publishes every topic's values up to its latest round and returns the feeds
// of an execution, the plaintext values per slot, and the publishers by topic.
type gtScenario struct {
	pubs   map[string]*gtPublisher
	latest map[string]uint64
	values []pps.Fixed
	feeds  map[int]*gtFeed
}

func gtPublishAll(t *testing.T, e *garblerEnv, f *dsl.Function, latest map[string]uint64, skip map[string]bool) *gtScenario {
	t.Helper()
	sc := &gtScenario{pubs: map[string]*gtPublisher{}, latest: latest, values: make([]pps.Fixed, len(f.Layout.Slots)),
		feeds: map[int]*gtFeed{}}
	for _, s := range f.Layout.Slots {
		if sc.pubs[s.Topic] == nil {
			sc.pubs[s.Topic] = e.setupPublisher(t, f.ID)
		}
	}
	for i, s := range f.Layout.Slots {
		round := latest[s.Topic] - uint64(s.Lag)
		x := pps.Fixed(int32((i+1)*100+int(round)) << 8)
		if i%2 == 1 {
			x = -x
		}
		sc.values[i] = x
		if skip[s.Topic] {
			continue
		}
		p := sc.pubs[s.Topic]
		sc.feeds[i] = &gtFeed{pub: p, round: round, labels: p.publish(t, round, x)}
	}
	return sc
}

func gtSlotOf(t *testing.T, f *dsl.Function, topic string) int {
	t.Helper()
	for i, s := range f.Layout.Slots {
		if s.Topic == topic && s.Lag == 0 {
			return i
		}
	}
	t.Fatalf("no slot reads %q", topic)
	return -1
}

// TestGarblerEndToEndOverMTLS plays the broker against the garbler over gRPC with mutual
// TLS on 127.0.0.1 and a real redis-server: publishers set up through relayed signed
// hellos and publish labels their own ratchets derive; the consistency check (OPRF-PSI)
// finds exactly the publisher that sent a bad label; the garbler streams the circuit in
// 4 KiB chunks and the broker evaluates it while it arrives; the subscriber unmasks o⊕r
// and gets the plaintext model's output over the valid inputs. It also asserts what the
// broker saw: no seed or ratchet key, no second label of any wire, and none of them in the
// garbler's logs either (spec §10 #5, #13).
func TestGarblerEndToEndOverMTLS(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, gtWindowFn)
	sub := e.subscribe(t, f.ID)
	// "d" published six rounds (the window reads 5, 4, 3: the garbler advances its ratchet
	// from 0 to 5 and retains the skipped seeds); "b" sent nothing.
	sc := gtPublishAll(t, e, f, map[string]uint64{"a": 2, "b": 1, "c": 0, "d": 5}, map[string]bool{"b": true})
	badSlot := gtSlotOf(t, f, "c")
	sc.feeds[badSlot].labels[7] = pps.Label{0xba, 0xd}

	view := &gtView{}
	const chunk = 4 << 10
	ex := gtExecute(t, e.client, f, sc.feeds, chunk, view)
	if !slices.Equal(ex.bad, []uint32{uint32(badSlot)}) {
		t.Fatalf("consistency check found slots %v, injected a bad label in slot %d", ex.bad, badSlot)
	}
	if len(ex.erased) != 0 {
		t.Fatalf("garbler erased slots %v", ex.erased)
	}
	if ex.header.Valid != uint32(len(f.Layout.Slots)-2) || ex.header.OutputBits != uint32(f.OutputBits()) {
		t.Fatalf("header: valid %d, output bits %d", ex.header.Valid, ex.header.OutputBits)
	}
	if len(ex.chunks) < 8 {
		t.Fatalf("the %d-byte stream came in %d chunks; want many of at most %d", ex.header.StreamBytes, len(ex.chunks), chunk)
	}
	for i, n := range ex.chunks {
		if n == 0 || n > chunk {
			t.Fatalf("chunk %d has %d bytes, at most %d", i, n, chunk)
		}
	}
	got, err := sub.sub.Unmask(ex.header.Epoch, ex.header.Round, ex.masked, f.OutputBits())
	if err != nil {
		t.Fatal(err)
	}
	xs, valid := ex.assign.ModelInputs(sc.values)
	want, err := f.Model(xs, valid)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("subscriber unmasked %x, the model says %x", got, want)
	}
	if bytes.Equal(ex.masked, want) {
		t.Fatal("the broker's output is not masked")
	}

	// What the broker (and the garbler's logs) must never contain.
	var secrets [][]byte
	for topic, p := range sc.pubs {
		for r := uint64(0); r <= sc.latest[topic]; r++ {
			k, s := p.ratchetAt(t, r)
			secrets = append(secrets, k[:], s[:])
		}
	}
	for i, fd := range sc.feeds {
		if ex.assign.Reason(i) != pps.Valid {
			continue
		}
		_, s := fd.pub.ratchetAt(t, fd.round)
		pairs := pps.ValueLabels(&s, 0)
		for j := range pairs {
			bit := uint32(sc.values[i]) >> j & 1
			if fd.labels[j] != pairs[j][bit] {
				t.Fatalf("slot %d bit %d: the broker's label is not w_%d", i, j, bit)
			}
			other := pairs[j][1-bit]
			secrets = append(secrets, other[:])
		}
	}
	logs := e.logs.String()
	for _, s := range secrets {
		if bytes.Contains(view.b.Bytes(), s) {
			t.Fatalf("the broker's view contains a seed, a ratchet key or a second label: %x", s)
		}
		for _, enc := range []string{hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s), base64.RawStdEncoding.EncodeToString(s)} {
			if strings.Contains(logs, enc) {
				t.Fatalf("the garbler logged a secret: %s", enc)
			}
		}
	}
	if !strings.Contains(logs, `"msg":"garbled"`) {
		t.Fatalf("no garble log line:\n%s", logs)
	}
}

// TestGarblerStopsWhenTheBrokerCancels: a broker that goes away mid-stream stops the
// garbling (the engine checks the context between chunks, and Send fails once the stream is
// cancelled); the execution is counted as cancelled, and its function round stays used.
func TestGarblerStopsWhenTheBrokerCancels(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, `(begin (define xs (window "a" 8)) (start-building) (list (variance xs) (mean xs) (fold * xs)))`)
	p := e.setupPublisher(t, f.ID)
	// A small fixed flow-control window: the garbler blocks in Send as soon as the broker
	// stops reading, whatever the machine's speed.
	cert, key := e.brokerCA.issue(t, "pps-broker-slow", false)
	cfg, err := ClientTLS(cert, key, e.gCA.file, "")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	h := f.Circuit.Hash()
	req := &ppsv1.GarbleRequest{FnId: f.ID, CircuitHash: h[:], ChunkBytes: 1024}
	for i := range f.Layout.Slots {
		req.Slots = append(req.Slots, &ppsv1.SlotInput{Slot: uint32(i), PubId: p.dev.id, Round: uint64(8 - i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := ppsv1.NewGarblerClient(cc).Garble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.GetHeader().GetStreamBytes() < 512<<10 { // in flight at most: 64 KiB of window, 64 KiB of write quota, buffers
		t.Fatalf("a %d-byte stream does not outgrow the flow-control window", first.GetHeader().GetStreamBytes())
	}
	cancel()
	testenv.Eventually(t, time.Minute, "the execution counted as cancelled", func() error {
		if n := testutil.ToFloat64(e.garbler.m.executions.WithLabelValues("cancelled")); n != 1 {
			return fmt.Errorf("%v cancelled executions", n)
		}
		return nil
	})
	if n := testutil.ToFloat64(e.garbler.m.executions.WithLabelValues("ok")); n != 0 {
		t.Fatalf("%v executions completed", n)
	}
	req.ChunkBytes = 0
	s2, err := e.client.Garble(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s2.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got, used := m.GetHeader().GetRound(), first.GetHeader().GetRound(); got != used+1 {
		t.Fatalf("after the cancelled execution at function round %d, the next is at %d", used, got)
	}
}
