package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// ErrWindowClosed is returned when the proxy no longer accepts the window (T-MAL-10).
var ErrWindowClosed = errors.New("pda: window closed")

// Client is the participant client (spec A5): it opens a session with the proxy over mTLS,
// builds its items locally (the proxy learns nothing but ciphertexts and proofs) and sends
// them in batches, retrying transient failures (replays of an already stored batch come
// back as REPLAY, which counts as accepted on a retry).
type Client struct {
	BaseURL string
	HTTP    *http.Client
	Batch   int // items per request (≤ the proxy's max batch)
	Window  *uint64
}

// NewClient returns a client with the given TLS configuration (its client certificate is
// the participant's identity).
func NewClient(baseURL string, tlsCfg *tls.Config) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Batch: 500,
		HTTP: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsCfg}}}
}

// Report summarises a submission.
type Report struct {
	Window   uint64
	Accepted int
	Rejected map[string]int
}

// Progress is called after each batch with items done and total.
type Progress func(done, total int)

// Session opens a session and returns its id and the window's suite.
func (c *Client) Session(ctx context.Context) (pda.SessionID, *pda.Suite, uint64, error) {
	var sid pda.SessionID
	u := c.BaseURL + contract.PathSession
	if c.Window != nil {
		u += "?window=" + strconv.FormatUint(*c.Window, 10)
	}
	var sr contract.SessionResponse
	code, err := c.post(ctx, u, nil, &sr)
	if err != nil {
		return sid, nil, 0, err
	}
	if code == http.StatusConflict {
		return sid, nil, 0, ErrWindowClosed
	}
	if code != http.StatusOK {
		return sid, nil, 0, fmt.Errorf("open session: HTTP %d", code)
	}
	raw, err := hex.DecodeString(sr.Session)
	if err != nil || len(raw) != pda.SessionIDSize {
		return sid, nil, 0, errors.New("open session: bad session id")
	}
	copy(sid[:], raw)
	ppb, err := base64.StdEncoding.DecodeString(sr.Params)
	if err != nil {
		return sid, nil, 0, fmt.Errorf("open session: params: %w", err)
	}
	var pp pda.PublicParams
	if err := pp.UnmarshalBinary(ppb); err != nil {
		return sid, nil, 0, fmt.Errorf("open session: params: %w", err)
	}
	suite, err := pda.NewSuite(pp)
	return sid, suite, sr.Window, err
}

func (c *Client) post(ctx context.Context, u string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<22))
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode response: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// Submit sends the observations (deduplicated locally) in one session.
func (c *Client) Submit(ctx context.Context, obs []pda.Observation, progress Progress) (*Report, error) {
	sid, suite, w, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}
	items, err := pda.NewParticipant(suite, nil).Submit(sid, 0, obs)
	if err != nil {
		return nil, err
	}
	return c.SendItems(ctx, sid, w, items, progress)
}

// SendItems sends prepared items of session sid (tests use it to send crafted items).
func (c *Client) SendItems(ctx context.Context, sid pda.SessionID, w uint64, items [][]byte, progress Progress) (*Report, error) {
	rep := &Report{Window: w, Rejected: map[string]int{}}
	u := c.BaseURL + contract.PathSubmit + "?" + url.Values{"session": {hex.EncodeToString(sid[:])}}.Encode()
	batch := max(c.Batch, 1)
	for lo := 0; lo < len(items); lo += batch {
		hi := min(lo+batch, len(items))
		body := bytes.Join(items[lo:hi], nil)
		var sr contract.SubmitResponse
		wait := 100 * time.Millisecond
		for attempt := 0; ; attempt++ {
			code, err := c.post(ctx, u, body, &sr)
			if err == nil && code == http.StatusOK {
				break
			}
			if err == nil && code == http.StatusConflict {
				return rep, ErrWindowClosed
			}
			if err == nil && code != http.StatusServiceUnavailable && code < 500 {
				return rep, fmt.Errorf("submit: HTTP %d", code)
			}
			if attempt >= 8 || ctx.Err() != nil {
				return rep, fmt.Errorf("submit: giving up after %d attempts (HTTP %d): %v", attempt+1, code, err)
			}
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			sr = contract.SubmitResponse{}
		}
		rep.Accepted += sr.Accepted
		for _, r := range sr.Rejected {
			rep.Rejected[r.Reason]++
		}
		if progress != nil {
			progress(hi, len(items))
		}
	}
	return rep, nil
}

// ReadObservations parses a CSV of key[,value] lines. keyType is ip, domain, url, string or
// hex (opaque bytes). Blank lines and lines starting with # are skipped.
func ReadObservations(r io.Reader, keyType string) ([]pda.Observation, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	var out []pda.Observation
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		if len(rec) == 0 || (len(rec) == 1 && strings.TrimSpace(rec[0]) == "") {
			continue
		}
		k, err := ParseKey(keyType, strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		o := pda.Observation{Key: k, Value: 1}
		if len(rec) > 1 && strings.TrimSpace(rec[1]) != "" {
			v, err := strconv.ParseUint(strings.TrimSpace(rec[1]), 10, 16)
			if err != nil {
				return nil, fmt.Errorf("csv line %d: value: %w", line, err)
			}
			o.Value = uint16(v)
		}
		out = append(out, o)
	}
}

// ParseKey canonicalises one key of the given type (U6).
func ParseKey(keyType, s string) (pda.Key, error) {
	switch keyType {
	case "ip":
		return pda.ParseIPKey(s)
	case "domain":
		return pda.DomainKey(s)
	case "url":
		return pda.URLKey(s)
	case "string":
		return pda.StringKey(s)
	case "hex":
		b, err := hex.DecodeString(s)
		if err != nil {
			return pda.Key{}, err
		}
		return pda.OpaqueKey(b)
	}
	return pda.Key{}, fmt.Errorf("unknown key type %q", keyType)
}
