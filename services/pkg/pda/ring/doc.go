// Package ring is the consistent-hash ring that assigns PDA blinded keys to DB shards
// (spec §4.3, U18). Each shard owns VirtualNodes = 4,096 points uint64(SHA-256("PDA-ring" ||
// shard_id || I2OSP(v,2))[0:8]); a key position pos(Y) = uint64(SHA-256("PDA-key" ||
// enc(Y))[0:8]) (pda.KeyPosition) belongs to the first point clockwise, wrapping around
// (A12: binary search over the sorted points). The ring is pure Go and shared by the DB
// front-ends, the shards and the operator, so all of them route identically.
//
// [R] decisions: the ring is a versioned document (Version is carried by every Entry, and
// membership changes only at window boundaries in v1); its JSON encoding is what the
// operator stores in NATS KV, and Decode validates it fully (sorted, unique, non-empty
// shard ids, bounded count) because it crosses a trust boundary inside the DB domain.
// Points that collide are ordered by shard id, so every party breaks ties identically.
// The spec's 256 points per shard cannot meet its own T-DIST-2 (8 shards within ±5 % of the
// mean): a share deviates by ≈ 1/√V, 6 %; 4,096 points (≈ 1.6 %) do [R], and documents with
// 256 still decode. Adding a shard moves about 1/(N+1) of the key space (T-DIST-3).
package ring
