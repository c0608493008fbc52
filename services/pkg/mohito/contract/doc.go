// Package contract is what Mohito's trust domains and the operator must agree on (spec §10):
// the NATS accounts, users and the two inbox families that cross an account boundary,
// device subjects and permissions, stream, bucket and consumer names, the subjects and
// message kinds of a round, the status the coordinator reports and the vendor registry the
// operator writes. It imports the standard library and natsx's account types only, so the
// roles, the clients, the operator and the e2e tests read one copy.
//
// The envelopes' byte layout is the protocol core's (package mohito): its parsers are the
// only code that reads a header.
package contract
