package flow

import (
	"testing"
	"time"
)

// A warm-up timer that fires while an acknowledgement is stepping warm-up
// (it waits for the lock, then runs) must not step it a second time: the
// step it was armed after is no longer the last one.
func TestWarmupTimerAfterAckStepDoesNotStepAgain(t *testing.T) {
	b := NewBudget(BudgetOptions{Limit: 1 << 20, WarmupFraction: 1.0 / 64, WarmupAcks: 1, WarmupTimeout: time.Hour})
	defer b.Close()
	b.mu.Lock()
	armedAfter := b.steps
	b.mu.Unlock()
	b.TryAcquire(1)
	b.Release(1) // steps by acks
	g := b.Stats().Grantable
	b.warmupTimeout(armedAfter) // the stale timer's callback
	if got := b.Stats().Grantable; got != g {
		t.Fatalf("a stale timer stepped warm-up again: %d → %d", g, got)
	}
	b.mu.Lock()
	current := b.steps
	b.mu.Unlock()
	b.warmupTimeout(current) // the timer armed by that step
	if got := b.Stats().Grantable; got != 2*g {
		t.Fatalf("the current timer did not step: %d → %d", g, got)
	}
}
