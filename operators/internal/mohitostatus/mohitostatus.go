// Package mohitostatus is the operator's read side of the Mohito services: the figures the
// coordinator writes to JetStream KV after every round, the backlog of the decryption workers'
// consumer, and the vendor registry the operator writes for the services. Names and JSON
// shapes are the services' own, from the Mohito contract (services/pkg/mohito/contract).
package mohitostatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

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
	kv, err := c.js.KeyValue(ctx, contract.BucketStatus)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return ErrNotReported
	}
	if err != nil {
		return fmt.Errorf("open KV %s: %w", contract.BucketStatus, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrNotReported
	}
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", contract.BucketStatus, key, err)
	}
	if err := json.Unmarshal(e.Value(), into); err != nil {
		return fmt.Errorf("decode %s/%s: %w", contract.BucketStatus, key, err)
	}
	return nil
}

// Series reads a series' figures.
func (c *Client) Series(ctx context.Context, name string) (contract.SeriesStatus, error) {
	var s contract.SeriesStatus
	return s, c.get(ctx, contract.StatusSeriesKey(name), &s)
}

// Vendor reads a vendor's figures.
func (c *Client) Vendor(ctx context.Context, index int32) (contract.VendorStatus, error) {
	var v contract.VendorStatus
	return v, c.get(ctx, contract.StatusVendorKey(int(index)), &v)
}

// Shuffler reads the figures of a vendor's shuffler service.
func (c *Client) Shuffler(ctx context.Context, index int32) (contract.ShufflerStatus, error) {
	var s contract.ShufflerStatus
	return s, c.get(ctx, contract.StatusShufflerKey(int(index)), &s)
}

// WorkerLag is the decryption workers' backlog: messages not yet delivered plus delivered but
// not yet acknowledged.
func (c *Client) WorkerLag(ctx context.Context) (int64, error) {
	cons, err := c.js.Consumer(ctx, contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers)
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, ErrNotReported
	}
	if err != nil {
		return 0, fmt.Errorf("consumer %s/%s: %w", contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer %s/%s info: %w", contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers, err)
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

// EncoderLag is the encoders' backlog: the work records not yet delivered to the consumers of
// the deployment's partitions partitions (records delivered and held until a round's parts are
// all in are the encoders' normal state, not a backlog). ErrNotReported when no partition's
// consumer exists yet.
func (c *Client) EncoderLag(ctx context.Context, partitions int) (int64, error) {
	names := make([]string, partitions)
	for p := range names {
		names[p] = contract.EncoderConsumer(p, partitions)
	}
	n, err := natsx.Backlog(ctx, c.js, contract.StreamWork, names...)
	if errors.Is(err, natsx.ErrNoConsumer) {
		return 0, ErrNotReported
	}
	return n, err
}

// Register writes a vendor's registration, creating the registry bucket when needed. It
// writes only when the entry changed, so reconciles do not churn the bucket's history.
func (c *Client) Register(ctx context.Context, r contract.Registration) error {
	kv, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contract.BucketVendors, History: 5,
		Description: "Mohito vendor registry, written by the Obscura operator"})
	if err != nil {
		return fmt.Errorf("open KV %s: %w", contract.BucketVendors, err)
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
	kv, err := c.js.KeyValue(ctx, contract.BucketVendors)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open KV %s: %w", contract.BucketVendors, err)
	}
	if err := kv.Delete(ctx, strconv.Itoa(int(index))); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deregister vendor index %d: %w", index, err)
	}
	return nil
}
