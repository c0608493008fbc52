// Package natsx holds the NATS plumbing every Obscura service shares: the
// per-trust-domain account layout (one account per party, exporting and
// importing only the subjects the Mohito protocol needs, spec §10), stream,
// key-value and object-store setup, publishing with Nats-Msg-Id
// de-duplication, chunked blob transfer across an account boundary, and the
// one helper that runs a JetStream pull consumer with backoff and explicit
// acks after the handler's effect is durable.
package natsx
