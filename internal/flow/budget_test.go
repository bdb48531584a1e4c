package flow_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

// warm is a budget of limit bytes with warm-up off.
func warm(t testing.TB, limit int64) *flow.Budget {
	t.Helper()
	b := flow.NewBudget(flow.BudgetOptions{Limit: limit, WarmupFraction: 1})
	t.Cleanup(b.Close)
	return b
}

func granted(tk *flow.Ticket) bool {
	select {
	case <-tk.C:
		return true
	default:
		return false
	}
}

func mustReserve(t *testing.T, b *flow.Budget, n int64) *flow.Ticket {
	t.Helper()
	tk, err := b.Reserve(n)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", n, err)
	}
	return tk
}

func wantStats(t *testing.T, b *flow.Budget, want flow.BudgetStats) {
	t.Helper()
	if got := b.Stats(); got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
}

func TestBudgetReserve(t *testing.T) {
	for _, c := range []struct {
		name        string
		limit, held int64
		queued      int64 // a reservation waiting ahead (0: none)
		n           int64
		want        string // granted | queued | oversize
	}{
		{"fits an empty budget", 100, 0, 0, 100, "granted"},
		{"fits beside what is held", 100, 60, 0, 40, "granted"},
		{"zero bytes", 100, 100, 0, 0, "granted"},
		{"negative counts as zero", 100, 100, 0, -5, "granted"},
		{"does not fit now", 100, 60, 0, 41, "queued"},
		{"fits, but someone waits ahead", 100, 60, 50, 1, "queued"},
		{"zero bytes behind a waiter still queue", 100, 60, 50, 0, "queued"},
		{"larger than the budget", 100, 0, 0, 101, "oversize"},
		{"larger than the budget while full", 100, 100, 0, 101, "oversize"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := warm(t, c.limit)
			if ok, err := b.TryAcquire(c.held); !ok || err != nil {
				t.Fatalf("TryAcquire(%d) = %v, %v", c.held, ok, err)
			}
			if c.queued > 0 {
				if tk := mustReserve(t, b, c.queued); granted(tk) {
					t.Fatal("the reservation ahead was granted")
				}
			}
			tk, err := b.Reserve(c.n)
			got := "queued"
			switch {
			case errors.Is(err, flow.ErrOversize):
				got = "oversize"
			case err != nil:
				t.Fatalf("Reserve: %v", err)
			case granted(tk):
				got = "granted"
			}
			if got != c.want {
				t.Errorf("Reserve(%d) with %d of %d held: %s, want %s", c.n, c.held, c.limit, got, c.want)
			}
			// TryAcquire agrees with Reserve on what fits now.
			b2 := warm(t, c.limit)
			b2.TryAcquire(c.held)
			if c.queued > 0 {
				mustReserve(t, b2, c.queued)
			}
			ok, err := b2.TryAcquire(c.n)
			tryGot := map[bool]string{true: "granted", false: "queued"}[ok]
			if errors.Is(err, flow.ErrOversize) {
				tryGot = "oversize"
			}
			if tryGot != c.want {
				t.Errorf("TryAcquire(%d): %s, want %s", c.n, tryGot, c.want)
			}
		})
	}
}

// Grants are first come, first served: a large reservation at the head is
// not overtaken by smaller ones that would fit.
func TestBudgetFIFO(t *testing.T) {
	b := warm(t, 100)
	b.TryAcquire(90)
	a := mustReserve(t, b, 60)
	bb := mustReserve(t, b, 30)
	c := mustReserve(t, b, 10)
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 90, Waiting: 3, WaitBytes: 100})
	if ok, _ := b.TryAcquire(1); ok {
		t.Fatal("TryAcquire overtook the queue")
	}
	b.Release(40) // 50 held: b and c would fit, a does not
	if granted(a) || granted(bb) || granted(c) {
		t.Fatalf("granted out of order: a %v b %v c %v", granted(a), granted(bb), granted(c))
	}
	b.Release(50) // 0 held: all three fit, in order
	if !granted(a) || !granted(bb) || !granted(c) {
		t.Fatalf("not granted: a %v b %v c %v", granted(a), granted(bb), granted(c))
	}
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 100, Releases: 2})
	a.Release()
	bb.Release()
	c.Release()
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, Releases: 5})
}

// Cancelling the head of the queue lets the ones behind it in at once.
func TestBudgetCancelHeadWakesNext(t *testing.T) {
	b := warm(t, 100)
	b.TryAcquire(90)
	head := mustReserve(t, b, 60)
	next := mustReserve(t, b, 10)
	last := mustReserve(t, b, 1)
	if head.Cancel() {
		t.Fatal("Cancel of a waiting ticket reported a grant")
	}
	if !granted(next) {
		t.Fatal("the reservation behind a cancelled head was not granted")
	}
	if granted(last) {
		t.Fatal("granted beyond the budget")
	}
	if granted(head) {
		t.Fatal("a cancelled ticket's channel was closed")
	}
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 100, Waiting: 1, WaitBytes: 1})
	// Cancelling a ticket in the middle keeps the order of the others.
	last.Cancel()
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 100})
	if head.Cancel() {
		t.Fatal("second Cancel reported a grant")
	}
}

func TestBudgetCancelGranted(t *testing.T) {
	b := warm(t, 100)
	tk := mustReserve(t, b, 70)
	waiter := mustReserve(t, b, 50)
	if !tk.Cancel() {
		t.Fatal("Cancel of a granted ticket did not report the grant")
	}
	if !granted(waiter) {
		t.Fatal("the bytes given back by Cancel were not granted to the waiter")
	}
	// A cancelled grant is not an acknowledgement: no progress counted.
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 50})
	if tk.Cancel() {
		t.Fatal("second Cancel reported a grant")
	}
	waiter.Release()
	if waiter.Cancel() {
		t.Fatal("Cancel after Release reported a grant")
	}
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, Releases: 1})
}

func TestBudgetMisuse(t *testing.T) {
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	b := warm(t, 100)
	tk := mustReserve(t, b, 10)
	tk.Release()
	panics("a second Release", tk.Release)
	b.TryAcquire(95)
	waiting := mustReserve(t, b, 10)
	panics("Release of a waiting ticket", waiting.Release)
	panics("Release of more than is held", func() { b.Release(1000) })
	// The budget is still usable (its lock was let go before the panic).
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 95, Waiting: 1, WaitBytes: 10, Releases: 1})
	panics("NewBudget with no limit", func() { flow.NewBudget(flow.BudgetOptions{}) })
	panics("SetLimit(0)", func() { b.SetLimit(0) })
}

func TestBudgetWarmupByAcks(t *testing.T) {
	b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 0.25, WarmupAcks: 4, WarmupTimeout: time.Hour})
	defer b.Close()
	wantStats(t, b, flow.BudgetStats{Limit: 1000, Grantable: 250})
	// A record that fits the full budget but not what warm-up grants is
	// oversize now: waiting for it would stall everything behind it.
	if _, err := b.Reserve(300); !errors.Is(err, flow.ErrOversize) {
		t.Fatalf("Reserve(300) during warm-up: %v, want ErrOversize", err)
	}
	if _, err := b.TryAcquire(300); !errors.Is(err, flow.ErrOversize) {
		t.Fatalf("TryAcquire(300) during warm-up: %v, want ErrOversize", err)
	}
	// A waiter that does not fit beside what is held is granted when a
	// step makes room; every release is an acknowledgement.
	b.TryAcquire(200)
	w := mustReserve(t, b, 100)
	for i, want := range []int64{250, 250, 250, 500, 500, 500, 500, 1000, 1000} {
		b.Release(1)
		if g := b.Stats().Grantable; g != want {
			t.Fatalf("after %d releases grantable = %d, want %d", i+1, g, want)
		}
		if granted(w) != (want > 250) {
			t.Fatalf("after %d releases (grantable %d) the waiter's grant is %v", i+1, want, granted(w))
		}
	}
	if tk, err := b.Reserve(300); err != nil || !granted(tk) {
		t.Fatalf("Reserve(300) after warm-up: %v", err)
	}
}

func TestBudgetWarmupByTimer(t *testing.T) {
	var seen []int64
	b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 0.25, WarmupAcks: 1 << 20, WarmupTimeout: 20 * time.Millisecond})
	defer b.Close()
	b.TryAcquire(200)
	w := mustReserve(t, b, 100) // fits after one step
	deadline := time.Now().Add(10 * time.Second)
	for g := int64(0); g < 1000; {
		if time.Now().After(deadline) {
			t.Fatalf("warm-up by timer did not reach the limit; grantable went %v", seen)
		}
		if ng := b.Stats().Grantable; ng != g {
			g = ng
			seen = append(seen, g)
		}
		time.Sleep(time.Millisecond)
	}
	if want := []int64{250, 500, 1000}; len(seen) != len(want) || seen[0] != 250 || seen[len(seen)-1] != 1000 {
		t.Errorf("grantable went %v, want %v (each a doubling)", seen, want)
	}
	if !granted(w) {
		t.Error("the waiter was not granted by the timer's step")
	}
	if b.Stats().Releases != 0 {
		t.Error("timer steps counted as releases")
	}
}

// Close stops warm-up by timer; acknowledgements still step it.
func TestBudgetCloseStopsTimer(t *testing.T) {
	b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 0.25, WarmupAcks: 1, WarmupTimeout: time.Millisecond})
	b.Close()
	time.Sleep(20 * time.Millisecond) // nothing may happen; a wrong step shows below
	if g := b.Stats().Grantable; g != 250 {
		t.Fatalf("grantable after Close = %d, want 250", g)
	}
	b.TryAcquire(1)
	b.Release(1)
	if g := b.Stats().Grantable; g != 500 {
		t.Fatalf("grantable after an ack = %d, want 500", g)
	}
}

func TestBudgetSetLimit(t *testing.T) {
	t.Run("up and down when warm", func(t *testing.T) {
		b := warm(t, 100)
		b.TryAcquire(80)
		b.SetLimit(200)
		wantStats(t, b, flow.BudgetStats{Limit: 200, Grantable: 200, InUse: 80})
		if ok, _ := b.TryAcquire(120); !ok {
			t.Fatal("raised limit not grantable")
		}
		b.Release(120)
		b.SetLimit(50) // below what is held
		wantStats(t, b, flow.BudgetStats{Limit: 50, Grantable: 50, InUse: 80, Releases: 1})
		if ok, _ := b.TryAcquire(1); ok {
			t.Fatal("granted while over the lowered limit")
		}
		if _, err := b.Reserve(60); !errors.Is(err, flow.ErrOversize) {
			t.Fatalf("Reserve(60) over a limit of 50: %v", err)
		}
		w := mustReserve(t, b, 10)
		b.Release(30) // 50 held: still no room
		if granted(w) {
			t.Fatal("granted at the lowered limit")
		}
		b.Release(10)
		if !granted(w) {
			t.Fatal("not granted once under the lowered limit")
		}
	})
	t.Run("a queued reservation larger than the new limit", func(t *testing.T) {
		b := warm(t, 100)
		b.TryAcquire(90)
		big := mustReserve(t, b, 80)
		small := mustReserve(t, b, 10)
		b.SetLimit(50)
		b.Release(50)
		if granted(big) || granted(small) {
			t.Fatal("granted while others are held")
		}
		b.Release(40) // empty: the big one is granted alone, not stalled for good
		if !granted(big) {
			t.Fatal("a reservation queued before the limit was lowered stalls the queue")
		}
		if granted(small) {
			t.Fatal("granted beside the oversize one")
		}
		big.Release()
		if !granted(small) {
			t.Fatal("the reservation behind was not granted")
		}
	})
	t.Run("during warm-up", func(t *testing.T) {
		b := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 0.25, WarmupAcks: 1, WarmupTimeout: time.Hour})
		defer b.Close()
		b.SetLimit(2000) // warm-up goes on towards the new limit
		wantStats(t, b, flow.BudgetStats{Limit: 2000, Grantable: 250})
		var steps []int64
		for range 4 {
			b.TryAcquire(1)
			b.Release(1)
			steps = append(steps, b.Stats().Grantable)
		}
		if want := []int64{500, 1000, 2000, 2000}; !equal(steps, want) {
			t.Fatalf("grantable went %v, want %v", steps, want)
		}
		b2 := flow.NewBudget(flow.BudgetOptions{Limit: 1000, WarmupFraction: 0.25, WarmupAcks: 1, WarmupTimeout: time.Hour})
		defer b2.Close()
		b2.SetLimit(100) // below what warm-up grants: warm at the new limit
		wantStats(t, b2, flow.BudgetStats{Limit: 100, Grantable: 100})
	})
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBudgetAcquire(t *testing.T) {
	b := warm(t, 100)
	b.TryAcquire(100)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Acquire(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a full budget: %v", err)
	}
	if ok, err := b.AcquireWithin(10, 10*time.Millisecond); ok || err != nil {
		t.Fatalf("AcquireWithin on a full budget: %v, %v", ok, err)
	}
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 100}) // nothing left behind
	if _, err := b.AcquireWithin(200, time.Second); !errors.Is(err, flow.ErrOversize) {
		t.Fatalf("AcquireWithin(200): %v", err)
	}
	if err := b.Acquire(context.Background(), 200); !errors.Is(err, flow.ErrOversize) {
		t.Fatalf("Acquire(200): %v", err)
	}
	done := make(chan bool)
	go func() {
		ok, _ := b.AcquireWithin(10, 10*time.Second)
		done <- ok
	}()
	waitFor(t, "the waiter to queue", func() bool { return b.Stats().Waiting == 1 })
	b.Release(10)
	if !<-done {
		t.Fatal("AcquireWithin not granted on release")
	}
	go func() { done <- b.Acquire(context.Background(), 10) == nil }()
	waitFor(t, "the waiter to queue", func() bool { return b.Stats().Waiting == 1 })
	b.Release(10)
	if !<-done {
		t.Fatal("Acquire not granted on release")
	}
	wantStats(t, b, flow.BudgetStats{Limit: 100, Grantable: 100, InUse: 100, Releases: 2})
}

// waitFor polls cond for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// ObserveWait sees every grant, with how long it waited, and is called
// without the budget's lock: it may call the budget.
func TestBudgetObserveWait(t *testing.T) {
	var mu sync.Mutex
	var waits []time.Duration
	var b *flow.Budget
	b = flow.NewBudget(flow.BudgetOptions{Limit: 100, WarmupFraction: 1, ObserveWait: func(d time.Duration) {
		_ = b.Stats() // would deadlock under the lock
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}})
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.TryAcquire(100)
		tk, _ := b.Reserve(10)
		time.Sleep(20 * time.Millisecond)
		b.Release(100)
		<-tk.C
		tk.Release()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ObserveWait calling the budget deadlocked")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 2 {
		t.Fatalf("observed %d waits, want 2: %v", len(waits), waits)
	}
	if waits[0] != 0 || waits[1] < 20*time.Millisecond {
		t.Errorf("waits %v: want 0, then at least 20ms", waits)
	}
}

// Many goroutines reserve, select, give up, cancel and release at once:
// whatever the interleaving of Cancel with the grant, every byte comes back
// and a cancelled ticket that reports no grant was never granted.
func TestBudgetCancelRacesGrant(t *testing.T) {
	const limit = 1 << 12
	b := flow.NewBudget(flow.BudgetOptions{Limit: limit, WarmupFraction: 0.25, WarmupAcks: 64, WarmupTimeout: time.Millisecond})
	defer b.Close()
	var cancelledGranted, cancelledWaiting, released atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 500 {
				n := r.Int64N(limit / 8)
				switch r.IntN(4) {
				case 0: // TryAcquire and release
					if ok, err := b.TryAcquire(n); err == nil && ok {
						b.Release(n)
						released.Add(1)
					}
				case 1: // AcquireWithin a tiny deadline
					if ok, err := b.AcquireWithin(n, time.Duration(r.IntN(50))*time.Microsecond); err == nil && ok {
						b.Release(n)
						released.Add(1)
					}
				default: // Reserve, select against a timer, Cancel when given up
					tk, err := b.Reserve(n)
					if err != nil {
						continue
					}
					timer := time.NewTimer(time.Duration(r.IntN(100)) * time.Microsecond)
					select {
					case <-tk.C:
						timer.Stop()
						if r.IntN(2) == 0 {
							tk.Release()
						} else if !tk.Cancel() {
							t.Error("Cancel of a ticket received from C reported no grant")
						}
					case <-timer.C:
						if tk.Cancel() {
							cancelledGranted.Add(1)
							if !granted(tk) {
								t.Error("Cancel reported a grant, C is open")
							}
						} else {
							cancelledWaiting.Add(1)
							if granted(tk) {
								t.Error("Cancel reported no grant, C is closed: the bytes are lost")
							}
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	s := b.Stats()
	if s.InUse != 0 || s.Waiting != 0 || s.WaitBytes != 0 {
		t.Fatalf("after every holder is done: %+v", s)
	}
	t.Logf("releases %d, cancels that raced a grant %d, cancels while waiting %d", released.Load(), cancelledGranted.Load(), cancelledWaiting.Load())
}
