// Package pdastatus is the operator's side of the PDA services' NATS KV contract
// (docs/pda.md "Names", docs/operators-pda.md): it reads how far the services have taken a
// window (the proxy's window bucket, the database's window and results buckets) and writes the
// consistent-hash ring document the database front-ends route by. Names and JSON shapes
// are the services' own, from the PDA contract (services/pkg/pda/contract).
//
// The proxy and the database are separate NATS accounts (spec §4.2), so the client holds one
// connection per trust domain; a single connection serves both on a server without accounts
// (the tests, the embedded demo).
package pdastatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// ErrNotReported means the services have not written the entry (or its bucket) yet.
var ErrNotReported = errors.New("not reported by the PDA services yet")

// Credentials are one NATS user's.
type Credentials struct {
	User         string
	PasswordFile string
}

// Config says how the operator reaches the two domains' NATS accounts. With both users empty,
// one unauthenticated connection serves both.
type Config struct {
	URL   string
	Proxy Credentials
	DB    Credentials
}

// Client reads and writes the PDA services' KV; safe for concurrent use.
type Client struct {
	conns     []*nats.Conn
	proxy, db jetstream.JetStream
}

// Connect opens the connections.
func Connect(cfg Config) (*Client, error) {
	connect := func(domain string, cr Credentials) (*nats.Conn, error) {
		opts := []nats.Option{nats.Name("obscura-operator-pda-" + domain), nats.MaxReconnects(-1),
			// NATS may start after the operator (it waits for the accounts the operator renders).
			nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort()}
		if cr.User != "" {
			pw := ""
			if cr.PasswordFile != "" {
				b, err := os.ReadFile(cr.PasswordFile)
				if err != nil {
					return nil, fmt.Errorf("read %s NATS password: %w", domain, err)
				}
				pw = strings.TrimSpace(string(b))
			}
			opts = append(opts, nats.UserInfo(cr.User, pw))
		}
		nc, err := nats.Connect(cfg.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS %s as the %s domain: %w", cfg.URL, domain, err)
		}
		return nc, nil
	}
	c := &Client{}
	pc, err := connect("proxy", cfg.Proxy)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, pc)
	dc := pc
	if cfg.Proxy != cfg.DB {
		if dc, err = connect("db", cfg.DB); err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, dc)
	}
	if c.proxy, err = jetstream.New(pc); err == nil {
		c.db, err = jetstream.New(dc)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() {
	for _, nc := range c.conns {
		nc.Close()
	}
}

func get(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, uint64, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, ErrNotReported
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNotReported
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return e.Value(), e.Revision(), nil
}

func getJSON(ctx context.Context, js jetstream.JetStream, bucket, key string, into any) error {
	b, _, err := get(ctx, js, bucket, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Window returns the proxy mixer's record of window w.
func (c *Client) Window(ctx context.Context, w uint64) (contract.WindowRecord, error) {
	var r contract.WindowRecord
	err := getJSON(ctx, c.proxy, contract.WindowsBucket, contract.WindowKey(w), &r)
	return r, err
}

// DBSealed reports whether the database front-end has recorded window w's Seal: every chunk
// reached the database and the shards evaluate and reveal.
func (c *Client) DBSealed(ctx context.Context, w uint64) (bool, error) {
	_, _, err := get(ctx, c.db, contract.DBWindowsBucket, contract.WindowKey(w)+".seal")
	if errors.Is(err, ErrNotReported) {
		return false, nil
	}
	return err == nil, err
}

// PinnedRing returns the ring window w is routed with.
func (c *Client) PinnedRing(ctx context.Context, w uint64) (contract.RingDocument, error) {
	var r contract.RingDocument
	err := getJSON(ctx, c.db, contract.DBWindowsBucket, contract.WindowKey(w)+".ring", &r)
	return r, err
}

// Result returns window w's merged result and its JSON as the services wrote it.
func (c *Client) Result(ctx context.Context, w uint64) (contract.WindowResult, []byte, error) {
	var r contract.WindowResult
	b, _, err := get(ctx, c.db, contract.ResultsBucket, contract.WindowKey(w))
	if err != nil {
		return r, nil, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, b, fmt.Errorf("decode %s/%s: %w", contract.ResultsBucket, contract.WindowKey(w), err)
	}
	return r, b, nil
}

// ShardLag is the database shards' backlog: the sub-batch messages not yet delivered to the
// shards' durable consumers (shard-<id> on PDA_DB_SHARD). ErrNotReported when no shard's consumer
// exists yet.
func (c *Client) ShardLag(ctx context.Context, shardIDs []string) (int64, error) {
	names := make([]string, len(shardIDs))
	for i, id := range shardIDs {
		names[i] = "shard-" + id
	}
	n, err := natsx.Backlog(ctx, c.db, contract.ShardStream, names...)
	if errors.Is(err, natsx.ErrNoConsumer) {
		return 0, ErrNotReported
	}
	return n, err
}

// PooledRequests is what window w has pooled for the database so far: the submit requests on
// pda.v1.pool.<w> (PDA_PROXY_POOL), whose items reach the shards as sub-batches when the mixer
// seals the window (window mode routes nothing before). 0 once the mixer purged the pool;
// ErrNotReported before the ingress created the stream.
func (c *Client) PooledRequests(ctx context.Context, w uint64) (int64, error) {
	s, err := c.proxy.Stream(ctx, contract.PoolStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, ErrNotReported
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", contract.PoolStream, err)
	}
	subj := contract.PoolSubject(w)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("stream %s info: %w", contract.PoolStream, err)
	}
	return int64(info.State.Subjects[subj]), nil
}

// Ring returns the current ring.
func (c *Client) Ring(ctx context.Context) (contract.RingDocument, error) {
	var r contract.RingDocument
	err := getJSON(ctx, c.db, contract.RingBucket, contract.RingKey, &r)
	return r, err
}

// EnsureRing makes the current ring list exactly shards: it writes version 1 when there is no
// ring and version+1 when the shards differ, with compare-and-set so two writers never lose
// a version. It returns the ring in force and whether this call wrote it.
func (c *Client) EnsureRing(ctx context.Context, shards []string) (contract.RingDocument, bool, error) {
	want := slices.Clone(shards)
	slices.Sort(want)
	// The services create the bucket too; same configuration, so either may come first.
	kv, err := c.db.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contract.RingBucket, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		return contract.RingDocument{}, false, fmt.Errorf("ensure bucket %s: %w", contract.RingBucket, err)
	}
	e, err := kv.Get(ctx, contract.RingKey)
	var cur contract.RingDocument
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		next := contract.RingDocument{Version: 1, VirtualNodes: contract.VirtualNodes, Shards: want}
		b, _ := json.Marshal(next)
		if _, err := kv.Create(ctx, contract.RingKey, b); err != nil {
			return contract.RingDocument{}, false, fmt.Errorf("create ring: %w", err)
		}
		return next, true, nil
	case err != nil:
		return contract.RingDocument{}, false, fmt.Errorf("get ring: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &cur); err != nil {
		return contract.RingDocument{}, false, fmt.Errorf("decode ring: %w", err)
	}
	if slices.Equal(cur.Shards, want) && cur.VirtualNodes == contract.VirtualNodes {
		return cur, false, nil
	}
	next := contract.RingDocument{Version: cur.Version + 1, VirtualNodes: contract.VirtualNodes, Shards: want}
	b, _ := json.Marshal(next)
	if _, err := kv.Update(ctx, contract.RingKey, b, e.Revision()); err != nil {
		return contract.RingDocument{}, false, fmt.Errorf("update ring to version %d: %w", next.Version, err)
	}
	return next, true, nil
}

// PublishResult sends a window's result on subject in the database's account.
func (c *Client) PublishResult(subject string, result []byte) error {
	nc := c.conns[len(c.conns)-1]
	if err := nc.Publish(subject, result); err != nil {
		return fmt.Errorf("publish result on %s: %w", subject, err)
	}
	return nc.Flush()
}
