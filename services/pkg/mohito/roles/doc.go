// Package roles turns the Mohito protocol library (pkg/mohito) into the
// running system of spec §3.5, §4.5 and §10: every role as a long-running
// component over NATS JetStream, with the integrator's per-round state in
// its own Redis (pkg/mohito/roundstate).
//
// Integrator roles: Gateway (user API over gRPC with fixed-size binary
// envelopes, token authentication, q per user per round, index assignment),
// Coordinator (leader-elected round clock with pipelined rounds, round ids by
// compare-and-set in JetStream KV, shuffler selection by smooth weighted
// round-robin, the secret per-round C, close, the G2 check, abort when V*
// does not answer), DecryptWorker (Stage A, a shared pull consumer over V*'s
// output, one batch of output positions per message), Encoder (Stage C for
// the vendors that a weighted rendezvous hash assigns to it, and the
// response decoding for the same vendors) and Responder (M9 assembly, M10
// routing to user mailboxes). Vendor roles: ShufflerService (V* when
// selected) and VendorAgent (delivers one message per device per round,
// collects responses, encodes the response OKVS).
//
// Delivery is at-least-once with Nats-Msg-Id de-duplication; a message is
// acked only after its effect is durable (published and acknowledged
// downstream, or written to Redis / the Object Store). Two states are kept in
// memory on purpose: V*'s permutation and fake set (spec §10: never stored
// where the integrator can read them, and the library keeps them unexported)
// and the coordinator's G2-check state. Losing either before the plan of a
// round is published aborts that round before any vendor received anything,
// so clients retry and nothing is delivered twice.
package roles
