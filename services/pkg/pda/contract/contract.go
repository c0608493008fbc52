// Package contract is what the PDA trust domains and the operator must agree on
// (shared/specs/pda.md §4.2): the two NATS accounts and their users, stream, bucket and
// subject names, message headers, the window states in the proxy's window bucket, the
// ring document, the result documents and the participant API's JSON shapes. It imports
// the standard library and natsx's account types only, so the roles, the participant
// client, the operator and the e2e tests share one copy instead of hand-kept ones.
package contract

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Trust domains are NATS accounts (spec §4.2): the proxy domain and the DB domain. Only the
// three cross-domain subject families are exported and imported, each as a service so a
// JetStream publish-ack comes back to the publisher:
//
//	pda.v1.ingest.<w>             proxy mixer → DB ingest stream (exported by PDA_DB)
//	pda.v1.reveal.req.<w>         DB shard → proxy oracle stream (exported by PDA_PROXY)
//	pda.v1.reveal.resp.<w>.<s>    proxy oracle → DB shard s (exported by PDA_DB)
const (
	ProxyAccount = "PDA_PROXY"
	DBAccount    = "PDA_DB"
	ProxyUser    = "pda-proxy"
	DBUser       = "pda-db"
)

// Streams and buckets. The proxy domain owns the pool, the reveal-request stream and the
// window bucket; the DB domain owns everything else.
const (
	PoolStream       = "PDA_PROXY_POOL"   // pda.v1.pool.<w>: BlindedItems before mixing
	RevealReqStream  = "PDA_PROXY_REVEAL" // pda.v1.reveal.req.<w>
	WindowsBucket    = "pda_windows"      // proxy: <w> → WindowRecord
	IngestStream     = "PDA_DB_INGEST"    // pda.v1.ingest.<w>: mixed chunks and the Seal
	ShardStream      = "PDA_DB_SHARD"     // pda.v1.shard.<shard>.<w>: sub-batches and Eval
	RevealRespStream = "PDA_DB_REVEAL"    // pda.v1.reveal.resp.<w>.<shard>
	RingBucket       = "pda_ring"         // DB: RingKey → RingDocument
	RingKey          = "ring"
	DBWindowsBucket  = "pda_db_windows" // DB: <w>.ring (the ring pinned for the window), <w>.seal, <w>.batch.<id>
	ResultsBucket    = "pda_results"    // DB: <w> (the merged WindowResult) and <w>.<shard> (parts)
)

// VirtualNodes is the number of ring points per shard of the rings the operator publishes
// (pda/ring.VirtualNodes: 4,096, so that T-DIST-2 holds; the spec's 256 does not meet it). A
// ring document with 256 still decodes; any other count is refused.
const VirtualNodes = 4096

// Message headers. None of them crosses into the DB domain with anything a participant
// chose or the proxy could link to one (the pool's pid header is stripped by the mixer).
const (
	HdrKind  = "Pda-Kind"  // one of the Kind values
	HdrBatch = "Pda-Batch" // mixer chunk id (DB-domain sub-batch ids derive from it)
	HdrShard = "Pda-Shard" // reveal request: the shard to answer
	HdrPid   = "Pda-Pid"   // pool only: HMAC(K_mix, participant), never forwarded
)

// Values of HdrKind.
const (
	KindChunk    = "chunk"
	KindSeal     = "seal"
	KindSubBatch = "subbatch"
	KindEval     = "eval"
)

// Window states of the proxy mixer, in order.
const (
	WindowOpen    = "open"
	WindowClosed  = "closed"  // ingress rejects new items; in-flight ones have Grace to land
	WindowSealing = "sealing" // the item set is fixed (pool sequence ≤ LastSeq)
	WindowSealed  = "sealed"  // chunks and Seal are in the DB ingest stream
)

// PoolSubject is the proxy-internal pool of window w.
func PoolSubject(w uint64) string { return "pda.v1.pool." + strconv.FormatUint(w, 10) }

// IngestSubject is the DB ingest subject of window w.
func IngestSubject(w uint64) string { return "pda.v1.ingest." + strconv.FormatUint(w, 10) }

// ShardSubject is shard's work subject for window w.
func ShardSubject(shard string, w uint64) string {
	return fmt.Sprintf("pda.v1.shard.%s.%d", shard, w)
}

// RevealReqSubject is the oracle's request subject of window w.
func RevealReqSubject(w uint64) string { return "pda.v1.reveal.req." + strconv.FormatUint(w, 10) }

// RevealRespSubject is shard's response subject for window w.
func RevealRespSubject(w uint64, shard string) string {
	return fmt.Sprintf("pda.v1.reveal.resp.%d.%s", w, shard)
}

// ResultsSubject carries the merged results of window w.
func ResultsSubject(w uint64) string { return "pda.v1.results." + strconv.FormatUint(w, 10) }

// WindowOf parses the token at position i of subject (negative counts from the end) as a
// window id.
func WindowOf(subject string, i int) (uint64, error) {
	toks := strings.Split(subject, ".")
	if i < 0 {
		i += len(toks)
	}
	if i < 0 || i >= len(toks) {
		return 0, fmt.Errorf("subject %q has no token %d", subject, i)
	}
	return strconv.ParseUint(toks[i], 10, 64)
}

// WindowKey is a window's key in the window, result and DB-window buckets.
func WindowKey(w uint64) string { return strconv.FormatUint(w, 10) }

// ValidShardID reports whether id can be a subject token and KV key part.
func ValidShardID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// AccountsFor are the two PDA accounts with their users: only the three cross-domain
// subject families are exported and imported.
func AccountsFor(proxy, db []natsx.User) []natsx.Account {
	return []natsx.Account{
		{Name: ProxyAccount, JetStream: true, Users: proxy,
			Exports: []natsx.Export{{Subject: "pda.v1.reveal.req.>", Accounts: []string{DBAccount}}},
			Imports: []natsx.Import{{Account: DBAccount, Subject: "pda.v1.ingest.>"}, {Account: DBAccount, Subject: "pda.v1.reveal.resp.>"}}},
		{Name: DBAccount, JetStream: true, Users: db,
			Exports: []natsx.Export{{Subject: "pda.v1.ingest.>", Accounts: []string{ProxyAccount}}, {Subject: "pda.v1.reveal.resp.>", Accounts: []string{ProxyAccount}}},
			Imports: []natsx.Import{{Account: ProxyAccount, Subject: "pda.v1.reveal.req.>"}}},
	}
}

// AccountsConfig renders the nats-server accounts block of the two trust domains (the
// layout the operator renders too). password(user) gives each service user's password.
func AccountsConfig(password func(user string) string) string {
	return natsx.Layout{Accounts: AccountsFor(
		[]natsx.User{{Name: ProxyUser, Password: password(ProxyUser)}},
		[]natsx.User{{Name: DBUser, Password: password(DBUser)}})}.Render()
}
