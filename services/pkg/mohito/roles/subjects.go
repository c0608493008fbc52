package roles

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Streams, buckets and message kinds (spec §10 subjects, adapted to one
// inbox per party so account exports stay two wildcards per vendor).
const (
	StreamIntegratorIn = "I_IN"                 // mohito.i.in.>   (vendors → integrator)
	StreamWork         = "I_WORK"               // mohito.r.>      (integrator-internal)
	StreamVendorIn     = "V_IN"                 // mohito.v{v}.in.> (integrator → vendor v)
	BucketRounds       = "MOHITO_ROUNDS"        // round id counter (CAS)
	BucketRoundInfo    = "MOHITO_ROUNDINFO"     // M0 for clients
	BucketLeader       = "MOHITO_LEADER"        // coordinator lease
	BucketVendorLeases = "MOHITO_VENDOR_LEASES" // agent and shuffler leases (vendor account)
	BucketOKVS         = "MOHITO_OKVS"          // durable copy of command tables

	kindInfo      = "info"
	kindForward   = "fwd"
	kindClose     = "close"
	kindReply     = "reply"
	kindFinish    = "finish"
	kindRespLayer = "resp"
	kindTable     = "okvs"
	kindAbort     = "abort"

	kindChallenge = "challenge"
	kindVerdict   = "verdict"
	kindSummary   = "summary"
	kindShuffled  = "shuf"
	kindRespTable = "rtab"
	kindRespOut   = "rout"
)

// BucketOKVSClaims records which encoder encodes a command table (spec
// §4.5 stage C), so overlapping partitions never encode one twice.
const BucketOKVSClaims = "MOHITO_OKVS_CLAIMS"

// EncoderConsumer names the durable consumer of encoder partition p of a
// deployment with partitions encoders (its response-table consumer adds
// "-resp"). The partition count is part of the name because it fixes the
// consumer's filter: a rescaled encoder gets a fresh consumer that reads its
// vendors' records from the start of the stream, instead of widening an old
// one past records it never delivered.
func EncoderConsumer(p, partitions int) string {
	return fmt.Sprintf("encoder-%d-of-%d", p, partitions)
}

func toVendor(v int, t uint64, kind string) string {
	return fmt.Sprintf("%s.r.%d.%s", natsx.VendorInbox(v), t, kind)
}

func toIntegrator(v int, t uint64, kind string) string {
	return fmt.Sprintf("%s.r.%d.%s", natsx.IntegratorInbox(v), t, kind)
}

func workPart(t uint64, v int) string  { return fmt.Sprintf("mohito.r.%d.part.%d", t, v) }
func workPlan(t uint64) string         { return fmt.Sprintf("mohito.r.%d.plan", t) }
func workLayer(t uint64, v int) string { return fmt.Sprintf("mohito.r.%d.rl.%d", t, v) }

// DeviceCommandSubject / DeviceResponseSubject are a device's two subjects
// (MQTT topics mohito/dev/{id}/cmd and mohito/dev/{id}/resp).
func DeviceCommandSubject(id string) string  { return "mohito.dev." + id + ".cmd" }
func DeviceResponseSubject(id string) string { return "mohito.dev." + id + ".resp" }

// parsed is a subject's round, sending vendor and kind.
type parsed struct {
	T      uint64
	Vendor int
	Kind   string
}

// parseInbox parses mohito.i.in.v{v}.r.{t}.{kind} or mohito.v{v}.in.r.{t}.{kind}
// or mohito.r.{t}.{kind}[.{v}].
func parseSubject(s string) (parsed, error) {
	tok := strings.Split(s, ".")
	var p parsed
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
