package clock

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("a full wait reported as interrupted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("a cancelled context waited the full hour")
	}
	if Sleep(ctx, 0) {
		t.Error("a zero wait on a cancelled context reported success")
	}
	if !Sleep(context.Background(), -time.Second) {
		t.Error("a negative wait on a live context reported interruption")
	}
}
