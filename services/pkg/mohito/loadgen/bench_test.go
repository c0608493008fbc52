package loadgen

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/client"
)

// benchFixture is a step where four commands were issued and answered in the window, each
// delivered once.
func benchFixture() ([]*benchRecord, map[string]int, time.Time, time.Time) {
	from := time.Unix(1000, 0)
	to := from.Add(2 * time.Second)
	var recs []*benchRecord
	delivered := map[string]int{}
	for _, p := range []string{"a", "b", "c", "d"} {
		recs = append(recs, &benchRecord{payload: p, done: from.Add(time.Second), res: &client.Result{Response: []byte("ack:" + p), Latency: time.Second}})
		delivered[p] = 1
	}
	return recs, delivered, from, to
}

func judge(recs []*benchRecord, delivered map[string]int, from, to time.Time, offered float64) *BenchStep {
	s := &BenchStep{Offered: offered, Issued: len(recs)}
	s.tally(recs, delivered, from, to)
	s.verdict()
	return s
}

// TestBenchStepVerdict: a step holds only when every issued command was answered exactly
// once with its own response, no round aborted, the generator kept up and the answered rate
// matched the offered one; each way of breaking that fails the step and says why.
func TestBenchStepVerdict(t *testing.T) {
	recs, del, from, to := benchFixture()
	if s := judge(recs, del, from, to, 2); !s.OK || s.Answered != 4 || s.AnsweredPS != 2 {
		t.Fatalf("clean step: ok=%v answered=%d (%v/s): %s", s.OK, s.Answered, s.AnsweredPS, s.Why)
	}
	cases := map[string]func(recs []*benchRecord, del map[string]int) (offered float64, aborted, saturated int){
		"lost": func(recs []*benchRecord, del map[string]int) (float64, int, int) {
			recs[1].res, recs[1].err = nil, client.ErrGaveUp
			delete(del, "b")
			return 1, 0, 0
		},
		"duplicated": func(recs []*benchRecord, del map[string]int) (float64, int, int) {
			del["c"] = 2
			return 2, 0, 0
		},
		"duplicated#unknown payload": func(recs []*benchRecord, del map[string]int) (float64, int, int) {
			del["zz"] = 1 // a command nobody issued reached a device
			return 2, 0, 0
		},
		"wrong responses": func(recs []*benchRecord, del map[string]int) (float64, int, int) {
			recs[0].res.Response = []byte("ack:b")
			return 1, 0, 0
		},
		"rounds aborted": func(recs []*benchRecord, del map[string]int) (float64, int, int) { return 2, 1, 0 },
		"generator saturated": func(recs []*benchRecord, del map[string]int) (float64, int, int) {
			return 2, 0, 3
		},
		"offered": func(recs []*benchRecord, del map[string]int) (float64, int, int) { return 4, 0, 0 },
	}
	for name, breakIt := range cases {
		want, _, _ := strings.Cut(name, "#")
		recs, del, from, to := benchFixture()
		offered, aborted, saturated := breakIt(recs, del)
		s := &BenchStep{Offered: offered, Issued: len(recs), Aborted: aborted, Saturated: saturated}
		s.tally(recs, del, from, to)
		s.verdict()
		if s.OK || !strings.Contains(s.Why, want) {
			t.Errorf("%s: ok=%v why=%q", name, s.OK, s.Why)
		}
	}
	// Commands answered outside the window are not counted in its rate.
	recs, del, from, to = benchFixture()
	recs[0].done = to.Add(time.Millisecond)
	if s := judge(recs, del, from, to, 1.5); s.Answered != 3 || !s.OK {
		t.Fatalf("answered in the window %d (want 3), ok=%v %s", s.Answered, s.OK, s.Why)
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 250 and stime 50 ticks.
	line := "4242 (mohito (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 1000 0 0"
	got, err := parseProcStat(line)
	if err != nil || got != 3.0 {
		t.Fatalf("parseProcStat: %v, %v; want 3 s", got, err)
	}
	if _, err := parseProcStat("4242 (short) S 1"); err == nil {
		t.Fatal("short line accepted")
	}
}

func TestSumSamples(t *testing.T) {
	text := `# HELP mohito_rounds_total Rounds by outcome.
mohito_rounds_total{outcome="aborted"} 2
mohito_rounds_total{outcome="done"} 40
mohito_fakes_total 7
`
	for metric, want := range map[string]float64{`mohito_rounds_total{outcome="aborted"}`: 2, "mohito_rounds_total": 42, "mohito_fakes_total": 7, "mohito_none": 0} {
		if got := sumSamples(strings.NewReader(text), metric); got != want {
			t.Errorf("%s: %v, want %v", metric, got, want)
		}
	}
}

func TestParseRates(t *testing.T) {
	got, err := ParseRates("100*2..800")
	if err != nil || len(got) != 4 || got[3] != 800 {
		t.Fatalf("100*2..800: %v %v", got, err)
	}
	if _, err := ParseRates("300,200"); err == nil {
		t.Fatal("decreasing rates accepted")
	}
	if _, err := ParseRates("100*1..800"); err == nil {
		t.Fatal("factor 1 accepted")
	}
}

// TestBenchDevicesAnswersReadyThenResultAtEOF: the devices process says "ready" once its
// devices are started and, when its stdin closes, writes what they executed as one JSON
// object and returns (here with no devices: an empty object).
func TestBenchDevicesAnswersReadyThenResultAtEOF(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "devices.json")
	b, _ := json.Marshal(BenchDevicesSpec{NATSURL: "nats://127.0.0.1:1"})
	if err := os.WriteFile(spec, b, 0o600); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- RunBenchDevices(t.Context(), spec, inR, outW); outW.Close() }()
	rd := bufio.NewReader(outR)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	inW.Close()
	var got map[string]int
	if err := json.NewDecoder(rd).Decode(&got); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("result %v, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
