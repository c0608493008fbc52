// Package roles runs privacy-preserving data aggregation (shared/specs/pda.md) as services:
// the proxy domain's participant ingress (mTLS identities, quotas, rate limits and the
// session replay cache in the proxy's Redis), the window-mode mixer and the decryption
// oracle, and the DB domain's front-ends and shards (a consistent-hash ring in NATS KV,
// each shard's table in its own Redis), connected by NATS JetStream in two accounts that
// share only the three cross-domain subject families of spec §4.2. The cryptography is
// services/pkg/pda; this package adds transport, storage, windows and failure handling.
//
// [R] decisions taken here (docs/pda.md): window mode only; the mixer's permutation comes
// from a PRG keyed by K_mix and the window's item set, so a resumed seal republishes the
// same chunks under the same ids; every stage acks after its durable effect and every
// effect is idempotent (message ids, sub-batch ids, first-write-wins entries, settlement
// once per (window, request id)); a window is routed with the ring pinned at its first
// routing, so ring changes never split a row; results go to the KV bucket pda_results and
// the subject pda.v1.results.<w> for the operator to copy into the AggregationJob.
package roles
