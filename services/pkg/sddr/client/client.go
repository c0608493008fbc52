// Package client is the device side of the SDDR encounter mailbox (docs/sddr.md, "Encounter
// mailbox"): from one encounter's id and key (sk = H2(L), never sent anywhere) it derives the
// opaque mailbox address the server files messages under and the AEAD key that seals them,
// and it talks to the mailbox's HTTP API.
//
// Derivations (SHA-256, domain-separated from every tag of the core):
//
//	address = SHA-256("SDDR-v1/MAILBOX-ADDR" ‖ encounter id)         32 bytes, the only thing the server sees
//	key     = HMAC-SHA256(sk, "SDDR-v1/MAILBOX-KEY")                  XChaCha20-Poly1305 key
//
// A sealed message is version 1 ‖ 24-byte random nonce ‖ AEAD(plaintext padded to a multiple of
// PadBlock, AD = "SDDR-v1/MAILBOX" ‖ encounter id ‖ sender role). The role (0/1 by the order of
// the two epoch public keys, as in Confirm) is in the AD, not on the wire: a device opens only
// what its peer sealed, so its own messages in the shared mailbox fail to open and are skipped;
// random 192-bit nonces never repeat under one key.
package client

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
)

const (
	// AddressSize is the size of a mailbox address.
	AddressSize = sha256.Size
	// Version is the first byte of every sealed message.
	Version = 1
	// PadBlock: plaintexts are padded (after a 2-byte length) to a multiple of it, so the
	// server sees only a coarse size.
	PadBlock = 64
	// MaxPlaintext bounds one message's plaintext.
	MaxPlaintext = 4096 - 2
	// Overhead is what sealing adds beyond the padded plaintext.
	Overhead = 1 + chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead
	// MaxSealed is the size of the largest sealed message.
	MaxSealed = Overhead + ((MaxPlaintext+2+PadBlock-1)/PadBlock)*PadBlock

	tagAddr = "SDDR-v1/MAILBOX-ADDR"
	tagKey  = "SDDR-v1/MAILBOX-KEY"
	tagAD   = "SDDR-v1/MAILBOX"
)

// Address is an opaque mailbox address.
type Address [AddressSize]byte

// String is the lower-case hex form used in URLs.
func (a Address) String() string { return hex.EncodeToString(a[:]) }

// ParseAddress decodes the 64-character lower-case hex form.
func ParseAddress(s string) (Address, error) {
	var a Address
	if len(s) != 2*AddressSize {
		return a, fmt.Errorf("mailbox address: %d characters, want %d", len(s), 2*AddressSize)
	}
	if strings.ToLower(s) != s {
		return a, errors.New("mailbox address: not lower-case hex")
	}
	if _, err := hex.Decode(a[:], []byte(s)); err != nil {
		return a, fmt.Errorf("mailbox address: %w", err)
	}
	return a, nil
}

// AddressOf is the mailbox address of an encounter.
func AddressOf(id sddr.EncounterID) Address {
	h := sha256.New()
	h.Write([]byte(tagAddr))
	h.Write(id[:])
	var a Address
	h.Sum(a[:0])
	return a
}

// Errors of Open.
var (
	ErrMalformed = errors.New("mailbox: malformed sealed message")
	ErrOpen      = errors.New("mailbox: message does not open (not from the peer of this encounter)")
	ErrTooLarge  = errors.New("mailbox: plaintext too large")
)

// Box is one side's view of one encounter's mailbox.
type Box struct {
	ID      sddr.EncounterID
	Address Address
	Role    byte // this side's role; the peer's is 1 − Role
	key     [chacha20poly1305.KeySize]byte
}

// New derives the mailbox of an encounter from its id, its key sk and this side's role.
func New(id sddr.EncounterID, sk [sddr.KeySize]byte, role byte) (*Box, error) {
	if role > 1 {
		return nil, fmt.Errorf("mailbox: role %d, want 0 or 1", role)
	}
	b := &Box{ID: id, Address: AddressOf(id), Role: role}
	m := hmac.New(sha256.New, sk[:])
	m.Write([]byte(tagKey))
	m.Sum(b.key[:0])
	return b, nil
}

// FromDevice is the mailbox of one of the device's encounters. Use confirmed encounters
// (Device.OnConfirm), or take a message that fails to open as the sign that the two sides
// hold different keys (the epoch-boundary case of spec §3.9).
func FromDevice(d *sddr.Device, id sddr.EncounterID) (*Box, error) {
	info, err := d.Encounter(id)
	if err != nil {
		return nil, err
	}
	c, err := d.ConfirmMessage(id)
	if err != nil {
		return nil, err
	}
	return New(id, info.Key, c.Role)
}

func (b *Box) ad(role byte) []byte {
	ad := make([]byte, 0, len(tagAD)+sddr.EncounterIDSize+1)
	ad = append(ad, tagAD...)
	ad = append(ad, b.ID[:]...)
	return append(ad, role)
}

// Seal encrypts a message to the peer.
func (b *Box) Seal(plaintext []byte) ([]byte, error) {
	if len(plaintext) > MaxPlaintext {
		return nil, ErrTooLarge
	}
	n := ((len(plaintext) + 2 + PadBlock - 1) / PadBlock) * PadBlock
	padded := make([]byte, n)
	binary.BigEndian.PutUint16(padded, uint16(len(plaintext)))
	copy(padded[2:], plaintext)
	aead, err := chacha20poly1305.NewX(b.key[:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+chacha20poly1305.NonceSizeX, Overhead+n)
	out[0] = Version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return aead.Seal(out, out[1:1+chacha20poly1305.NonceSizeX], padded, b.ad(b.Role)), nil
}

// Open decrypts a message the peer sealed.
func (b *Box) Open(sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead+PadBlock || len(sealed) > MaxSealed || sealed[0] != Version ||
		(len(sealed)-Overhead)%PadBlock != 0 {
		return nil, ErrMalformed
	}
	aead, err := chacha20poly1305.NewX(b.key[:])
	if err != nil {
		return nil, err
	}
	nonce := sealed[1 : 1+chacha20poly1305.NonceSizeX]
	padded, err := aead.Open(nil, nonce, sealed[1+chacha20poly1305.NonceSizeX:], b.ad(1-b.Role))
	if err != nil {
		return nil, ErrOpen
	}
	n := int(binary.BigEndian.Uint16(padded))
	if n > len(padded)-2 {
		return nil, ErrMalformed
	}
	return padded[2 : 2+n], nil
}

// Messages is the body of GET /v1/mailboxes/{address}.
type Messages struct {
	// Messages are the sealed messages still held, oldest first (standard base64 in JSON).
	Messages [][]byte `json:"messages"`
}

// MaxMessagesBody bounds a GET response a client reads.
const MaxMessagesBody = 4 << 20

// DecodeMessages parses a GET response body.
func DecodeMessages(body []byte) (*Messages, error) {
	if len(body) > MaxMessagesBody {
		return nil, errors.New("mailbox: response too large")
	}
	var m Messages
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("mailbox: response: %w", err)
	}
	for _, s := range m.Messages {
		if len(s) > MaxSealed {
			return nil, errors.New("mailbox: response holds an oversized message")
		}
	}
	return &m, nil
}

// Client is an HTTP client of the mailbox API.
type Client struct {
	// BaseURL is the mailbox (or the edge in front of it), e.g. https://edge:8443.
	BaseURL string
	// Token is the client's bearer token: what the mailbox (and the edge) rate-limit by. It
	// should be random and rotated with the device's epochs, so that it links no more than
	// the encounters fetched with it.
	Token string
	HTTP  *http.Client
}

// StatusError is a non-2xx answer; Reason is the mailbox's rejection reason.
type StatusError struct {
	Code   int
	Reason string
}

func (e *StatusError) Error() string { return fmt.Sprintf("mailbox: HTTP %d: %s", e.Code, e.Reason) }

func (c *Client) do(req *http.Request) ([]byte, error) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	h := c.HTTP
	if h == nil {
		h = http.DefaultClient
	}
	resp, err := h.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxMessagesBody+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Code: resp.StatusCode, Reason: strings.TrimSpace(string(body))}
	}
	return body, nil
}

func (c *Client) url(a Address) string {
	return strings.TrimRight(c.BaseURL, "/") + "/v1/mailboxes/" + a.String()
}

// Put leaves one sealed message in a mailbox.
func (c *Client) Put(ctx context.Context, a Address, sealed []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(a), bytes.NewReader(sealed))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	_, err = c.do(req)
	return err
}

// Fetch returns the sealed messages of a mailbox (both sides'; Box.Open keeps the peer's).
func (c *Client) Fetch(ctx context.Context, a Address) ([][]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(a), nil)
	if err != nil {
		return nil, err
	}
	body, err := c.do(req)
	if err != nil {
		return nil, err
	}
	m, err := DecodeMessages(body)
	if err != nil {
		return nil, err
	}
	return m.Messages, nil
}

// Send seals a plaintext and leaves it in the box's mailbox.
func (c *Client) Send(ctx context.Context, b *Box, plaintext []byte) error {
	s, err := b.Seal(plaintext)
	if err != nil {
		return err
	}
	return c.Put(ctx, b.Address, s)
}

// Receive fetches the box's mailbox and returns the peer's messages that open, oldest first.
func (c *Client) Receive(ctx context.Context, b *Box) ([][]byte, error) {
	all, err := c.Fetch(ctx, b.Address)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, s := range all {
		if p, err := b.Open(s); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// KeyOf returns a box's AEAD key, for tests that check it never reaches the server.
func KeyOf(b *Box) [chacha20poly1305.KeySize]byte { return b.key }
