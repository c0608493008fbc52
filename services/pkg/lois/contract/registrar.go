package contract

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The registrar's JetStream layout (spec §10): session records on a stream the CI replicas
// and SIs replay, install acknowledgements on core NATS subjects the registrar waits on
// before the device may use the session (install before use, §3.2).
const (
	// StreamSessions holds the session records. Its storage is memory: the records carry
	// stream keys, which never go to disk in clear (§10); wrapping them with Vault Transit
	// would allow file storage.
	StreamSessions = "LOIS_SESSIONS"
)

// SubjectSessionOpen is where the registrar of cloud publishes session records (a Keys
// holding every stream of the session and the SI partition count).
func SubjectSessionOpen(cloud string) string { return "lois." + cloud + ".session.open" }

// SubjectSessionReady is where the registrar of cloud publishes a session's READY record (a
// Keys with Ready set and no streams): the DI has installed the session, so SIs may send
// downloads with it (spec §3.2, install before use).
func SubjectSessionReady(cloud string) string { return "lois." + cloud + ".session.ready" }

// SubjectSessions is the stream's subject filter for session records.
func SubjectSessions() string { return "lois.*.session.>" }

// SubjectEpochs is the stream's subject filter for epoch records (replenishment, §3.12).
func SubjectEpochs() string { return "lois.*.epoch.>" }

// SubjectEpochGrant is where the registrar of cloud publishes an epoch record: a Keys of an
// open session holding only the granted stream, which replicas install and acknowledge like a
// session (install before use).
func SubjectEpochGrant(cloud string) string { return "lois." + cloud + ".epoch.grant" }

// SubjectLowWater is where an SI announces that its download pool of one session and
// service fell below the low-water mark (spec §10).
func SubjectLowWater(cloud, session string, sid uint16) string {
	return fmt.Sprintf("lois.%s.lowwater.%s.%d", cloud, session, sid)
}

// SubjectLowWaters matches every low-water event of cloud.
func SubjectLowWaters(cloud string) string { return "lois." + cloud + ".lowwater.*.*" }

// ErrBadLowWater: a low-water subject that is not lois.<cloud>.lowwater.<session>.<sid>.
var ErrBadLowWater = errors.New("lois: malformed low-water subject")

// ParseLowWater decodes a low-water event's subject of cloud (it comes from the network).
func ParseLowWater(cloud, subject string) (session string, sid uint16, err error) {
	prefix := "lois." + cloud + ".lowwater."
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", 0, ErrBadLowWater
	}
	session, sidStr, ok := strings.Cut(rest, ".")
	if !ok || len(session) != 32 {
		return "", 0, ErrBadLowWater
	}
	if b, err := hex.DecodeString(session); err != nil || len(b) != 16 || strings.ToLower(session) != session {
		return "", 0, ErrBadLowWater
	}
	v, err := strconv.ParseUint(sidStr, 10, 16)
	if err != nil || strconv.FormatUint(v, 10) != sidStr {
		return "", 0, ErrBadLowWater
	}
	return session, uint16(v), nil
}

// SubjectAck is where replica name acknowledges that it installed a session's epoch.
func SubjectAck(cloud, session string, epoch uint32, replica string) string {
	return fmt.Sprintf("lois.%s.ack.%s.%d.%s", cloud, session, epoch, replica)
}

// SubjectAcks matches every replica's ack of one session epoch.
func SubjectAcks(cloud, session string, epoch uint32) string {
	return fmt.Sprintf("lois.%s.ack.%s.%d.*", cloud, session, epoch)
}

// The registrar's control requests (spec §3.2 HELLO, EPOCH_REQ, EPOCH_GRANT; §10), carried as
// core NATS request/reply in place of the gRPC API over mutual TLS. They sit under
// lois.<cloud>.ctl, outside the session stream's subjects. Every answer that carries stream
// keys is sealed (Seal): a HELLO's under an X25519 exchange with the device's ephemeral key,
// later ones under the session's control key, which the device got in its HELLO answer.
// Who may send a HELLO rests on the NATS user's permissions (per-device users); the spec's
// mTLS device certificates are not built.

// SubjectHello is where devices send HELLO (HelloRequest; answer HelloReply).
func SubjectHello(cloud string) string { return "lois." + cloud + ".ctl.hello" }

// SubjectEpochRequest is where DIs send EPOCH_REQ (ControlRequest; answer ControlReply with
// the device's Keys of the new upload epoch).
func SubjectEpochRequest(cloud string) string { return "lois." + cloud + ".ctl.epoch" }

// SubjectRehello is where a DI whose seed is due asks for a full rekey (ControlRequest;
// answer ControlReply sealed under the old session's control key, holding the new session's
// Keys with their own control key).
func SubjectRehello(cloud string) string { return "lois." + cloud + ".ctl.rehello" }

// SubjectReady is where a DI sends READY once it installed its session's keys (ControlRequest
// sealed as SealReady; an empty ControlReply acknowledges it).
func SubjectReady(cloud string) string { return "lois." + cloud + ".ctl.ready" }

// SubjectDeviceGrant is where the registrar hands a DI a download EPOCH_GRANT of its session
// (ControlRequest sealed with the Keys; an empty answer is the DI's ack, spec §3.12).
func SubjectDeviceGrant(cloud, session string) string {
	return "lois." + cloud + ".ctl.grant." + session
}

// RegistrarQueue is the queue group the registrar's control subscriptions join.
const RegistrarQueue = "lois-registrar"

// HelloRequest is a device's HELLO: what it asks for and its ephemeral X25519 public key.
type HelloRequest struct {
	Version    int      `json:"version"`
	DeviceIP   string   `json:"device_ip"`
	DeviceWire string   `json:"device_wire"`
	Services   []uint16 `json:"services"`
	N          uint32   `json:"n,omitempty"` // keystreams per service and direction (0: the registrar's)
	Pub        []byte   `json:"pub"`
}

// HelloReply answers a HELLO: the registrar's ephemeral public key and the device's Keys
// sealed under the exchange, or an error.
type HelloReply struct {
	Error  string `json:"error,omitempty"`
	Pub    []byte `json:"pub,omitempty"`
	Sealed []byte `json:"sealed,omitempty"`
}

// ControlRequest is a request of an open session, sealed under its control key (the sealing
// authenticates the device: only the session's DI holds the key).
type ControlRequest struct {
	Session string `json:"session"`
	Sealed  []byte `json:"sealed"`
}

// EpochAsk is the sealed body of an EPOCH_REQ.
type EpochAsk struct {
	SID uint16 `json:"sid"`
	Dir string `json:"dir"` // "up": a DI asks only for its upload pools
}

// ControlReply answers a ControlRequest: sealed Keys or an error (ErrorRekeyDue,
// ErrorUnknownSession or a message).
type ControlReply struct {
	Error  string `json:"error,omitempty"`
	Sealed []byte `json:"sealed,omitempty"`
}

// Control errors on the wire.
const (
	ErrorRekeyDue       = "rekey_due"
	ErrorUnknownSession = "unknown_session"
)

// Sealing contexts (the additional data names what a sealed body is, and for which session).
const (
	SealHello   = "hello"
	SealEpoch   = "epoch"   // EpochAsk
	SealGrant   = "grant"   // Keys of a grant (EPOCH_REQ answer, download EPOCH_GRANT)
	SealRehello = "rehello" // request and answer of a full rekey
	SealReady   = "ready"   // a DI's READY
)

// ControlKeySize is the size of a session's control key.
const ControlKeySize = 32

// Seal encrypts plaintext with AES-256-GCM under key, bound to (kind, session); the output
// is nonce ‖ ciphertext.
func Seal(key []byte, kind, session string, plaintext []byte) ([]byte, error) {
	a, err := gcm(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, a.NonceSize(), a.NonceSize()+len(plaintext)+a.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, err
	}
	return a.Seal(out, out, plaintext, sealAD(kind, session)), nil
}

// ErrSealed: a sealed body that does not open (wrong key, session or kind, or altered).
var ErrSealed = errors.New("lois: sealed control message does not open")

// Open decrypts what Seal produced for (kind, session).
func Open(key []byte, kind, session string, sealed []byte) ([]byte, error) {
	a, err := gcm(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < a.NonceSize()+a.Overhead() {
		return nil, ErrSealed
	}
	pt, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], sealAD(kind, session))
	if err != nil {
		return nil, ErrSealed
	}
	return pt, nil
}

func sealAD(kind, session string) []byte { return []byte("LOIS/v1/ctl/" + kind + "/" + session) }

func gcm(key []byte) (cipher.AEAD, error) {
	if len(key) != ControlKeySize {
		return nil, fmt.Errorf("lois: control key of %d bytes", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// HelloKey is the key a HELLO answer is sealed under: HKDF-SHA256 of the X25519 shared
// secret, salted with both public keys.
func HelloKey(shared, devicePub, registrarPub []byte) ([]byte, error) {
	salt := append(append([]byte{}, devicePub...), registrarPub...)
	return hkdf.Key(sha256.New, shared, salt, "LOIS/v1/hello", ControlKeySize)
}
