// Package contract is what the PPS trust domains, the devices and the operator must agree on
// (shared/specs/publish-process-subscribe.md §5.3, §8.6, §8.9): the reserved NATS/MQTT
// namespace and its subjects, the three JetStream streams, the device messages of the setup
// handshakes, the publish message and the function output, each with a strict decoder. It
// imports the standard library only, so the broker, the garbler, the clients, the operator and
// the e2e tests share one copy instead of hand-kept ones.
//
// Names. Devices are named by the lowercase hex of their Ed25519 public key (64 characters,
// never containing '.', '+', '#' or a space, so an MQTT topic maps to a NATS subject one to
// one: '/' becomes '.'). A publisher's pubid is its device id. A function's fnid is
// dsl.Function.ID: the first 16 bytes, hex, of SHA-256 of the canonical source.
package contract

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed: a device message or name that does not decode or validate. Every rejection
// wraps it, so the roles count rejections by reason with errors.Is.
var ErrMalformed = errors.New("pps: malformed device message")

// Version is the "v" of every device message this contract decodes.
const Version = 1

// The reserved namespace (spec §5.3): everything under pps. is protocol traffic. NATS's MQTT
// listener maps topic a/b/c to subject a.b.c.
const (
	Namespace = "pps"

	// PubStream holds publishers' labels: pps.pub.<pubid>. Its max age is at least the longest
	// accumulation window of any function (26 h for daily statistics).
	PubStream   = "PPS_PUB"
	PubSubjects = "pps.pub.>"
	// DevStream is the device setup inbox, pps.dev.<id>.up, with work-queue retention: the
	// broker relays each message to the garbler once.
	DevStream   = "PPS_DEV"
	DevSubjects = "pps.dev.*.up"
	// OutStream holds function outputs, pps.fn.<fnid>.out, kept (7 days by default) so late
	// or reconnecting subscribers catch up.
	OutStream   = "PPS_OUT"
	OutSubjects = "pps.fn.>"
	// DownSubjects are the broker's replies to devices (core NATS; devices subscribe with
	// MQTT QoS 1 to their own topic only).
	DownSubjects = "pps.dev.*.down"

	// BrokerUser is the broker's NATS user. The garbler has no NATS user at all (§10 #10).
	BrokerUser = "pps-broker"
	// BrokerDurable names the broker's durable pull consumers (<BrokerDurable>-pub, -dev).
	BrokerDurable = "pps-broker"
)

// IDLen is the length of a device id: hex of a 32-byte Ed25519 public key.
const IDLen = 64

// FnIDLen is the length of a function id: hex of 16 bytes.
const FnIDLen = 32

// ValidDeviceID reports whether id is a device id: 64 lowercase hex characters.
func ValidDeviceID(id string) error { return validHex(id, IDLen, "device id") }

// ValidFnID reports whether fn is a function id: 32 lowercase hex characters.
func ValidFnID(fn string) error { return validHex(fn, FnIDLen, "function id") }

func validHex(s string, n int, what string) error {
	if len(s) != n {
		return fmt.Errorf("%s %.80q: %d characters, want %d lowercase hex: %w", what, s, len(s), n, ErrMalformed)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%s %.80q: character %d is not lowercase hex: %w", what, s, i, ErrMalformed)
		}
	}
	return nil
}

// DeviceID is the id of the device with Ed25519 public key pk.
func DeviceID(pk []byte) string { return hex.EncodeToString(pk) }

// Subjects (NATS form). Callers validate ids first; these only format.
func DevUpSubject(id string) string   { return "pps.dev." + id + ".up" }
func DevDownSubject(id string) string { return "pps.dev." + id + ".down" }
func PubSubject(pubid string) string  { return "pps.pub." + pubid }
func OutSubject(fnid string) string   { return "pps.fn." + fnid + ".out" }

// Topic is the MQTT topic of a subject (spec §5.3: '.' ↔ '/'). Subjects of this contract
// contain no '/', so the mapping is one to one.
func Topic(subject string) string { return strings.ReplaceAll(subject, ".", "/") }

// Subject is the NATS subject of an MQTT topic of the reserved namespace. A topic whose
// levels contain '.' (which NATS would escape to "//"), a wildcard or an empty level is
// refused rather than escaped: no device id or fnid contains one (spec §10 #15).
func Subject(topic string) (string, error) {
	levels := strings.Split(topic, "/")
	if len(levels) < 2 || levels[0] != Namespace {
		return "", fmt.Errorf("topic %.80q is not under %s/: %w", topic, Namespace, ErrMalformed)
	}
	for _, l := range levels {
		if l == "" || strings.ContainsAny(l, ".+#* \t\r\n") {
			return "", fmt.Errorf("topic %.80q: level %.80q is empty or holds '.', a wildcard or a space: %w", topic, l, ErrMalformed)
		}
	}
	return strings.Join(levels, "."), nil
}

// ParsePubSubject returns the pubid of a pps.pub.<pubid> subject.
func ParsePubSubject(subject string) (string, error) {
	id, ok := strings.CutPrefix(subject, "pps.pub.")
	if !ok {
		return "", fmt.Errorf("subject %.80q is not pps.pub.<id>: %w", subject, ErrMalformed)
	}
	return id, ValidDeviceID(id)
}

// ParseDevUpSubject returns the device id of a pps.dev.<id>.up subject.
func ParseDevUpSubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, "pps.dev.")
	if ok {
		rest, ok = strings.CutSuffix(rest, ".up")
	}
	if !ok {
		return "", fmt.Errorf("subject %.80q is not pps.dev.<id>.up: %w", subject, ErrMalformed)
	}
	return rest, ValidDeviceID(rest)
}

// DevicePermissions are the NATS publish and subscribe permissions of device id (spec §5.3,
// §10 #10): it may publish only to its own setup inbox and publishing subject, and subscribe
// only to its own setup replies and to the outputs of the functions it subscribes to. The
// $MQTT.> subjects are NATS's MQTT session machinery, which every MQTT client needs.
func DevicePermissions(id string, fns []string) (publish, subscribe []string) {
	publish = []string{DevUpSubject(id), PubSubject(id), "$MQTT.>"}
	subscribe = []string{DevDownSubject(id), "$MQTT.>"}
	for _, fn := range fns {
		subscribe = append(subscribe, OutSubject(fn))
	}
	return publish, subscribe
}

// MaxDeviceMessage bounds every device message this contract decodes: a publish of
// MaxPublishValues values is the largest.
const MaxDeviceMessage = 64 << 10

// MaxPublishValues bounds the values of one publish message (labels are 32 × 16 B per value).
const MaxPublishValues = 64
