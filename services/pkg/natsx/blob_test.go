package natsx

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chunkMsg is a chunk message as a consumer receives it; it records how it was settled.
type chunkMsg struct {
	jetstream.Msg
	hdr    nats.Header
	data   []byte
	termed bool
}

func (m *chunkMsg) Headers() nats.Header { return m.hdr }
func (m *chunkMsg) Data() []byte         { return m.data }
func (m *chunkMsg) Term() error          { m.termed = true; return nil }

// chunks splits b into n chunk messages of the blob named id, as SendBlob publishes them.
func chunks(id string, b []byte, n int) []*chunkMsg {
	var out []*chunkMsg
	size := (len(b) + n - 1) / n
	for i := range n {
		hdr := nats.Header{}
		hdr.Set(HdrBlob, id)
		hdr.Set(HdrChunk, strconv.Itoa(i))
		hdr.Set(HdrChunks, strconv.Itoa(n))
		out = append(out, &chunkMsg{hdr: hdr, data: b[min(i*size, len(b)):min((i+1)*size, len(b))]})
	}
	return out
}

// TestAssemble: chunks are held until the blob is complete, which returns it with every chunk
// (a redelivered one too) for the caller to settle; a malformed chunk or a corrupt blob is
// dropped, and every chunk of it received so far is terminated.
func TestAssemble(t *testing.T) {
	blob := bytes.Repeat([]byte("obscura"), 100)
	id := BlobID(blob)
	corrupt := chunks(id, append(bytes.Clone(blob[:len(blob)-1]), 'X'), 3)
	noChunk := chunks(id, blob, 1)[0]
	noChunk.hdr.Del(HdrChunk)
	for _, tc := range []struct {
		name     string
		msgs     []*chunkMsg
		want     []Outcome
		blob     []byte
		settle   int // chunk messages returned with the blob
		termedAt []int
	}{
		{"in order", chunks(id, blob, 3), []Outcome{Hold, Hold, Hold}, blob, 3, nil},
		{"one chunk", chunks(id, blob, 1), []Outcome{Hold}, blob, 1, nil},
		{"redelivered chunk", func() []*chunkMsg {
			c := chunks(id, blob, 2)
			return []*chunkMsg{c[0], c[0], c[1]}
		}(), []Outcome{Hold, Hold, Hold}, blob, 3, nil},
		{"digest mismatch", corrupt, []Outcome{Hold, Hold, Drop}, nil, 0, []int{0, 1, 2}},
		{"malformed headers", []*chunkMsg{noChunk}, []Outcome{Drop}, nil, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewBlobAssembler()
			var got []byte
			var settle []jetstream.Msg
			for i, m := range tc.msgs {
				b, msgs, o := a.Assemble(m)
				if o != tc.want[i] {
					t.Fatalf("chunk %d: outcome %v, want %v", i, o, tc.want[i])
				}
				if b != nil {
					got, settle = b, msgs
				}
			}
			if !bytes.Equal(got, tc.blob) || len(settle) != tc.settle {
				t.Fatalf("blob of %d bytes with %d messages, want %d bytes with %d", len(got), len(settle), len(tc.blob), tc.settle)
			}
			for i, m := range tc.msgs {
				if want := slices.Contains(tc.termedAt, i); m.termed != want {
					t.Errorf("chunk %d terminated: %v, want %v", i, m.termed, want)
				}
			}
		})
	}
}
