// Package client holds the PPS device clients (shared/specs/publish-process-subscribe.md §2.1,
// §3.3, §3.11, §8.3, §8.7, §8.9): a Publisher, which runs the signed setup handshake with the
// garbler through the broker and then publishes one round of wire labels per message, and a
// Subscriber, which obtains a function's key grant the same way and unmasks the function's
// outputs. Both speak MQTT 3.1.1 to NATS's MQTT listener (§5.3) on the reserved pps/
// namespace, with the topics, messages and decoders of pps/contract and the cryptography of
// pps; the package imports no role.
//
// Decisions taken: the garbler's Ed25519 key is pinned in the device (D20), so an
// acknowledgement not signed by it — a broker substituting its own key exchange — fails the
// setup (§10 #11); one ratchet step per published message (D7), taken before the message is
// sent, so a failed send burns its round instead of reusing it, and the ratchet state is
// handed to the caller to persist before anything leaves the device (a restored state never
// repeats a round); the MQTT client id is derived from the device id, so one device holds one
// session per role; credentials come from a file, never a flag. In
// hardened mode H1 (D21) a publisher sends y = x ⊕ m instead of labels, and sends labels only
// if it also feeds faithful functions.
package client
