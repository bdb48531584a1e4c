package flow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

func TestHold(t *testing.T) {
	b := flow.NewBudget(flow.BudgetOptions{Limit: 100, WarmupFraction: 1})
	defer b.Close()
	h := flow.NewHold(b)
	if ok, err := h.Grow(60, 0); !ok || err != nil {
		t.Fatalf("Grow(60) = %v, %v", ok, err)
	}
	if ok, err := h.Grow(50, 10*time.Millisecond); ok || err != nil {
		t.Fatalf("Grow(50) past the budget = %v, %v; want false, nil", ok, err)
	}
	if got := h.N(); got != 60 {
		t.Fatalf("N = %d after a refused Grow, want 60", got)
	}
	if _, err := h.Grow(101, 0); !errors.Is(err, flow.ErrOversize) {
		t.Fatalf("Grow(101) = %v, want ErrOversize", err)
	}
	if got := b.Stats().InUse; got != 60 {
		t.Fatalf("budget in use = %d, want 60", got)
	}
	h.Shrink(20)
	h.Shrink(-1)
	if got := b.Stats().InUse; got != 40 || h.N() != 40 {
		t.Fatalf("after Shrink(20): budget in use %d, hold %d; want 40", got, h.N())
	}
	h.Release()
	h.Release()
	if got := b.Stats().InUse; got != 0 {
		t.Fatalf("budget in use = %d after Release twice, want 0", got)
	}
	free := flow.NewHold(nil)
	if ok, _ := free.Grow(1<<40, 0); !ok || free.N() != 1<<40 {
		t.Fatal("a hold without a budget grants everything and counts it")
	}
	free.Release()
}
