package roles

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// TestCloudBurstsMatchSingleReads: the CI reads bursts (recvmmsg, ForwardBatch, sendmmsg)
// with the same outcome as one datagram per call. 40 uploads, a duplicate of each of the
// first five (sent after uploads 9 to 13), an id never issued and a datagram that is not a
// LOIS packet are queued in the CI's socket before it starts, so it reads them in bursts
// of its batch size — with 16, the duplicates of 0, 1 and 2 fall in the burst of their
// originals and those of 3 and 4 in the next — or, with batch 1, one at a time. In both:
// the 40 reach the server once each in the order sent, the five duplicates count as
// replays, the forged id as unknown, the foreign datagram as malformed, nothing else.
func TestCloudBurstsMatchSingleReads(t *testing.T) {
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			p := startPathWith(t, 128, pathOptions{batch: batch, holdCI: true})
			const n = 40
			var wire [][]byte
			for i := range n {
				p.devTUN.in <- tcp(dip, cip, dport, sid, uint32(i), 0, 0x10, fmt.Appendf(nil, "pkt %d", i))
				wire = append(wire, p.capture(t))
			}
			for i := range n {
				p.toCI(t, wire[i])
				if i >= 9 && i < 14 {
					p.toCI(t, wire[i-9])
				}
			}
			forged := bytes.Clone(wire[1])
			binary.BigEndian.PutUint64(forged[44:], 0x0123456789abcdef)
			p.toCI(t, forged)
			p.toCI(t, []byte("not a packet"))
			p.runCI()
			for i := range n {
				got := p.srvTUN.next(t)
				if s := binary.BigEndian.Uint32(got[24:]); s != uint32(i) {
					t.Fatalf("server got seq %d, want %d", s, i)
				}
			}
			testEventually(t, func() bool {
				return p.count("ci", "up", "ok") == n && p.count("ci", "up", "replay") == 5 &&
					p.count("ci", "up", "unknown_id") == 1 && p.count("ci", "up", "malformed") == 1
			})
			p.srvTUN.none(t, 200*time.Millisecond)
		})
	}
}
