package contract

import (
	"slices"
	"strings"
	"time"
)

// WindowRecord is the proxy mixer's record of window w in WindowsBucket (key WindowKey(w)).
type WindowRecord struct {
	State    string    `json:"state"` // one of the Window* states; "" reads as WindowOpen
	ClosedAt time.Time `json:"closed_at"`
	LastSeq  uint64    `json:"last_seq,omitempty"`
	Total    int       `json:"total,omitempty"`
	Batches  []string  `json:"batches,omitempty"`
}

// RingDocument is the versioned consistent-hash ring in RingBucket under RingKey: shard ids
// sorted, so one ring has exactly one encoding.
type RingDocument struct {
	Version      uint64   `json:"version"`
	VirtualNodes int      `json:"virtual_nodes"`
	Shards       []string `json:"shards"`
}

// RevealedKey is one published row (release variant V2: (k, T[k])).
type RevealedKey struct {
	Key    string   `json:"key"`  // text form (IP, domain, URL, string; hex for opaque keys)
	Type   uint8    `json:"type"` // canonical key type (U6)
	Count  int      `json:"count"`
	Values []uint16 `json:"values,omitempty"` // only when the job has a value domain
}

// WindowResult is what the DB publishes for a window: the merged document in ResultsBucket
// under "<w>" and on ResultsSubject(w); each shard's part is under "<w>.<shard>".
type WindowResult struct {
	Window      uint64        `json:"window"`
	RingVersion uint64        `json:"ring_version"`
	Shards      []string      `json:"shards"`
	Revealed    []RevealedKey `json:"revealed"`
}

// The participant API of the proxy's ingress (mTLS; the identity comes from the client
// certificate, never from a request body).
const (
	PathSession = "/v1/session"
	PathSubmit  = "/v1/submit"
)

// Reason codes the proxy returns per rejected item. They are the only thing a participant
// learns besides the acceptance count (T-PRIV-9).
const (
	ReasonBadProof     = "BAD_PROOF"
	ReasonMalformed    = "MALFORMED"
	ReasonInvalid      = "INVALID_ELEMENT"
	ReasonReplay       = "REPLAY"
	ReasonQuota        = "QUOTA"
	ReasonRate         = "RATE"
	ReasonWindowClosed = "WINDOW_CLOSED"
	ReasonRejected     = "REJECTED"
)

// SessionResponse is the answer to POST PathSession.
type SessionResponse struct {
	Window  uint64 `json:"window"`
	Session string `json:"session"` // hex session id, bound into every proof
	Params  string `json:"params"`  // base64 PublicParams of the window
}

// SubmitResponse is the answer to POST PathSubmit: counts and reason codes only.
type SubmitResponse struct {
	Accepted int             `json:"accepted"`
	Rejected []ItemRejection `json:"rejected,omitempty"`
	Window   uint64          `json:"window"`
	Reasons  map[string]int  `json:"reasons,omitempty"`
}

// ItemRejection says why the item at Position (in the request) was dropped.
type ItemRejection struct {
	Position int    `json:"position"`
	Reason   string `json:"reason"`
}

// SortRevealed puts revealed rows in their canonical order (key, then type), so every
// merger of a window writes the same bytes.
func SortRevealed(r []RevealedKey) {
	slices.SortFunc(r, func(a, b RevealedKey) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return int(a.Type) - int(b.Type)
	})
}
