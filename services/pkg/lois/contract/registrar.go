package contract

import "fmt"

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

// SubjectSessions is the stream's subject filter.
func SubjectSessions() string { return "lois.*.session.>" }

// SubjectAck is where replica name acknowledges that it installed a session's epoch.
func SubjectAck(cloud, session string, epoch uint32, replica string) string {
	return fmt.Sprintf("lois.%s.ack.%s.%d.%s", cloud, session, epoch, replica)
}

// SubjectAcks matches every replica's ack of one session epoch.
func SubjectAcks(cloud, session string, epoch uint32) string {
	return fmt.Sprintf("lois.%s.ack.%s.%d.*", cloud, session, epoch)
}
