package contract

import (
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
