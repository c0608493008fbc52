package lois_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// wireFlow hides n packets of one TCP flow (same addresses and ports, advancing seq, constant
// ack, ACK|PSH, the Linux data-segment option TS) and returns the wire packets and the originals.
func wireFlow(t *testing.T, w *world, n int) (wire, orig [][]byte) {
	seq := uint32(1000)
	for i := range n {
		ts := []byte{1, 1, 8, 10, 0, 0, 0, byte(i), 0, 0, 0, 1}
		buf, off := packet(dip, cip, 51515, 5, seq, 7777, 0x18, ts, bytes.Repeat([]byte{byte(i)}, 100))
		orig = append(orig, bytes.Clone(buf[off:]))
		noff, err := w.dev.HideUpload(buf, off, now)
		must(t, err)
		wire = append(wire, bytes.Clone(buf[noff:]))
		seq += 100
	}
	return wire, orig
}

// chi2Uniform is Pearson's χ² of the values against a uniform distribution on bins values.
func chi2Uniform(vals []int, bins int) float64 {
	counts := make([]float64, bins)
	for _, v := range vals {
		counts[v]++
	}
	e := float64(len(vals)) / float64(bins)
	x := 0.0
	for _, c := range counts {
		x += (c - e) * (c - e) / e
	}
	return x
}

// chi2Crit approximates the χ² quantile for p = 0.001 (Wilson–Hilferty).
func chi2Crit(dof int) float64 {
	k := float64(dof)
	z := 3.09
	return k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
}

// TestUnlinkability is spec T8: for the packets of one flow, every byte of the wire fields LOIS
// hides (source address, source port, seq, ack, flags under the mask, id) is uniform (χ²) and
// uncorrelated between consecutive packets, and grouping by any of them puts every packet in a
// group of its own. It then lists the fields that stay linkable: in paper mode IP ID, TTL, the
// timestamp option and the window are the stack's; hardened, the IP ID is random, the TTL is 64
// for everyone and no timestamp remains.
func TestUnlinkability(t *testing.T) {
	const n = 4096
	for _, paper := range []bool{false, true} {
		w := newWorld(t, paper, []uint16{5}, n+64, 1)
		wire, orig := wireFlow(t, w, n)
		fields := map[string][2]int{"src ip": {12, 16}, "src port": {20, 22}, "seq": {24, 28}, "ack": {28, 32}, "id": {44, 52}}
		for name, r := range fields {
			for b := r[0]; b < r[1]; b++ {
				vals := make([]int, n)
				for i, p := range wire {
					vals[i] = int(p[b])
				}
				if x := chi2Uniform(vals, 256); x > chi2Crit(255) {
					t.Errorf("paper=%v %s byte %d: χ² %.0f > %.0f", paper, name, b, x, chi2Crit(255))
				}
				if r := lag1(vals); math.Abs(r) > 4/math.Sqrt(n) {
					t.Errorf("paper=%v %s byte %d: lag-1 correlation %.3f", paper, name, b, r)
				}
			}
			groups := map[string]int{}
			for _, p := range wire {
				groups[string(p[r[0]:r[1]])]++
			}
			// A 16-bit field of 4096 random values repeats by chance (birthday); 32- and 64-bit
			// fields must not repeat at all.
			if r[1]-r[0] >= 4 && len(groups) != n {
				t.Errorf("paper=%v grouping by %s: %d groups for %d packets", paper, name, len(groups), n)
			}
		}
		flagBins, mask := 256, 0xFF
		if paper {
			flagBins, mask = 64, 0x3F
		}
		vals := make([]int, n)
		for i, p := range wire {
			vals[i] = int(p[33]) & mask
		}
		if x := chi2Uniform(vals, flagBins); x > chi2Crit(flagBins-1) {
			t.Errorf("paper=%v flags: χ² %.0f", paper, x)
		}
		// Linkable fields.
		ipids := make([]int, n)
		for i, p := range wire {
			ipids[i] = int(p[5])
			if paper {
				if !bytes.Equal(p[4:6], orig[i][4:6]) || p[8] != orig[i][8] || !bytes.Equal(p[52:64], orig[i][40:52]) || !bytes.Equal(p[34:36], orig[i][34:36]) {
					t.Fatal("paper mode changed IP ID, TTL, the TS option or the window")
				}
				continue
			}
			if p[8] != lois.NormalTTL || bytes.Contains(p[52:64], []byte{8, 10}) {
				t.Fatal("hardened wire packet keeps the stack's TTL or a timestamp")
			}
		}
		if !paper {
			if x := chi2Uniform(ipids, 256); x > chi2Crit(255) {
				t.Errorf("hardened IP ID not uniform: χ² %.0f", x)
			}
		}
	}
}

func lag1(v []int) float64 {
	var mx, my, sxx, syy, sxy float64
	n := float64(len(v) - 1)
	for i := 0; i+1 < len(v); i++ {
		mx += float64(v[i])
		my += float64(v[i+1])
	}
	mx, my = mx/n, my/n
	for i := 0; i+1 < len(v); i++ {
		dx, dy := float64(v[i])-mx, float64(v[i+1])-my
		sxx, syy, sxy = sxx+dx*dx, syy+dy*dy, sxy+dx*dy
	}
	return sxy / math.Sqrt(sxx*syy)
}

// TestServiceHiding is spec T9: packets to 50 services leave the DI with the same destination
// address and port, and the option at the same place; nothing on the wire names the service.
func TestServiceHiding(t *testing.T) {
	var sids []uint16
	for i := range 50 {
		sids = append(sids, uint16(100+7*i))
	}
	w := newWorld(t, false, sids, 16, 1)
	var first []byte
	for _, sid := range sids {
		buf, off := packet(dip, cip, 40000, sid, 1, 2, 0x18, nil, []byte("same payload"))
		noff, err := w.dev.HideUpload(buf, off, now)
		must(t, err)
		p := buf[noff:]
		if first == nil {
			first = bytes.Clone(p)
		}
		if !bytes.Equal(p[16:20], first[16:20]) || !bytes.Equal(p[22:24], first[22:24]) || !bytes.Equal(p[40:44], first[40:44]) {
			t.Fatalf("sid %d: wire destination %x:%x differs", sid, p[16:20], p[22:24])
		}
		if binary.BigEndian.Uint16(p[22:]) != lois.DefaultUnifiedPort {
			t.Fatalf("sid %d: wire port is not U", sid)
		}
	}
}

// TestBackendChoiceSameOnEveryReplica is spec T3 / D-16: two CI replicas built from the same
// backend list and flow key send every packet of a flow to the same server, and a flow keeps
// its server across packets (whose wire source fields all differ).
func TestBackendChoiceSameOnEveryReplica(t *testing.T) {
	w := newWorld(t, false, []uint16{5}, 256, 4)
	other := lois.NewCloud(lois.Config{CIP: cip}, w.ci.Table, [16]byte{7})
	var bs []lois.Backend
	for r := range 4 {
		bs = append(bs, lois.Backend{IP: [4]byte{10, 0, 0, byte(1 + r)}, Port: portOff + 5})
	}
	mg, err := lois.NewMaglev(bs)
	must(t, err)
	other.SetBackends(5, mg)
	used := map[lois.Backend]bool{}
	for flow := range 40 {
		var got lois.Backend
		for i := range 5 {
			buf, off := packet(dip, cip, uint16(30000+flow), 5, uint32(i*100), 9, 0x18, nil, nil)
			noff, err := w.dev.HideUpload(buf, off, now)
			must(t, err)
			cp := bytes.Clone(buf[noff:])
			// Replica A takes even packets, replica B odd ones (ECMP over random wire tuples).
			ci := w.ci
			if i%2 == 1 {
				ci = other
			}
			be, err := ci.Forward(cp)
			must(t, err)
			if i > 0 && be != got {
				t.Fatalf("flow %d: packet %d went to %v, earlier ones to %v", flow, i, be, got)
			}
			got = be
		}
		used[got] = true
	}
	if len(used) < 3 {
		t.Errorf("40 flows used only %d of 4 backends", len(used))
	}
}
