// Package pda holds the end-to-end test of the PDA daemons: the `pda` binary built once, every
// role (proxy ingress, mixer, oracle, DB front-end, two DB shards) as a separate OS process
// against a real NATS server with one account per trust domain and real redis-servers (one for
// the proxy domain, one per shard), driven by participants over mTLS through the participant
// client and the `pda submit` CLI. The tests read the result the way the operator does, from
// the DB domain's NATS KV, and watch the DB domain's NATS traffic for what it must never see.
package pda
