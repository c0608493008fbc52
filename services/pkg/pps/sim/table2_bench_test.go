package sim

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/client"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The paper's Table 2 (spec §7.3) end to end through the services: 9 parking lots publish a
// day of counts over MQTT, and each iteration is one execution of the statistic's pipeline
// as the broker runs it on a schedule tick — the consistency check (KKRT, D16b) with the
// garbler over gRPC with mutual TLS on loopback, the garbled circuit streamed over the same
// link and evaluated while it arrives, the output published and decoded by a subscriber,
// which must equal the plaintext model. Executions are serialised (one broker worker), as
// the paper's were.
//
// Reported per statistic, per execution: check-ms (the broker's consistency check — KKRT by
// default, the OPRF-PSI with -table2.check oprf: both parties' work and the request/response
// over the link), hdr-ms (garble request to the
// stream's header: the garbler's round seeds, labels and function round), stream-ms (header
// to result: garbling, sending and evaluating overlapped, as they run in the services),
// gse-ms (hdr + stream: the services' garble + send + evaluate), total-ms (tick to the
// subscriber's decoded output, wall clock: check, resolve, G+S+E, publish, MQTT, unmask),
// cpu-ms (the process's CPU time over the same span: every party runs in this process), MB
// (garbled stream), and the paper's figures divided by ours. garble-lib-ms and eval-lib-ms
// are the same circuit garbled to and evaluated from memory by pkg/gc alone, in the same run,
// to split the overlapped stream phase.
//
// With -table2.pregarble (the default, as the broker's --pregarble), each execution's AND
// gates are garbled, sent and read ahead, during the collection window (spec §8.5; a fresh
// Δ/π key/execID per execution, used once): hdr-ms and stream-ms are then the tick's part
// (seeds, labels, identity tables, decoding bits, evaluation), ahead-MB and ahead-ms the
// part sent ahead and its wall time in the window (beside the publishes), ahead-alone-ms
// one more such Pregarble timed by itself after the tick, and paper/ours-gse+ahead the
// paper's G+S+E over gse-ms + ahead-alone-ms (all the garbling, sending and evaluating of
// one execution, wherever it ran). MB is the whole execution's (ahead + tick).
//
//	go test ./pkg/pps/sim/ -run '^$' -bench Table2 -benchtime 1x -timeout 60m
//	go test ./pkg/pps/sim/ -run '^$' -bench Table2 -benchtime 1x -table2.rounds 24   # reduced scale (CI)
//	go test ./pkg/pps/sim/ -run '^$' -bench 'Table2$' -benchtime 1x -table2.check oprf  # the OPRF-PSI check

var table2Check = flag.String("table2.check", contract.CheckKKRT, "consistency check of the faithful Table 2 benchmark: kkrt (D16b) or oprf (D16a)")

var table2WindowCheck = flag.Bool("table2.window-check", true, "check the labels during the collection window as they arrive (the broker's --window-check); false: the whole check at the tick")

var table2Pregarble = flag.Bool("table2.pregarble", true, "garble each execution's AND gates ahead, during the collection window (the broker's --pregarble): the tick streams the inputs-dependent part only; false: all of it at the tick")

var table2TickProfile = flag.String("table2.tickprofile", "", "write a CPU profile of each row's tick alone (tick to decoded output) to <this>.<row>.<n>; not with -cpuprofile")

var table2Ticks int

var table2Redis = flag.String("table2.redis", "server", "each trust domain's Redis: server (redis-server from <root>/bin, as deployed; its CPU over the tick, from INFO cpu, is redis-cpu-ms and is added to cpu+redis-ms) or mini (an embedded miniredis, whose CPU is inside cpu-ms)")

var table2Rounds = flag.Int("table2.rounds", ParkingSamples, "rounds per lot of the Table 2 benchmarks (the paper: 288)")

// table2Paper are the paper's Table 2 rows (spec §7.3): garble, send, evaluate (ms), size
// (MB); the PSI, simulated, was 1107.4 ms in every row.
var table2Paper = []struct {
	name, src                  string
	garble, send, evaluate, mb float64
}{
	{"mean", ParkingMean, 199.8, 461.7, 98.7, 45.0},
	{"max-min", ParkingMaxMin, 163.3, 345.2, 84.9, 32.3},
	{"variance", ParkingVariance, 500.7, 2376.3, 236.1, 222.4},
	{"rank-free", ParkingRankFree, 121.3, 181.0, 67.5, 17.0},
}

const table2PaperPSI = 1107.4 // ms

// table2Source is a Table 2 program over rounds values per lot instead of 288.
func table2Source(src string, rounds int) string {
	if rounds == ParkingSamples {
		return src
	}
	s := bytes.ReplaceAll([]byte(src), []byte(fmt.Sprintf(`occupied" %d)`, ParkingSamples)), []byte(fmt.Sprintf(`occupied" %d)`, rounds)))
	if src == ParkingRankFree {
		// The lots' capacities over the day: 288·capacity becomes rounds·capacity.
		var caps bytes.Buffer
		for _, c := range ParkingCapacities {
			fmt.Fprintf(&caps, " %d", rounds*c)
		}
		var old bytes.Buffer
		for _, c := range ParkingCapacities {
			fmt.Fprintf(&old, " %d", ParkingSamples*c)
		}
		s = bytes.Replace(s, old.Bytes(), caps.Bytes(), 1)
	}
	return string(s)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkTable2(b *testing.B) { table2Services(b, contract.ModeFaithful) }

// BenchmarkTable2ServicesHardened is BenchmarkTable2 with the pipelines in the hardened input
// mode H1 (D21) through the same services: publishers send y = x ⊕ m, the broker obtains the
// labels of y by OT extension from the garbler inside the Garble call (hdr-ms includes it),
// and there is no consistency check (check-ms is zero).
func BenchmarkTable2ServicesHardened(b *testing.B) { table2Services(b, contract.ModeHardened) }

func table2Services(b *testing.B, mode string) {
	rounds := *table2Rounds
	if ParkingSamples%rounds != 0 {
		b.Fatalf("-table2.rounds %d does not divide %d", rounds, ParkingSamples)
	}
	for _, row := range table2Paper {
		b.Run(fmt.Sprintf("%s/rounds=%d", row.name, rounds), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			ds := DemoDay(1, 0, rounds)
			_, subKey, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			sub := &client.Device{Key: subKey}
			p, err := NewPipeline(ds, table2Source(row.src, rounds), PipelineOptions{Name: "table2-" + row.name, Mode: mode,
				Window: 24 * time.Hour, Schedule: 24 * time.Hour, Subscribers: []string{sub.ID()}})
			if err != nil {
				b.Fatal(err)
			}
			opts := worldOptions{pipelines: []*Pipeline{p}, subscribers: []*client.Device{sub}, workers: 1, check: *table2Check,
				noWindowCheck: !*table2WindowCheck, noPregarble: !*table2Pregarble}
			var servers []*testenv.Redis
			switch *table2Redis {
			case "server":
				servers = []*testenv.Redis{testenv.StartRedis(b), testenv.StartRedis(b)}
				opts.redisAddrs = []string{servers[0].Addr(), servers[1].Addr()}
			case "mini":
			default:
				b.Fatalf("-table2.redis %q: server or mini", *table2Redis)
			}
			w, err := startWorld(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer w.close()
			feeds, err := w.subscribe(ctx, sub, p.Function)
			if err != nil {
				b.Fatal(err)
			}
			wc0 := cpuTime()
			pub0 := time.Now()
			if err := w.publishDay(ctx, ds); err != nil {
				b.Fatal(err)
			}
			published := time.Since(pub0)
			// The day's values arrived over the window; their window checks end before the
			// tick (on a real schedule, hours before it).
			if err := waitFor(ctx, "the window checks", func() error {
				if n := w.broker.WindowChecksPending(); n > 0 {
					return fmt.Errorf("%d publishes not checked yet", n)
				}
				if !w.broker.PregarbleReady() {
					return errors.New("the next execution is not garbled ahead yet")
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			windowWall, windowCPU := time.Since(pub0)-published, cpuTime()-wc0
			garbleLib, evalLib := libraryPhases(b, p.Function, w.fns[0].plan, ds)

			var check, hdr, stream, total, cpu, rcpu, ahead time.Duration
			var mb, aheadMB float64
			var windowChecked int
			if *table2TickProfile != "" {
				table2Ticks++
				pf, err := os.Create(fmt.Sprintf("%s.%s.%d", *table2TickProfile, row.name, table2Ticks))
				if err != nil {
					b.Fatal(err)
				}
				if err := pprof.StartCPUProfile(pf); err != nil {
					b.Fatal(err)
				}
				defer pf.Close()
			}
			for b.Loop() {
				c0, r0 := cpuTime(), redisCPU(b, servers)
				outs, recs, latency, err := w.tick(ctx, feeds)
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				rcpu += redisCPU(b, servers) - r0
				if *table2TickProfile != "" {
					pprof.StopCPUProfile()
				}
				if !slices.Equal(outs[0].Values, p.Want) || outs[0].Valid != len(p.Function.Layout.Slots) {
					b.Fatalf("subscriber decoded %v over %d valid inputs, plaintext model %v", outs[0].Values, outs[0].Valid, p.Want)
				}
				e := recs[0]
				check, hdr, stream, total = check+e.Check, hdr+e.Garble, stream+e.Evaluate, total+latency
				windowChecked = e.WindowChecked
				mb, aheadMB = float64(e.Bytes)/1e6, float64(e.AheadBytes)/1e6
				ahead += e.Ahead
			}
			// The ahead part alone (it ran during the window above, beside the publishes and
			// their checks): one more Pregarble over the same link, its tables read as the
			// broker reads them, timed by itself.
			var aheadAlone time.Duration
			if *table2Pregarble && mode == contract.ModeFaithful {
				if aheadAlone, err = pregarbleAlone(ctx, ppsv1.NewGarblerClient(w.cc), p.Function.ID, w.fns[0].plan); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
			gse := msOf(hdr) + msOf(stream)
			b.ReportMetric(msOf(check), "check-ms")
			b.ReportMetric(float64(windowChecked), "window-checked-slots")
			b.ReportMetric(float64(windowWall.Microseconds())/1000, "window-tail-ms")
			b.ReportMetric(float64(windowCPU.Microseconds())/1000, "publish+window-cpu-ms")
			b.ReportMetric(msOf(hdr), "hdr-ms")
			b.ReportMetric(msOf(stream), "stream-ms")
			b.ReportMetric(gse, "gse-ms")
			b.ReportMetric(msOf(total), "total-ms")
			b.ReportMetric(msOf(cpu), "cpu-ms")
			if servers != nil {
				b.ReportMetric(msOf(rcpu), "redis-cpu-ms")
				b.ReportMetric(msOf(cpu+rcpu), "cpu+redis-ms")
			}
			b.ReportMetric(garbleLib, "garble-lib-ms")
			b.ReportMetric(evalLib, "eval-lib-ms")
			b.ReportMetric(mb, "MB")
			b.ReportMetric(aheadMB, "ahead-MB")
			b.ReportMetric(msOf(ahead), "ahead-ms")
			b.ReportMetric(float64(aheadAlone.Microseconds())/1000, "ahead-alone-ms")
			b.ReportMetric(float64(w.fns[0].plan.ANDCount()), "AND")
			if rounds == ParkingSamples {
				paperGSE := row.garble + row.send + row.evaluate
				b.ReportMetric(paperGSE/gse, "paper/ours-gse")
				b.ReportMetric(paperGSE/(msOf(check)+gse), "paper/ours-gse+check")
				if aheadAlone > 0 {
					b.ReportMetric(paperGSE/(float64(aheadAlone.Microseconds())/1000+gse), "paper/ours-gse+ahead")
				}
				b.ReportMetric(paperGSE/msOf(total), "paper-gse/ours-total")
				b.ReportMetric((paperGSE+table2PaperPSI)/msOf(total), "paper/ours-total")
				b.ReportMetric(mb/row.mb, "ours/paper-MB")
			}
		})
	}
}

// pregarbleAlone times one Pregarble of fn through the garbler's link, the tables read as
// the broker reads them (gc.ReadTables).
func pregarbleAlone(ctx context.Context, g ppsv1.GarblerClient, fn string, plan *gc.Plan) (time.Duration, error) {
	t0 := time.Now()
	hash := plan.Hash()
	st, err := g.Pregarble(ctx, &ppsv1.PregarbleRequest{FnId: fn, CircuitHash: hash[:]})
	if err != nil {
		return 0, err
	}
	if _, err := st.Recv(); err != nil { // the header
		return 0, err
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(m.GetData()); err != nil {
				return
			}
		}
	}()
	_, err = gc.ReadTables(plan, pr)
	pr.Close()
	return time.Since(t0), err
}

// redisCPU is the CPU time the redis-servers report (INFO cpu: used_cpu_sys + used_cpu_user).
func redisCPU(b *testing.B, servers []*testenv.Redis) time.Duration {
	b.Helper()
	var total time.Duration
	for _, r := range servers {
		info, err := r.Client().Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				sec, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %s: %v", k, err)
				}
				total += time.Duration(sec * float64(time.Second))
			}
		}
	}
	return total
}

// libraryPhases garbles the function's circuit into memory and evaluates it with pkg/gc and
// pps's label derivation alone (no service, no link), median of 3, in ms.
func libraryPhases(b *testing.B, f *dsl.Function, plan *gc.Plan, ds *Dataset) (garbleMS, evalMS float64) {
	b.Helper()
	ctx := context.Background()
	in, err := ds.Inputs(f)
	if err != nil {
		b.Fatal(err)
	}
	seeds := make([]pps.Seed, len(in))
	for i := range seeds {
		rand.Read(seeds[i][:])
	}
	a, err := pps.Nullify(&f.Layout, nil)
	if err != nil {
		b.Fatal(err)
	}
	var fseed pps.Seed
	rand.Read(fseed[:])
	mask := pps.OutputMask(&fseed, f.OutputBits())
	var gs, es []time.Duration
	var stream bytes.Buffer
	for range 3 {
		t0 := time.Now()
		inputs, err := pps.GarblerInputs(a, func(s int) (*[pps.ValueBits]pps.LabelPair, error) {
			l := pps.ValueLabels(&seeds[s], 0)
			return &l, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		stream.Reset()
		if _, err := gc.Garble(ctx, plan, &stream, inputs, mask, nil); err != nil {
			b.Fatal(err)
		}
		gs = append(gs, time.Since(t0))
		received := make([][]pps.Label, len(in))
		for s := range in {
			if received[s], err = pps.SplitPublished(pps.PublishLabels(&seeds[s], in[s:s+1]), 1); err != nil {
				b.Fatal(err)
			}
		}
		t0 = time.Now()
		labels, err := pps.EvaluatorLabels(a, func(s int) []pps.Label { return received[s] })
		if err != nil {
			b.Fatal(err)
		}
		if _, err := gc.Evaluate(ctx, plan, bytes.NewReader(stream.Bytes()), labels, nil); err != nil {
			b.Fatal(err)
		}
		es = append(es, time.Since(t0))
	}
	slices.Sort(gs)
	slices.Sort(es)
	return float64(gs[1].Microseconds()) / 1000, float64(es[1].Microseconds()) / 1000
}

// BenchmarkTable2Hardened is the same statistics in the hardened input mode H1 (D21) in
// process, without the services (pkg/pps/roles runs H1 too, not measured here): one execution, every
// Broker↔Garbler message through its encoding, with pkg/pps and pkg/ot alone — the OT
// extension for every input bit in place of the consistency check, then garbling to memory
// and evaluation. Compare input-ms with BenchmarkTable2's check-ms (the faithful mode's
// input phase through the services) and garble-ms/eval-ms with its garble-lib-ms and
// eval-lib-ms. The one-time base OTs of a Broker–Garbler session are outside the loop.
//
//	go test ./pkg/pps/sim/ -run '^$' -bench Table2Hardened -benchtime 3x
func BenchmarkTable2Hardened(b *testing.B) {
	rounds := *table2Rounds
	recv, setup, err := ot.NewReceiver(nil)
	if err != nil {
		b.Fatal(err)
	}
	send, reply, err := ot.NewSender(nil, wire(b, setup))
	if err != nil {
		b.Fatal(err)
	}
	if err := recv.Finish(wire(b, reply)); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, row := range table2Paper {
		b.Run(fmt.Sprintf("%s/rounds=%d", row.name, rounds), func(b *testing.B) {
			f := compile(b, table2Source(row.src, rounds))
			plan, err := gc.Compile(f.Circuit)
			if err != nil {
				b.Fatal(err)
			}
			in, err := DemoDay(1, 0, rounds).Inputs(f)
			if err != nil {
				b.Fatal(err)
			}
			seeds := make([]pps.Seed, len(in))
			ys := make([]uint32, len(in))
			valid := make([]bool, len(in))
			for s := range seeds {
				rand.Read(seeds[s][:])
				y, err := pps.SplitMasked(pps.MaskValues(&seeds[s], in[s:s+1]), 1)
				if err != nil {
					b.Fatal(err)
				}
				ys[s], valid[s] = y[0], true
			}
			want, err := f.Model(in, valid)
			if err != nil {
				b.Fatal(err)
			}
			a, err := pps.Nullify(&f.Layout, nil)
			if err != nil {
				b.Fatal(err)
			}
			var fseed pps.Seed
			rand.Read(fseed[:])
			mask := pps.OutputMask(&fseed, f.OutputBits())
			var input, garble, eval time.Duration
			var stream bytes.Buffer
			for b.Loop() {
				t0 := time.Now()
				req, ev, err := pps.HardenedRequest(a, func(s int) (uint32, bool) { return ys[s], true }, recv)
				if err != nil {
					b.Fatal(err)
				}
				g, err := pps.HardenedGarblerInputs(a, func(s int) (uint32, error) { return pps.InputMask(&seeds[s], 0), nil }, send, wire(b, req))
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				stream.Reset()
				if _, err := gc.Garble(ctx, plan, &stream, g.Inputs, mask, nil); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				labels, err := ev.EvaluatorLabels(wire(b, g.Reply))
				if err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				res, err := gc.Evaluate(ctx, plan, bytes.NewReader(stream.Bytes()), labels, nil)
				if err != nil {
					b.Fatal(err)
				}
				t4 := time.Now()
				input, garble, eval = input+t1.Sub(t0)+t3.Sub(t2), garble+t2.Sub(t1), eval+t4.Sub(t3)
				got := bytes.Clone(res.Masked)
				for i := range got {
					got[i] ^= mask[i]
				}
				if !bytes.Equal(got, want) {
					b.Fatal("H1 output differs from the plaintext model")
				}
			}
			n := float64(b.N)
			msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
			b.ReportMetric(msOf(input), "input-ms")
			b.ReportMetric(msOf(garble), "garble-ms")
			b.ReportMetric(msOf(eval), "eval-ms")
			b.ReportMetric(msOf(input+garble+eval), "h1-ms")
			b.ReportMetric(float64(stream.Len())/1e6, "MB")
		})
	}
}

// wire passes a message through its encoding, as it crosses the link.
func wire[T any, PT interface {
	*T
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}](b testing.TB, m PT) PT {
	b.Helper()
	buf, err := m.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	out := PT(new(T))
	if err := out.UnmarshalBinary(buf); err != nil {
		b.Fatal(err)
	}
	return out
}
