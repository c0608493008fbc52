package roles

import (
	"encoding/binary"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// chunkCodec is the broker's codec for one call of the garbler's streams (Garble,
// Pregarble): the request and the stream's header go through proto as with the default
// codec, but a data message's bytes are not copied out of the buffers gRPC received them in.
// With the default codec each data message of the 2.65 MB a Table 2 tick streams was copied
// into a zeroed pooled buffer (the message's frames joined), then into a freshly allocated
// and zeroed []byte (proto.Unmarshal), then into the evaluator's chunk; here the codec keeps
// a reference to the received buffers, the stream's chunkReader copies straight from them
// into the evaluator's chunk and frees each message once read.
//
// Only a message that is exactly one data field (what the garbler sends) takes this path;
// anything else — a header, unknown or repeated fields, a malformed message — is decoded by
// proto as before, so what the broker reads is what proto.Unmarshal would give
// (FuzzChunkCodec). The wire format is unchanged; the garbler does not know the difference.
type chunkCodec struct {
	held mem.BufferSlice // the last data message's buffers, referenced, nil once taken
	skip int             // the bytes of held before the data (the field's tag and length)
}

// chunkCodecProto is gRPC's proto codec, which chunkCodec delegates to.
var chunkCodecProto = encoding.GetCodecV2(proto.Name)

// callOption makes a call use c.
func (c *chunkCodec) callOption() grpc.CallOption { return grpc.ForceCodecV2(c) }

// Name is proto's: the content-subtype on the wire is unchanged.
func (c *chunkCodec) Name() string { return proto.Name }

func (c *chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return chunkCodecProto.Marshal(v) }

func (c *chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var data2 *[]byte // the message's data field, set where v is a stream message
	switch m := v.(type) {
	case *ppsv1.GarbleResponse:
		if skip, ok := dataOnly(data); ok {
			m.Reset()
			d := &ppsv1.GarbleResponse_Data{}
			m.Chunk, data2 = d, &d.Data
			c.hold(data, skip)
		}
	case *ppsv1.PregarbleResponse:
		if skip, ok := dataOnly(data); ok {
			m.Reset()
			d := &ppsv1.PregarbleResponse_Data{}
			m.Chunk, data2 = d, &d.Data
			c.hold(data, skip)
		}
	}
	if data2 != nil {
		return nil
	}
	return chunkCodecProto.Unmarshal(data, v)
}

// hold keeps a reference to a data message's buffers (gRPC frees its own after Unmarshal).
func (c *chunkCodec) hold(data mem.BufferSlice, skip int) {
	c.release()
	data.Ref()
	c.held, c.skip = data, skip
}

// take hands the last data message's buffers and the offset of its data to the caller, who
// frees them; nil when the last message was not taken by the codec.
func (c *chunkCodec) take() (mem.BufferSlice, int) {
	h, s := c.held, c.skip
	c.held, c.skip = nil, 0
	return h, s
}

// release frees buffers held and not taken.
func (c *chunkCodec) release() {
	if c.held != nil {
		c.held.Free()
		c.held, c.skip = nil, 0
	}
}

// dataOnly reports whether the encoded message is exactly one field 2 of wire type bytes
// (GarbleResponse's and PregarbleResponse's data) whose length is the rest of the message,
// and the length of its tag and length prefix.
func dataOnly(data mem.BufferSlice) (int, bool) {
	var pre [2 * binary.MaxVarintLen64]byte
	n := 0
	for _, b := range data {
		n += copy(pre[n:], b.ReadOnlyData())
		if n == len(pre) {
			break
		}
	}
	num, typ, k := protowire.ConsumeTag(pre[:n])
	if k < 0 || num != 2 || typ != protowire.BytesType {
		return 0, false
	}
	l, m := protowire.ConsumeVarint(pre[k:n])
	if m < 0 || uint64(data.Len()-k-m) != l {
		return 0, false
	}
	return k + m, true
}
