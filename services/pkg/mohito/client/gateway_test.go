package client

import (
	"testing"

	"google.golang.org/protobuf/proto"

	mohitov1 "github.com/obscura-iot/obscura/services/proto/obscura/mohito/v1"
)

func FuzzSubmitResponse(f *testing.F) {
	tt, idx := uint64(9), uint32(0)
	b, _ := proto.Marshal(&mohitov1.SubmitResponse{T: &tt, Index: &idx})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp mohitov1.SubmitResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		if tt, idx, err := submitTicket(&resp); err == nil && (tt != resp.GetT() || idx != resp.GetIndex()) {
			t.Fatal("ticket does not match the response")
		}
	})
}
