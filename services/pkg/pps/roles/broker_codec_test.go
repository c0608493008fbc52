package roles

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// countingPool is a mem.BufferPool that counts the buffers handed out and not put back.
type countingPool struct{ out atomic.Int64 }

func (p *countingPool) Get(n int) *[]byte {
	p.out.Add(1)
	b := make([]byte, n, max(n, 4096)) // above gRPC's pooling threshold: Free puts it back
	return &b
}

func (p *countingPool) Put(*[]byte) { p.out.Add(-1) }

// pieces splits an encoded message into pooled buffers at random boundaries, as gRPC hands a
// message received in several HTTP/2 frames to the codec.
func pieces(rng *rand.Rand, pool *countingPool, enc []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(enc) > 0 {
		n := min(len(enc), 1+rng.IntN(max(1, len(enc))))
		if rng.IntN(3) == 0 {
			n = min(len(enc), 1+rng.IntN(3)) // a tiny piece: a tag or length split across pieces
		}
		b := pool.Get(n)
		copy(*b, enc[:n])
		s = append(s, mem.NewBuffer(b, pool))
		enc = enc[n:]
	}
	return s
}

// wireStream is a Garble client stream whose messages arrive as gRPC delivers them: encoded,
// in pooled pieces, decoded by the call's chunkCodec, the pieces freed after decoding.
type wireStream struct {
	codec *chunkCodec
	rng   *rand.Rand
	pool  *countingPool
	msgs  [][]byte
}

func (s *wireStream) chunkCodec() *chunkCodec { return s.codec }

func (s *wireStream) Recv() (*ppsv1.GarbleResponse, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	data := pieces(s.rng, s.pool, s.msgs[0])
	s.msgs = s.msgs[1:]
	defer data.Free() // as grpc's recv does once Unmarshal returns
	m := new(ppsv1.GarbleResponse)
	if err := s.codec.Unmarshal(data, m); err != nil {
		return nil, err
	}
	return m, nil
}

func encode(t testing.TB, m *ppsv1.GarbleResponse) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestChunkCodecStreamInPlace: a garbled stream of data messages of many sizes (one of them
// empty), each delivered in pieces split anywhere — inside the tag or the length prefix too —
// reads back byte for byte through the codec and chunkReader, the codec takes every data
// message, and every received buffer goes back to the pool once read.
func TestChunkCodecStreamInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		pool := &countingPool{}
		var want []byte
		// An empty data message first (not last: the reader stops at the announced end).
		msgs := [][]byte{encode(t, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{}})}
		for range 1 + rng.IntN(12) {
			d := make([]byte, 1+rng.IntN(40000))
			for j := range d {
				d[j] = byte(rng.Uint32())
			}
			want = append(want, d...)
			msgs = append(msgs, encode(t, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: d}}))
		}
		s := &wireStream{codec: &chunkCodec{}, rng: rng, pool: pool, msgs: msgs}
		took := 0
		inner := s.codec
		rd := streamReader[*ppsv1.GarbleResponse](s, uint64(len(want)))
		// Count the messages the codec took (held) by wrapping recv.
		recv := rd.recv
		rd.recv = func(ps [][]byte) ([][]byte, mem.BufferSlice, bool, error) {
			ps, held, hdr, err := recv(ps)
			if held != nil {
				took++
			}
			return ps, held, hdr, err
		}
		var got bytes.Buffer
		buf := make([]byte, 1+rng.IntN(70000))
		if _, err := io.CopyBuffer(&got, io.LimitReader(rd, int64(len(want))), buf); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if err := rd.finish(); err != nil {
			t.Fatalf("trial %d: finish: %v", trial, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("trial %d: %d bytes read differ from the %d streamed", trial, got.Len(), len(want))
		}
		if took != len(msgs) {
			t.Fatalf("trial %d: the codec took %d of %d data messages", trial, took, len(msgs))
		}
		if inner.held != nil {
			t.Fatalf("trial %d: the codec still holds a message", trial)
		}
		if n := pool.out.Load(); n != 0 {
			t.Fatalf("trial %d: %d received buffers not back in the pool", trial, n)
		}
	}
}

// TestChunkCodecFallsBackToProto: a header, a data field repeated, a data field followed by
// another field, and an unknown field are decoded by proto (the codec holds nothing), and a
// second header inside the stream or more bytes than announced are refused as before.
func TestChunkCodecFallsBackToProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	hdr := &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Header{Header: &ppsv1.GarbleHeader{Round: 7, StreamBytes: 5}}}
	data := encode(t, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: []byte("abcde")}})
	twice := append(bytes.Clone(data), encode(t, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: []byte("xy")}})...)
	unknown := protowire.AppendTag(bytes.Clone(data), 9, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	for name, enc := range map[string][]byte{"header": encode(t, hdr), "data twice": twice, "unknown field": unknown} {
		pool := &countingPool{}
		c := &chunkCodec{}
		in := pieces(rng, pool, enc)
		got := new(ppsv1.GarbleResponse)
		if err := c.Unmarshal(in, got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		in.Free()
		want := new(ppsv1.GarbleResponse)
		if err := proto.Unmarshal(enc, want); err != nil {
			t.Fatal(err)
		}
		if c.held != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: decoded %v (held %v), proto decodes %v", name, got, c.held != nil, want)
		}
		if n := pool.out.Load(); n != 0 {
			t.Fatalf("%s: %d buffers not back in the pool", name, n)
		}
	}

	stream := func(msgs ...[]byte) *chunkReader {
		s := &wireStream{codec: &chunkCodec{}, rng: rng, pool: &countingPool{}, msgs: msgs}
		return streamReader[*ppsv1.GarbleResponse](s, 5)
	}
	if _, err := io.ReadAll(stream(encode(t, hdr))); err == nil || err.Error() != "a second header in the stream" {
		t.Fatalf("a second header: %v", err)
	}
	if _, err := io.ReadAll(stream(encode(t, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: []byte("abcdefg")}}))); err == nil {
		t.Fatal("7 bytes read from a stream of 5 announced")
	}
	rd := stream(data, data)
	if _, err := io.ReadAll(rd); err != nil {
		t.Fatal(err)
	}
	if err := rd.finish(); err == nil {
		t.Fatal("data after the announced end accepted")
	}
	if _, err := io.ReadAll(stream(data[:4])); !errors.Is(err, io.ErrUnexpectedEOF) && err == nil {
		t.Fatalf("a truncated stream: %v", err)
	}
}

// FuzzChunkCodec: whatever bytes arrive, split anywhere, the codec decodes them as
// proto.Unmarshal does — the same error or none, the same header, the same data bytes
// whether read in place or from the message — and frees every buffer it received.
func FuzzChunkCodec(f *testing.F) {
	f.Add(encode(f, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: []byte("rows")}}), uint64(1))
	f.Add(encode(f, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: make([]byte, 300)}}), uint64(2))
	f.Add(encode(f, &ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Header{Header: &ppsv1.GarbleHeader{Round: 1}}}), uint64(3))
	f.Add([]byte{0x12, 0x80, 0x00}, uint64(4))    // a non-minimal length of 0
	f.Add([]byte{0x92, 0x00, 0x01, 7}, uint64(5)) // a non-minimal tag
	f.Add([]byte{0x12, 0x05, 1}, uint64(6))       // shorter than its length
	f.Fuzz(func(t *testing.T, enc []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0))
		pool := &countingPool{}
		c := &chunkCodec{}
		in := pieces(rng, pool, enc)
		got := new(ppsv1.GarbleResponse)
		err := c.Unmarshal(in, got)
		in.Free()
		want := new(ppsv1.GarbleResponse)
		werr := proto.Unmarshal(enc, want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("codec error %v, proto error %v", err, werr)
		}
		held, skip := c.take()
		if err != nil {
			if held != nil {
				t.Fatal("a message refused and held")
			}
			return
		}
		gotData := got.GetData()
		if held != nil {
			gotData = held.Materialize()[skip:]
			held.Free()
			if _, ok := got.GetChunk().(*ppsv1.GarbleResponse_Data); !ok {
				t.Fatal("held data without a data chunk")
			}
		} else if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto decodes %v", got, want)
		}
		if !bytes.Equal(gotData, want.GetData()) || (got.GetHeader() == nil) != (want.GetHeader() == nil) {
			t.Fatalf("data %x, proto's %x", gotData, want.GetData())
		}
		if n := pool.out.Load(); n != 0 {
			t.Fatalf("%d buffers not back in the pool", n)
		}
	})
}
