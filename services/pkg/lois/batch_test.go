package lois

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// TestForwardBatchMatchesForward: ForwardBatch gives, packet by packet, the bytes, backends
// and errors of sequential Forward calls on an identical CI, and consumes the same entries —
// over batches longer than BatchSize holding known ids, unknown ids, id 0, a duplicate within
// one batch (the second copy must be refused: delete on use), a replay of an earlier batch's
// id, malformed packets and a packet for another address.
func TestForwardBatchMatchesForward(t *testing.T) {
	const entries = 5000
	newCI := func() *Cloud {
		d, err := NewDVT(DVTConfig{TableCapacity: 1024, Key: [16]byte{9}}) // several linked tables
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range benchPairs(entries, 4) {
			if err := d.Insert(p.ID, &p.KS, 80, bNow+3600); err != nil {
				t.Fatal(err)
			}
		}
		ci := NewCloud(Config{CIP: bCIP}, d, [16]byte{7})
		mg, _ := NewMaglev([]Backend{{IP: [4]byte{10, 0, 0, 1}, Port: 8080}, {IP: [4]byte{10, 0, 0, 2}, Port: 8081}})
		ci.SetBackends(80, mg)
		return ci
	}
	seqCI, batchCI := newCI(), newCI()
	if len(seqCI.Table.tables) < 2 {
		t.Fatalf("want several linked tables, have %d", len(seqCI.Table.tables))
	}
	pairs := benchPairs(entries, 4)
	wire := wirePacket(200, false)
	var pkts [][]byte
	add := func(id uint64) {
		p := bytes.Clone(wire)
		binary.BigEndian.PutUint64(p[tcpOptions+4:], id)
		pkts = append(pkts, p)
	}
	for i := range 3 * entries / 4 {
		add(pairs[(i*7919)%entries].ID)
		switch i % 37 {
		case 3:
			add(pairs[(i*7919)%entries].ID) // duplicate in the same batch
		case 11:
			add(0xDEADBEEF00000000 + uint64(i)) // unknown
		case 19:
			add(0)
		case 23:
			add(pairs[((i-20)*7919)%entries].ID) // replay of an earlier batch
		case 29:
			p := bytes.Clone(wire)
			p[0] = 0x46 // IP options: malformed
			pkts = append(pkts, p)
		case 31:
			p := bytes.Clone(wire)
			p[ipDst] ^= 1 // another address
			pkts = append(pkts, p)
		}
	}
	seqPkts := make([][]byte, len(pkts))
	for i, p := range pkts {
		seqPkts[i] = bytes.Clone(p)
	}
	out := make([]Backend, len(pkts))
	errs := make([]error, len(pkts))
	for i := 0; i < len(pkts); i += 50 { // batches of 50: three full rounds and a partial one
		j := min(i+50, len(pkts))
		batchCI.ForwardBatch(pkts[i:j], out[i:j], errs[i:j])
	}
	kinds := map[string]int{}
	for i, p := range seqPkts {
		be, err := seqCI.Forward(p)
		if be != out[i] || !errors.Is(errs[i], err) && errs[i] != err {
			t.Fatalf("packet %d: batch gave %v, %v; Forward %v, %v", i, out[i], errs[i], be, err)
		}
		if !bytes.Equal(p, pkts[i]) {
			t.Fatalf("packet %d: batch bytes differ from Forward's", i)
		}
		kinds[fmt.Sprint(err)]++
	}
	if len(kinds) < 4 {
		t.Fatalf("the packets exercised too few outcomes: %v", kinds)
	}
	if a, b := seqCI.Table.Stats(), batchCI.Table.Stats(); a != b {
		t.Fatalf("tables differ after the run: sequential %+v, batch %+v", a, b)
	}
	t.Logf("outcomes: %v", kinds)
}

func TestForwardBatchAllocs(t *testing.T) {
	d, _ := NewDVT(DVTConfig{TableCapacity: 4096, Key: [16]byte{3}})
	pairs := benchPairs(BatchSize, 5)
	ci := NewCloud(Config{CIP: bCIP}, d, [16]byte{7})
	mg, _ := NewMaglev([]Backend{{IP: [4]byte{10, 0, 0, 1}, Port: 8080}})
	ci.SetBackends(80, mg)
	wire := wirePacket(200, false)
	pkts := make([][]byte, BatchSize)
	for i := range pkts {
		pkts[i] = bytes.Clone(wire)
	}
	out := make([]Backend, BatchSize)
	errs := make([]error, BatchSize)
	a := testing.AllocsPerRun(200, func() {
		for i, p := range pairs {
			if err := d.Insert(p.ID, &p.KS, 80, bNow+3600); err != nil {
				panic(err)
			}
			copy(pkts[i], wire)
			binary.BigEndian.PutUint64(pkts[i][tcpOptions+4:], p.ID)
		}
		ci.ForwardBatch(pkts, out, errs)
		for _, err := range errs {
			if err != nil {
				panic(err)
			}
		}
	})
	if a != 0 {
		t.Errorf("ForwardBatch: %v allocs per batch", a)
	}
}
