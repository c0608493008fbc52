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

// TestManualFiresWaitsOnlyWhenSetPastThem: Now stands still, a wait fires when Set reaches
// its time and not before, Waiting counts the pending waits due by a time.
func TestManualFiresWaitsOnlyWhenSetPastThem(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewManual(t0)
	if got := <-c.After(0); !got.Equal(t0) {
		t.Fatalf("After(0) fired with %v", got)
	}
	a, b := c.After(time.Minute), c.After(time.Hour)
	if n := c.Waiting(t0.Add(time.Minute)); n != 1 {
		t.Fatalf("%d waits due by +1m, want 1", n)
	}
	c.Set(t0.Add(30 * time.Second))
	select {
	case <-a:
		t.Fatal("a 1m wait fired at +30s")
	default:
	}
	c.Set(t0.Add(time.Minute))
	if got := <-a; !got.Equal(t0.Add(time.Minute)) || !c.Now().Equal(got) {
		t.Fatalf("the 1m wait fired with %v, clock at %v", got, c.Now())
	}
	select {
	case <-b:
		t.Fatal("a 1h wait fired at +1m")
	default:
	}
	if n := c.Waiting(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("%d waits left, want 1", n)
	}
}
