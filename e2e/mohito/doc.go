// Package mohito holds the end-to-end test of the Mohito round daemons: the
// `mohito` binary built once, every role (gateway, coordinator, decrypt
// workers, encoders, responder, one shuffler and one vendor agent per vendor)
// as a separate OS process against a real NATS server with one account per
// trust domain and a real redis-server, driven by simulated users and devices.
package mohito
