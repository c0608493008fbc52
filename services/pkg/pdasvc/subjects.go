package pdasvc

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
	ProxyAccount = natsx.PDAProxyAccount
	DBAccount    = natsx.PDADBAccount
	ProxyUser    = "pda-proxy"
	DBUser       = "pda-db"
)

// Streams and buckets. The proxy domain owns the pool, the reveal-request stream and the
// window bucket; the DB domain owns everything else.
const (
	PoolStream       = "PDA_PROXY_POOL"   // pda.v1.pool.<w>: BlindedItems before mixing
	RevealReqStream  = "PDA_PROXY_REVEAL" // pda.v1.reveal.req.<w>
	WindowsBucket    = "pda_windows"      // proxy: <w> → window state and seal record
	IngestStream     = "PDA_DB_INGEST"    // pda.v1.ingest.<w>: mixed chunks and the Seal
	ShardStream      = "PDA_DB_SHARD"     // pda.v1.shard.<shard>.<w>: sub-batches and Eval
	RevealRespStream = "PDA_DB_REVEAL"    // pda.v1.reveal.resp.<w>.<shard>
	RingBucket       = "pda_ring"         // DB: "ring" → versioned ring document
	RingKey          = "ring"
	DBWindowsBucket  = "pda_db_windows" // DB: <w>.ring, <w>.seal, <w>.batch.<id>
	ResultsBucket    = "pda_results"    // DB: <w> (merged) and <w>.<shard> (parts)
)

// Message headers. None of them crosses into the DB domain with anything a participant
// chose or the proxy could link to one (the pool's pid header is stripped by the mixer).
const (
	HdrKind  = "Pda-Kind"  // chunk | seal | subbatch | eval
	HdrBatch = "Pda-Batch" // mixer chunk id (DB-domain sub-batch ids derive from it)
	HdrShard = "Pda-Shard" // reveal request: the shard to answer
	HdrPid   = "Pda-Pid"   // pool only: HMAC(K_mix, participant), never forwarded
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

// windowOf parses the token at position i of subject as a window id.
func windowOf(subject string, i int) (uint64, error) {
	toks := strings.Split(subject, ".")
	if i < 0 {
		i += len(toks)
	}
	if i < 0 || i >= len(toks) {
		return 0, fmt.Errorf("subject %q has no token %d", subject, i)
	}
	return strconv.ParseUint(toks[i], 10, 64)
}

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

// AccountsConfig renders the nats-server accounts block of the two trust domains
// (natsx.PDAAccountsFor, the layout the operator renders too). password(user) gives each
// service user's password.
func AccountsConfig(password func(user string) string) string {
	return natsx.Layout{Accounts: natsx.PDAAccountsFor(
		[]natsx.User{{Name: ProxyUser, Password: password(ProxyUser)}},
		[]natsx.User{{Name: DBUser, Password: password(DBUser)}})}.Render()
}
