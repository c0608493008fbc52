package natsx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ChunkSize keeps every chunk well under the 1 MiB default message limit.
const ChunkSize = 512 << 10

// Blob headers.
const (
	HdrBlob   = "Mohito-Blob"
	HdrChunk  = "Mohito-Chunk"
	HdrChunks = "Mohito-Chunks"
)

// BlobID names a blob by its content: a re-sent blob has the same chunk
// message ids and is de-duplicated, and a different blob never mixes with it.
func BlobID(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// SendBlob streams b to subject in ChunkSize chunks, each published with a
// Nats-Msg-Id of (key, blob id, chunk index). It is the cross-account form
// of an object-store put: JetStream object stores cannot be shared between
// accounts without exporting the whole JetStream API, so the sender keeps the
// durable copy in its own Object Store and the receiver's stream holds the
// chunks.
func SendBlob(ctx context.Context, js jetstream.JetStream, subject, key string, b []byte) error {
	id := BlobID(b)
	n := max(1, (len(b)+ChunkSize-1)/ChunkSize)
	for i := range n {
		chunk := b[min(i*ChunkSize, len(b)):min((i+1)*ChunkSize, len(b))]
		hdr := nats.Header{}
		hdr.Set(HdrBlob, id)
		hdr.Set(HdrChunk, strconv.Itoa(i))
		hdr.Set(HdrChunks, strconv.Itoa(n))
		if err := Publish(ctx, js, subject, fmt.Sprintf("%s-%s-%d", key, id, i), chunk, hdr); err != nil {
			return fmt.Errorf("send blob %s chunk %d/%d: %w", key, i, n, err)
		}
	}
	return nil
}

// BlobAssembler collects chunks until a blob is complete.
type BlobAssembler struct {
	mu    sync.Mutex
	parts map[string]*blobParts
}

type blobParts struct {
	chunks [][]byte
	have   int
	msgs   []jetstream.Msg
}

// NewBlobAssembler returns an empty assembler.
func NewBlobAssembler() *BlobAssembler { return &BlobAssembler{parts: map[string]*blobParts{}} }

// Add records one chunk message. When the blob is complete it returns the
// bytes and every chunk message (for the caller to ack once the blob's effect
// is durable); otherwise nil.
func (a *BlobAssembler) Add(m jetstream.Msg) ([]byte, []jetstream.Msg, error) {
	h := m.Headers()
	id := h.Get(HdrBlob)
	i, err1 := strconv.Atoi(h.Get(HdrChunk))
	n, err2 := strconv.Atoi(h.Get(HdrChunks))
	if id == "" || err1 != nil || err2 != nil || n < 1 || n > 1<<14 || i < 0 || i >= n {
		return nil, nil, fmt.Errorf("malformed blob chunk headers")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[id]
	if p == nil {
		p = &blobParts{chunks: make([][]byte, n)}
		a.parts[id] = p
	}
	if len(p.chunks) != n {
		return nil, nil, fmt.Errorf("blob %s: chunk count changed", id)
	}
	p.msgs = append(p.msgs, m)
	if p.chunks[i] == nil {
		p.chunks[i] = m.Data()
		p.have++
	}
	if p.have < n {
		return nil, nil, nil
	}
	delete(a.parts, id)
	var out []byte
	for _, c := range p.chunks {
		out = append(out, c...)
	}
	if BlobID(out) != id {
		return nil, p.msgs, fmt.Errorf("blob %s: digest mismatch", id)
	}
	return out, p.msgs, nil
}

// Assemble is Add for a consumer's Handler: it returns the outcome for chunk message m. When m
// completes its blob it returns the blob and every chunk message, which the caller settles once
// the blob's effect is durable, and Hold for m. While chunks are missing it returns Hold. A
// malformed chunk or a blob whose digest does not match returns Drop, and every chunk of that
// blob received so far is terminated: no redelivery can repair it.
func (a *BlobAssembler) Assemble(m jetstream.Msg) ([]byte, []jetstream.Msg, Outcome) {
	blob, msgs, err := a.Add(m)
	if err != nil {
		for _, mm := range msgs {
			_ = mm.Term()
		}
		return nil, nil, Drop
	}
	if blob == nil {
		return nil, nil, Hold
	}
	return blob, msgs, Hold
}
