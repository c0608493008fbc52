package roles

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
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
	streamDefaults(js, &cfg)
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return nil
}

// ErrRetentionChange: a role's job asks for another retention than the live pool stream's. The
// pool's max age follows the job's window and grace (Job.PoolRetention), so the roles of one job
// disagree on the window — a role started with another --window used to rewrite the max age of
// the stream every role shares, silently, cutting or stretching how long pooled items live.
var ErrRetentionChange = errors.New("the live stream keeps messages for another time than this role's job")

// ensureRetainedStream creates cfg's stream, or checks that the live one has cfg's max age
// before updating the rest of its configuration: a role never changes a live stream's
// retention.
func ensureRetainedStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	streamDefaults(js, &cfg)
	for range 3 {
		s, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// CreateStream refuses a stream that another role created meanwhile with another
			// configuration; the next pass compares against it.
			if _, err = js.CreateStream(ctx, cfg); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue
			}
			if err != nil {
				return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
		if live := s.CachedInfo().Config.MaxAge; live != cfg.MaxAge {
			return fmt.Errorf("%w: stream %s keeps messages for %v, this role's job for %v (2 × --window + --grace): every role of a job must run with one window and grace; a role does not change a live stream's retention (to change a job's window, stop its roles and delete the stream, losing what it pools)",
				ErrRetentionChange, cfg.Name, live, cfg.MaxAge)
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
		return nil
	}
	return fmt.Errorf("ensure stream %s: created and deleted concurrently", cfg.Name)
}

// streamDefaults fills what every PDA stream shares: file storage, the replicas js carries
// (natsx.WithReplicas, the daemons' --nats-replicas), the duplicate window, the message size
// limit.
func streamDefaults(js jetstream.JetStream, cfg *jetstream.StreamConfig) {
	cfg.Storage = jetstream.FileStorage
	cfg.Replicas = natsx.Replicas(js)
	cfg.Duplicates = Dedup
	if cfg.MaxAge > 0 {
		cfg.Duplicates = min(Dedup, cfg.MaxAge)
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 8 << 20
	}
}

func ensureKV(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage, History: 1,
		Replicas: natsx.Replicas(js)})
	if err != nil {
		return nil, fmt.Errorf("ensure kv %s: %w", bucket, err)
	}
	return kv, nil
}

// EnsureProxyDomain creates the proxy domain's streams and bucket (in the PDA_PROXY
// account). retain must exceed a window plus its grace (Job.PoolRetention): the pool holds a
// window's items until the mixer seals it. A live pool stream with another max age is left as it
// is and reported as ErrRetentionChange.
func EnsureProxyDomain(ctx context.Context, js jetstream.JetStream, retain time.Duration) error {
	if err := ensureRetainedStream(ctx, js, jetstream.StreamConfig{Name: contract.PoolStream, Subjects: []string{"pda.v1.pool.*"},
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
