package roundstate_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// BenchmarkAdmitRedis admits 1 KiB M1s into a redis-server (400 a round, 1,600 users, from
// 32 callers per GOMAXPROCS at once, as a gateway's concurrent Submits are) and reports
// redis-server's own CPU per admission (INFO cpu, user + system, main thread) and the calling
// process's (client-cpu-µs/op, the gateway's side) beside the usual figures: the store's part
// of the server CPU per command that `mohito bench` counts.
//
//	go test ./pkg/mohito/roundstate/ -run '^$' -bench AdmitRedis -benchtime 20000x
func BenchmarkAdmitRedis(b *testing.B) {
	rc := testenv.StartRedis(b).Client()
	s := roundstate.NewRedis(rc, 10*time.Minute)
	ctx := context.Background()
	users := make([]string, 1600)
	for i := range users {
		users[i] = "user" + strconv.Itoa(i)
	}
	var n atomic.Uint64
	cpu0, self0 := redisCPU(b, rc), selfCPU()
	b.ResetTimer()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		m1 := make([]byte, 1024)
		for pb.Next() {
			k := n.Add(1)
			binary.BigEndian.PutUint64(m1, k) // distinct envelopes
			if _, err := s.Admit(ctx, 1+k/400, users[k%uint64(len(users))], 4, m1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((redisCPU(b, rc)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/op")
	b.ReportMetric(float64((selfCPU()-self0).Microseconds())/float64(b.N), "client-cpu-µs/op")
}

// selfCPU is this process's user + system CPU so far (the store's client side).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the server's used_cpu_user_main_thread + used_cpu_sys_main_thread.
func redisCPU(tb testing.TB, rc *redis.Client) time.Duration {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}
