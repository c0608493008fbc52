package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// Streams, buckets and consumers (spec §10 subjects, adapted to one inbox per party so
// account exports stay two wildcards per vendor).
const (
	StreamIntegratorIn = "I_IN"                 // mohito.i.in.*.r.> (vendors → integrator; memory)
	StreamWork         = "I_WORK"               // mohito.r.>      (integrator-internal)
	StreamVendorIn     = "V_IN"                 // mohito.v{v}.in.r.> (integrator → vendor v; memory)
	BucketRounds       = "MOHITO_ROUNDS"        // round id counter (CAS)
	BucketRoundInfo    = "MOHITO_ROUNDINFO"     // M0 for clients
	BucketLeader       = "MOHITO_LEADER"        // coordinator lease
	BucketVendorLeases = "MOHITO_VENDOR_LEASES" // agent and shuffler leases (vendor account)
	BucketOKVS         = "MOHITO_OKVS"          // durable copy of command tables
	// BucketOKVSClaims records which encoder encodes a command table (spec §4.5 stage C),
	// so overlapping partitions never encode one twice.
	BucketOKVSClaims = "MOHITO_OKVS_CLAIMS"
	// BucketEncoderLeases holds one lease per encoder partition: the replicas of a partition
	// share its durable consumers, so only the lease holder consumes (a round's records split
	// between two replicas would leave each without a whole table until the ack wait).
	BucketEncoderLeases = "MOHITO_ENCODER_LEASES"

	// ConsumerDecryptWorkers is the decrypt workers' durable pull consumer on
	// StreamIntegratorIn; the operator scales on its NumPending/NumAckPending.
	ConsumerDecryptWorkers = "decrypt-workers"
	ConsumerResponder      = "responder" // StreamWork: plans and response layers
	ConsumerRouter         = "router"    // StreamIntegratorIn: vendors' response-table outputs
)

// The key announcements have streams of their own, on file storage (every role reads them at
// start, so they outlive a restart of the NATS servers), apart from the round messages of
// StreamIntegratorIn and StreamVendorIn, which are on memory storage (docs/services.md,
// "Durability per round").
const (
	StreamIntegratorKeys = "I_KEYS" // mohito.i.in.*.key (the vendors' key sets)
	StreamVendorKeys     = "V_KEYS" // mohito.v{v}.in.key (the integrator's key set for v)
)

// Stream subject filters.
const (
	// IntegratorInSubjects is the whole inbox: the subjects of a StreamIntegratorIn created by
	// a release before StreamIntegratorKeys, which holds the key announcements too.
	IntegratorInSubjects = "mohito.i.in.>"
	// IntegratorRoundSubjects is every vendor's round messages to the integrator.
	IntegratorRoundSubjects = "mohito.i.in.*.r.>"
	WorkSubjects            = "mohito.r.>"
	// DeviceResponses is every device's response subject (the vendor agent's subscription).
	DeviceResponses = "mohito.dev.*.resp"
)

// Kinds: the last token of a round subject names the message it carries.
const (
	KindInfo      = "info"
	KindForward   = "fwd"
	KindClose     = "close"
	KindReply     = "reply"
	KindFinish    = "finish"
	KindRespLayer = "resp"
	KindTable     = "okvs"
	KindAbort     = "abort"

	KindChallenge = "challenge"
	KindVerdict   = "verdict"
	KindSummary   = "summary"
	KindShuffled  = "shuf"
	KindRespTable = "rtab"
	KindRespOut   = "rout"

	// Integrator-internal work subjects (StreamWork).
	KindPlan       = "plan" // mohito.r.{t}.plan: the coordinator's round plan
	KindPart       = "part" // mohito.r.{t}.part.{v}: decrypted commands for vendor v's encoder
	KindLayerShare = "rl"   // mohito.r.{t}.rl.{v}: response-layer values for the responder
)

// EncoderConsumer names the durable consumer of encoder partition p of a deployment with
// partitions encoders (its response-table consumer adds "-resp"). The partition count is
// part of the name because it fixes the consumer's filter: a rescaled encoder gets a fresh
// consumer that reads its vendors' records from the start of the stream, instead of
// widening an old one past records it never delivered.
func EncoderConsumer(p, partitions int) string {
	return fmt.Sprintf("encoder-%d-of-%d", p, partitions)
}

// ToVendor is the subject of a round-t message of the given kind to vendor v.
func ToVendor(v int, t uint64, kind string) string {
	return fmt.Sprintf("%s.r.%d.%s", VendorInbox(v), t, kind)
}

// ToIntegrator is the subject of a round-t message of the given kind from vendor v.
func ToIntegrator(v int, t uint64, kind string) string {
	return fmt.Sprintf("%s.r.%d.%s", IntegratorInbox(v), t, kind)
}

// FromVendors filters every vendor's round messages of kind into the integrator's inbox.
func FromVendors(kind string) string { return "mohito.i.in.*.r.*." + kind }

// FromVendorsRound filters every vendor's messages of round t into the integrator's inbox.
func FromVendorsRound(t uint64) string { return fmt.Sprintf("mohito.i.in.*.r.%d.>", t) }

// WorkPart, WorkPlan and WorkLayer are the integrator-internal work subjects of round t.
func WorkPart(t uint64, v int) string  { return fmt.Sprintf("mohito.r.%d.%s.%d", t, KindPart, v) }
func WorkPlan(t uint64) string         { return fmt.Sprintf("mohito.r.%d.%s", t, KindPlan) }
func WorkLayer(t uint64, v int) string { return fmt.Sprintf("mohito.r.%d.%s.%d", t, KindLayerShare, v) }

// WorkRound filters every work subject of round t (its plan, parts and layer shares).
func WorkRound(t uint64) string { return fmt.Sprintf("mohito.r.%d.>", t) }

// WorkPlans, WorkParts(v) and WorkLayers filter every round's work subjects of a kind.
const (
	WorkPlans  = "mohito.r.*." + KindPlan
	WorkLayers = "mohito.r.*." + KindLayerShare + ".*"
)

// WorkParts filters vendor v's decrypted-command parts of every round.
func WorkParts(v int) string { return fmt.Sprintf("mohito.r.*.%s.%d", KindPart, v) }

// VendorKeySubject carries vendor v's key set into the integrator's StreamIntegratorIn;
// IntegratorKeySubject carries the integrator's key set into vendor v's inbox.
func VendorKeySubject(v int) string     { return IntegratorInbox(v) + ".key" }
func IntegratorKeySubject(v int) string { return VendorInbox(v) + ".key" }

// VendorRoundSubjects is the integrator's round messages to vendor v (StreamVendorIn).
func VendorRoundSubjects(v int) string { return VendorInbox(v) + ".r.>" }

// VendorKeySubjects filters every vendor's key announcements.
const VendorKeySubjects = "mohito.i.in.*.key"

// VendorOfKeySubject is the vendor index of a VendorKeySubject.
func VendorOfKeySubject(s string) (int, error) {
	var v int
	if _, err := fmt.Sscanf(s, "mohito.i.in.v%d.key", &v); err != nil || v < 0 || VendorKeySubject(v) != s {
		return 0, fmt.Errorf("not a vendor key subject: %q", s)
	}
	return v, nil
}

// Subject is a parsed round subject: its round, sending (or addressed) vendor and kind.
type Subject struct {
	T      uint64
	Vendor int // -1 for a work subject without a vendor
	Kind   string
}

// ParseSubject parses mohito.i.in.v{v}.r.{t}.{kind}, mohito.v{v}.in.r.{t}.{kind} or
// mohito.r.{t}.{kind}[.{v}].
func ParseSubject(s string) (Subject, error) {
	tok := strings.Split(s, ".")
	var p Subject
	var err error
	switch {
	case len(tok) == 7 && tok[1] == "i" && tok[2] == "in" && tok[4] == "r":
		p.Vendor, err = strconv.Atoi(strings.TrimPrefix(tok[3], "v"))
		if err == nil {
			p.T, err = strconv.ParseUint(tok[5], 10, 64)
		}
		p.Kind = tok[6]
	case len(tok) == 6 && tok[2] == "in" && tok[3] == "r":
		p.Vendor, err = strconv.Atoi(strings.TrimPrefix(tok[1], "v"))
		if err == nil {
			p.T, err = strconv.ParseUint(tok[4], 10, 64)
		}
		p.Kind = tok[5]
	case (len(tok) == 4 || len(tok) == 5) && tok[1] == "r":
		p.T, err = strconv.ParseUint(tok[2], 10, 64)
		p.Kind = tok[3]
		p.Vendor = -1
		if err == nil && len(tok) == 5 {
			p.Vendor, err = strconv.Atoi(tok[4])
		}
	default:
		return p, fmt.Errorf("unexpected subject %q", s)
	}
	if err != nil {
		return p, fmt.Errorf("subject %q: %w", s, err)
	}
	return p, nil
}

// The user API (gRPC, services/proto/obscura/mohito/v1): the metadata key of a user's access
// token and the largest message either side accepts.
const (
	AuthorizationMetadata = "authorization"
	MaxMessageSize        = 1 << 20
	// RoundInfoMetadata carries the current round's M0 (binary metadata, exactly
	// RoundInfoSize bytes) in the trailer of a Submit refused because its round closed, so
	// that the user re-seals for the current round without a RoundInfo call.
	RoundInfoMetadata = "mohito-round-info-bin"
	// RoundAgeMetadata is how long ago, in milliseconds, the gateway's current round opened
	// (six decimal digits, fixed width, at most 999999): with RoundInfoMetadata in a refusal's
	// trailer and in RoundInfo's header, so that a user that learns a round late knows how
	// much of its period is left (a round learned near its end is passed over for the next).
	RoundAgeMetadata = "mohito-round-age-ms"
)
