package roles

import (
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Each party's inbox is two streams (docs/services.md, "Durability per round"): the round
// messages (StreamIntegratorIn, StreamVendorIn) on memory storage, kept inboxTTL — a round's
// messages are re-created from the store of record or the round aborts, so they need not
// outlive the NATS servers — and the key
// announcements (StreamIntegratorKeys, StreamVendorKeys) on file storage, which every role
// reads at start. The subjects do not change, so the account exports do not either.
//
// An inbox stream created by an earlier release holds both on file storage, under the whole
// inbox's subjects. JetStream cannot change a stream's storage in place, so ensureInbox leaves
// such a stream as it is and creates no key stream beside it (their subjects would overlap);
// the key readers find the announcements wherever they are stored (keyStream). It moves to
// the split once an operator deletes the old stream between rounds (the roles re-announce
// their keys at start and every KeyAnnounceInterval).

// inboxTTL is how long an inbox keeps a round message: twice a whole round (period and
// response phase). Every message of round t is published after t opens and consumed before
// its response phase ends — past that the coordinator has aborted it — so older messages
// serve no round; and the memory they hold (every command's M2 and M4, the response tables)
// is shared with I_WORK and the tables in the servers' max_memory_store.
func inboxTTL(d *Deployment) time.Duration { return 2 * (d.Round + d.ResponsePhase()) }

// ensureInbox creates (or updates) an inbox's round stream and, unless an earlier release's
// stream already holds every inbox subject, its key stream.
func ensureInbox(ctx context.Context, js jetstream.JetStream, d *Deployment, stream, roundSubjects, oldSubjects, keyStream, keySubjects string) error {
	s, err := natsx.EnsureMemoryStreamMaxAge(ctx, js, stream, inboxTTL(d), roundSubjects)
	if err != nil {
		return err
	}
	if slices.Contains(s.CachedInfo().Config.Subjects, oldSubjects) {
		return nil
	}
	_, err = natsx.EnsureStream(ctx, js, keyStream, keySubjects)
	return err
}

// ensureIntegratorInbox creates the integrator's inbox streams.
func ensureIntegratorInbox(ctx context.Context, js jetstream.JetStream, d *Deployment) error {
	return ensureInbox(ctx, js, d, contract.StreamIntegratorIn, contract.IntegratorRoundSubjects, contract.IntegratorInSubjects,
		contract.StreamIntegratorKeys, contract.VendorKeySubjects)
}

// keyStream is the stream holding subject: the key stream, or an earlier release's inbox
// stream that holds the announcements too; fallback when the server names none.
func keyStream(ctx context.Context, js jetstream.JetStream, fallback, subject string) string {
	if name, err := js.StreamNameBySubject(ctx, subject); err == nil {
		return name
	}
	return fallback
}
