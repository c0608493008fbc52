package mohito

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

// deviceBench is one device and what its vendor and user would send it: M6
// built directly from a command, and the device's answer opened as the user
// would open it after both response layers are removed.
type deviceBench struct {
	t    *testing.T
	p    Params
	keys DeviceKeys
	dev  *Device
}

func newDeviceBench(t *testing.T) *deviceBench {
	p := Params{Vendors: 2, Q: 2, CommandSize: 96, ResponseSize: 48, Suite: SuiteX25519}
	s, err := NewDeviceSecret(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &deviceBench{t: t, p: p, keys: s.Keys(), dev: NewDevice(&s, p, 5*time.Minute)}
}

// deliver builds M6 for round t with cmd in slot 1 (slot 2 empty) and returns
// what the device made of slot 1.
func (b *deviceBench) deliver(rt uint64, cmd *Command, now time.Time) DeviceSlot {
	b.t.Helper()
	p := b.p
	vs := p.DeviceCiphertextSize()
	m6 := make([]byte, p.DeliverySize())
	putHeader(m6, KindDelivery, rt)
	if _, err := rand.Read(m6[headerSize+4:]); err != nil {
		b.t.Fatal(err)
	}
	z := DeriveEphemeralID(&b.keys.PRF, 1, rt)
	pt, err := cmd.marshal(p.CommandSize)
	if err != nil {
		b.t.Fatal(err)
	}
	ct, err := sealDevice(&b.keys.AE, aadCommand, &z, pt, rand.Reader)
	if err != nil {
		b.t.Fatal(err)
	}
	copy(m6[headerSize+4:headerSize+4+vs], ct)
	got, slots, err := b.dev.ReceiveCommands(m6, now)
	if err != nil || got != rt || len(slots) != p.Q {
		b.t.Fatalf("receive round %d: %d, %d slots, %v", rt, got, len(slots), err)
	}
	if !errors.Is(slots[1].Err, ErrNoCommand) {
		b.t.Fatalf("empty slot: %v", slots[1].Err)
	}
	return slots[0]
}

// respond answers slot 1 with payload and returns the response plaintext the
// user reads, after stripping the two response layers of cmd's keys.
func (b *deviceBench) respond(rt uint64, s DeviceSlot, cmd *Command, payload []byte) (id [16]byte, resp []byte) {
	b.t.Helper()
	p := b.p
	m7, err := b.dev.Respond(rt, []DeviceSlot{s, {J: 2, Z: DeriveEphemeralID(&b.keys.PRF, 2, rt), Err: ErrNoCommand}}, [][]byte{payload, nil}, rand.Reader)
	if err != nil {
		b.t.Fatal(err)
	}
	val := bytes.Clone(m7[headerSize+EphemeralIDSize : headerSize+EphemeralIDSize+p.ResponseValueSize()])
	xorRespLayer(val, &cmd.ShufflerRespKey, &nonceRespShuffler)
	xorRespLayer(val, &cmd.IntegratorRespKey, &nonceRespIntegrator)
	pt, err := openDevice(&b.keys.AE, aadResponse, &s.Z, val)
	if err != nil {
		b.t.Fatalf("open response: %v", err)
	}
	id, resp, err = parseResponse(pt)
	if err != nil {
		b.t.Fatal(err)
	}
	return id, resp
}

// command is cmd with fresh response keys, as IssueCommandID builds it for
// every attempt.
func (b *deviceBench) command(id [16]byte, issued time.Time, payload string) *Command {
	c := &Command{ID: id, Timestamp: issued, Payload: []byte(payload)}
	if err := readAll(rand.Reader, c.IntegratorRespKey[:], c.ShufflerRespKey[:]); err != nil {
		b.t.Fatal(err)
	}
	return c
}

// TestDeviceRetryExactlyOnce is the device half of exactly-once under round
// aborts: a user re-sends a command whose round was aborted after the device
// executed it, with the same id and issue time (IssueCommandID). The device
// does not execute it again (Repeat) and answers with the response it gave
// the first time, under the retry's fresh response keys. A reused id with
// another issue time, an id the device never answered, and a timestamp
// outside the window are still rejected (spec O14).
func TestDeviceRetryExactlyOnce(t *testing.T) {
	b := newDeviceBench(t)
	now := time.Unix(1_800_000_000, 0)
	id, _ := NewCommandID(rand.Reader)

	first := b.command(id, now, "unlock")
	s := b.deliver(10, first, now)
	if s.Command == nil || s.Repeat || string(s.Command.Payload) != "unlock" {
		t.Fatalf("first delivery: %+v", s)
	}
	if gotID, resp := b.respond(10, s, first, []byte("unlocked at 10")); gotID != id || string(resp) != "unlocked at 10" {
		t.Fatalf("first response %x %q", gotID, resp)
	}

	// Round 10 was aborted; the user retries in round 12.
	retry := b.command(id, now, "unlock")
	s = b.deliver(12, retry, now.Add(3*time.Second))
	if s.Command == nil || !s.Repeat {
		t.Fatalf("retry: %+v, want a repeat", s)
	}
	if gotID, resp := b.respond(12, s, retry, []byte("unlocked at 12")); gotID != id || string(resp) != "unlocked at 10" {
		t.Fatalf("retry answered %x %q, want the first response", gotID, resp)
	}

	// The same id with another issue time is a different command reusing an
	// id: a replay, never executed.
	if s := b.deliver(13, b.command(id, now.Add(time.Second), "unlock"), now.Add(4*time.Second)); s.Command != nil || !errors.Is(s.Err, ErrReplay) {
		t.Fatalf("reused id, other issue time: %+v", s)
	}

	// A command the device received but never answered (it crashed before
	// Respond) is not executed on a retry either: at most once.
	id2, _ := NewCommandID(rand.Reader)
	if s := b.deliver(14, b.command(id2, now, "open"), now.Add(5*time.Second)); s.Command == nil || s.Repeat {
		t.Fatalf("second command: %+v", s)
	}
	if s := b.deliver(15, b.command(id2, now, "open"), now.Add(6*time.Second)); s.Command != nil || !errors.Is(s.Err, ErrReplay) {
		t.Fatalf("retry of an unanswered command: %+v", s)
	}

	// Past the window the retry is stale: rejected, not executed, whether or
	// not the id is still remembered.
	if s := b.deliver(16, b.command(id, now, "unlock"), now.Add(6*time.Minute)); s.Command != nil || !errors.Is(s.Err, ErrReplay) {
		t.Fatalf("stale retry: %+v", s)
	}
	if s := b.deliver(17, b.command(id, now, "unlock"), now.Add(11*time.Minute)); s.Command != nil || !errors.Is(s.Err, ErrReplay) {
		t.Fatalf("stale retry after pruning: %+v", s)
	}
	if len(b.dev.seen) != 0 {
		t.Fatalf("%d ids remembered past twice the window", len(b.dev.seen))
	}
}

// TestDeviceRetryLate is TestDeviceRetryExactlyOnce for a command answered
// through the asynchronous path (App. A): the late answer is what a retry
// gets back.
func TestDeviceRetryLate(t *testing.T) {
	b := newDeviceBench(t)
	now := time.Unix(1_800_000_000, 0)
	id, _ := NewCommandID(rand.Reader)
	s := b.deliver(20, b.command(id, now, "scan"), now)
	late := s.Defer()
	w := AsyncWindow(2)
	if _, dropped, err := b.dev.RespondLate(21, w, []LateAnswer{{T: 20, Slot: late, Payload: []byte("scanned late")}}, rand.Reader); err != nil || dropped != 0 {
		t.Fatalf("late answer: %d dropped, %v", dropped, err)
	}
	retry := b.command(id, now, "scan")
	s = b.deliver(23, retry, now.Add(time.Second))
	if !s.Repeat {
		t.Fatalf("retry after a late answer: %+v", s)
	}
	if _, resp := b.respond(23, s, retry, []byte("again")); string(resp) != "scanned late" {
		t.Fatalf("retry answered %q", resp)
	}
}
