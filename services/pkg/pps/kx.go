package pps

import (
	"crypto/ecdh"
	"fmt"

	"golang.org/x/crypto/blake2b"
)

// SessionKeys are the two directional keys of a crypto_kx exchange between a client
// (publisher or subscriber) and the Garbler (spec §3.11, §8.9). Both sides compute the same
// value, named by direction rather than by rx/tx so neither side can pick the wrong half.
type SessionKeys struct {
	// ClientToServer is the client's tx and the server's rx: BLAKE2b-512 output bytes [32:64].
	ClientToServer Seed
	// ServerToClient is the client's rx and the server's tx: BLAKE2b-512 output bytes [0:32].
	ServerToClient Seed
}

// Zero erases both keys.
func (k *SessionKeys) Zero() {
	k.ClientToServer.Zero()
	k.ServerToClient.Zero()
}

// ClientSessionKeys is libsodium crypto_kx_client_session_keys: with q = X25519(client, server),
// BLAKE2b-512(q || client_pk || server_pk) split as rx = [0:32], tx = [32:64].
func ClientSessionKeys(client *ecdh.PrivateKey, serverPublic []byte) (SessionKeys, error) {
	return sessionKeys(client, client.PublicKey().Bytes(), serverPublic, serverPublic)
}

// ServerSessionKeys is libsodium crypto_kx_server_session_keys, the Garbler's side.
func ServerSessionKeys(server *ecdh.PrivateKey, clientPublic []byte) (SessionKeys, error) {
	return sessionKeys(server, clientPublic, server.PublicKey().Bytes(), clientPublic)
}

func sessionKeys(own *ecdh.PrivateKey, clientPK, serverPK, peer []byte) (SessionKeys, error) {
	if own.Curve() != ecdh.X25519() {
		return SessionKeys{}, fmt.Errorf("crypto_kx: key is not X25519")
	}
	pk, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return SessionKeys{}, fmt.Errorf("crypto_kx: peer public key: %w", err)
	}
	// ECDH fails on a low-order peer key (all-zero q), as libsodium's crypto_scalarmult does.
	q, err := own.ECDH(pk)
	if err != nil {
		return SessionKeys{}, fmt.Errorf("crypto_kx: %w", err)
	}
	h, _ := blake2b.New512(nil)
	h.Write(q)
	h.Write(clientPK)
	h.Write(serverPK)
	clear(q)
	var sum [64]byte
	h.Sum(sum[:0])
	var k SessionKeys
	copy(k.ServerToClient[:], sum[:32])
	copy(k.ClientToServer[:], sum[32:])
	clear(sum[:])
	return k, nil
}

// PublisherRatchetKey is K_0 of a publisher ratchet: PRF(k_c2s, "pps/v1/pub-ratchet")
// (spec §8.9).
func PublisherRatchetKey(k *SessionKeys) Seed { return PRF(&k.ClientToServer, labelPubRatchet) }
