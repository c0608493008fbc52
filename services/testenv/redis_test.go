package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedis(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	rdb := r.Client()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	// The harness's settings are the server's settings: loopback only, no persistence.
	for param, want := range map[string]string{"bind": Host, "save": "", "appendonly": "no", "port": fmt.Sprint(r.Port)} {
		got, err := rdb.ConfigGet(ctx, param).Result()
		if err != nil || got[param] != want {
			t.Errorf("CONFIG GET %s = %q, %v; want %q", param, got[param], err, want)
		}
	}

	if err := rdb.Set(ctx, "round:7:mapping", "v1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "round:7:mapping").Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v; want v1", got, err)
	}

	if err := rdb.Set(ctx, "ratelimit:long", "1", time.Minute).Err(); err != nil {
		t.Fatalf("SET with EX: %v", err)
	}
	if ttl, err := rdb.TTL(ctx, "ratelimit:long").Result(); err != nil || ttl <= 50*time.Second || ttl > time.Minute {
		t.Errorf("TTL = %v, %v; want (50s, 60s]", ttl, err)
	}
	if err := rdb.Set(ctx, "ratelimit:short", "1", 20*time.Millisecond).Err(); err != nil {
		t.Fatalf("SET with PX: %v", err)
	}
	err := poll(ctx, func(ctx context.Context) error {
		_, err := rdb.Get(ctx, "ratelimit:short").Result()
		switch {
		case errors.Is(err, redis.Nil):
			return nil
		case err != nil:
			return err
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("key with a 20ms TTL did not expire: %v", err)
	}
}

func TestRedisStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	msg := startFailure(t, func(tb testing.TB) { StartRedis(tb, "--no-such-directive", "1") })
	t.Log(msg)
	requireContains(t, msg, "redis-server", Host+":", "did not answer PING", "exited", "no-such-directive")
}
