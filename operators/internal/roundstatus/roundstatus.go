// Package roundstatus is the operator's read side of the Mohito services: the figures the
// coordinator writes to JetStream KV after every round, the backlog of the decryption workers'
// consumer, and the vendor registry the operator writes for the services. The names and JSON
// here are the contract of docs/services.md; the operator keeps its own copy rather than
// importing service internals, and an e2e test checks both sides agree.
package roundstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the services contract.
const (
	BucketStatus           = "mohito_status"
	BucketVendors          = "mohito_vendors"
	StreamIntegratorIn     = "I_IN"
	ConsumerDecryptWorkers = "decrypt-workers"
)

// SeriesKey, VendorKey and ShufflerKey are the keys of BucketStatus.
func SeriesKey(series string) string { return "series." + series }
func VendorKey(index int32) string   { return "vendor." + strconv.Itoa(int(index)) }
func ShufflerKey(index int32) string { return "shuffler." + strconv.Itoa(int(index)) }

// Series is what the coordinator reports about a round series.
type Series struct {
	CurrentRound      uint64  `json:"currentRound"`
	CompletedRounds   int64   `json:"completedRounds"`
	AbortedRounds     int64   `json:"abortedRounds"`
	LastRoundSeconds  float64 `json:"lastRoundSeconds"`
	CommandsPerSecond int64   `json:"commandsPerSecond"`
	FakeRatio         float64 `json:"fakeRatio"`
	Bursts            int64   `json:"bursts"`
	Updated           string  `json:"updated"`
}

// Vendor is what the coordinator reports about a vendor.
type Vendor struct {
	RoundsServed  int64  `json:"roundsServed"`
	ShufflerDuty  int64  `json:"shufflerDuty"`
	ActiveDevices *int64 `json:"activeDevices,omitempty"`
}

// Shuffler is what the coordinator reports about a vendor's shuffler service.
type Shuffler struct {
	RoundsShuffled int64  `json:"roundsShuffled"`
	LastRound      uint64 `json:"lastRound"`
	LastResult     string `json:"lastResult"`
}

// Registration is a vendor's entry in the registry the operator maintains (BucketVendors,
// key = index).
type Registration struct {
	Index                 int32  `json:"index"`
	Name                  string `json:"name"`
	Namespace             string `json:"namespace"`
	Devices               int64  `json:"devices"`
	Base                  int32  `json:"base"`
	Jitter                int32  `json:"jitter"`
	PaddedEntries         int32  `json:"paddedEntries"`
	ResponsePaddedEntries int32  `json:"responsePaddedEntries"`
}

// Config says how the operator reaches NATS (as a user of the integrator's account).
type Config struct {
	URL          string
	User         string
	PasswordFile string
}

// Client reads the services' figures and writes the vendor registry.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// Connect opens the operator's NATS connection. It reconnects forever: NATS may start after
// the operator, and losing it must only delay status, never stop reconciling.
func Connect(cfg Config) (*Client, error) {
	opts := []nats.Option{nats.Name("obscura-operator"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort()}
	if cfg.User != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("read NATS password file: %w", err)
		}
		opts = append(opts, nats.UserInfo(cfg.User, strings.TrimSpace(string(pw))))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", cfg.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream on %s: %w", cfg.URL, err)
	}
	return &Client{nc: nc, js: js}, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// ErrNotReported means the services have not written the figure yet.
var ErrNotReported = errors.New("not reported yet")

func (c *Client) get(ctx context.Context, key string, into any) error {
	kv, err := c.js.KeyValue(ctx, BucketStatus)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return ErrNotReported
	}
	if err != nil {
		return fmt.Errorf("open KV %s: %w", BucketStatus, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrNotReported
	}
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", BucketStatus, key, err)
	}
	if err := json.Unmarshal(e.Value(), into); err != nil {
		return fmt.Errorf("decode %s/%s: %w", BucketStatus, key, err)
	}
	return nil
}

// Series reads a series' figures.
func (c *Client) Series(ctx context.Context, name string) (Series, error) {
	var s Series
	return s, c.get(ctx, SeriesKey(name), &s)
}

// Vendor reads a vendor's figures.
func (c *Client) Vendor(ctx context.Context, index int32) (Vendor, error) {
	var v Vendor
	return v, c.get(ctx, VendorKey(index), &v)
}

// Shuffler reads the figures of a vendor's shuffler service.
func (c *Client) Shuffler(ctx context.Context, index int32) (Shuffler, error) {
	var s Shuffler
	return s, c.get(ctx, ShufflerKey(index), &s)
}

// WorkerLag is the decryption workers' backlog: messages not yet delivered plus delivered but
// not yet acknowledged.
func (c *Client) WorkerLag(ctx context.Context) (int64, error) {
	cons, err := c.js.Consumer(ctx, StreamIntegratorIn, ConsumerDecryptWorkers)
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, ErrNotReported
	}
	if err != nil {
		return 0, fmt.Errorf("consumer %s/%s: %w", StreamIntegratorIn, ConsumerDecryptWorkers, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer %s/%s info: %w", StreamIntegratorIn, ConsumerDecryptWorkers, err)
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

// Register writes a vendor's registration, creating the registry bucket when needed. It
// writes only when the entry changed, so reconciles do not churn the bucket's history.
func (c *Client) Register(ctx context.Context, r Registration) error {
	kv, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketVendors, History: 5,
		Description: "Mohito vendor registry, written by the Obscura operator"})
	if err != nil {
		return fmt.Errorf("open KV %s: %w", BucketVendors, err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := strconv.Itoa(int(r.Index))
	if e, err := kv.Get(ctx, key); err == nil && string(e.Value()) == string(data) {
		return nil
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("register vendor %s (index %d): %w", r.Name, r.Index, err)
	}
	return nil
}

// Deregister removes a vendor's registration.
func (c *Client) Deregister(ctx context.Context, index int32) error {
	kv, err := c.js.KeyValue(ctx, BucketVendors)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open KV %s: %w", BucketVendors, err)
	}
	if err := kv.Delete(ctx, strconv.Itoa(int(index))); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deregister vendor index %d: %w", index, err)
	}
	return nil
}

// Updated parses a report's time, zero if absent.
func (s Series) UpdatedTime() time.Time {
	t, _ := time.Parse(time.RFC3339, s.Updated)
	return t
}
