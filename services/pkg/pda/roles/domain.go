package roles

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// Dedup is the JetStream duplicate window of every PDA stream: it must cover the retry
// horizon of the mixer, the front-ends and the shards (spec §4.5). A stream that keeps its
// messages for less (the pool of a job with short windows) de-duplicates for as long as it
// keeps them: JetStream refuses a duplicate window longer than the max age (error 10052), and
// every publish to the pool is retried within its window and grace, which the pool outlives
// (Job.PoolRetention).
const Dedup = 10 * time.Minute

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	cfg.Storage = jetstream.FileStorage
	cfg.Duplicates = Dedup
	if cfg.MaxAge > 0 {
		cfg.Duplicates = min(Dedup, cfg.MaxAge)
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 8 << 20
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return nil
}

func ensureKV(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		return nil, fmt.Errorf("ensure kv %s: %w", bucket, err)
	}
	return kv, nil
}

// EnsureProxyDomain creates the proxy domain's streams and bucket (in the PDA_PROXY
// account). retain must exceed a window plus its grace (Job.PoolRetention): the pool holds a
// window's items until the mixer seals it.
func EnsureProxyDomain(ctx context.Context, js jetstream.JetStream, retain time.Duration) error {
	if err := ensureStream(ctx, js, jetstream.StreamConfig{Name: contract.PoolStream, Subjects: []string{"pda.v1.pool.*"},
		MaxAge: retain}); err != nil {
		return err
	}
	if err := ensureStream(ctx, js, jetstream.StreamConfig{Name: contract.RevealReqStream, Subjects: []string{"pda.v1.reveal.req.*"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		return err
	}
	_, err := ensureKV(ctx, js, contract.WindowsBucket)
	return err
}

// EnsureDBDomain creates the DB domain's streams and buckets (in the PDA_DB account).
func EnsureDBDomain(ctx context.Context, js jetstream.JetStream) error {
	for _, c := range []jetstream.StreamConfig{
		{Name: contract.IngestStream, Subjects: []string{"pda.v1.ingest.*"}, Retention: jetstream.WorkQueuePolicy},
		{Name: contract.ShardStream, Subjects: []string{"pda.v1.shard.*.*"}, Retention: jetstream.WorkQueuePolicy},
		{Name: contract.RevealRespStream, Subjects: []string{"pda.v1.reveal.resp.*.*"}, Retention: jetstream.WorkQueuePolicy},
	} {
		if err := ensureStream(ctx, js, c); err != nil {
			return err
		}
	}
	for _, b := range []string{contract.RingBucket, contract.DBWindowsBucket, contract.ResultsBucket} {
		if _, err := ensureKV(ctx, js, b); err != nil {
			return err
		}
	}
	return nil
}
