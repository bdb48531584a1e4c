package flow_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

// The select rule (docs/flow_control.md): a goroutine that both admits
// records and processes the acknowledgements that release earlier ones
// must wait for a reservation in the same select as the acknowledgements.
// These tests build that pipeline — one admitter goroutine, one sink
// goroutine that makes records durable and acknowledges them, a budget
// that holds inFlight records — and show that the select form always
// finishes with the budget full, while waiting for the budget outside the
// select deadlocks.

const (
	recSize  = 100
	inFlight = 8 // records the budget holds
)

// sink receives records on work, commits them in batches of up to batch,
// and sends one acknowledgement per record on acks (unbuffered, so a send
// waits for the admitter). With gated set it sends a batch's
// acknowledgements only once the admitter waits for the budget (or has
// nothing more to admit): the acknowledgements arrive exactly when the
// budget is full, every time.
type sink struct {
	b       *flow.Budget
	work    chan int
	acks    chan int
	batch   int
	gated   bool
	jitter  *rand.Rand // optional: random commit delays
	noMore  atomic.Bool
	sending atomic.Int64 // acknowledgements committed, not yet taken by the admitter
	gateHit atomic.Int64 // batches acknowledged while the admitter waited for the budget
}

func newSink(b *flow.Budget, batch int, gated bool) *sink {
	return &sink{b: b, work: make(chan int, inFlight), acks: make(chan int), batch: batch, gated: gated}
}

func (s *sink) run(ctx context.Context) {
	for {
		var ids []int
		select {
		case id, ok := <-s.work:
			if !ok {
				return
			}
			ids = append(ids, id)
		case <-ctx.Done():
			return
		}
	fill:
		for len(ids) < s.batch {
			select {
			case id, ok := <-s.work:
				if !ok {
					break fill
				}
				ids = append(ids, id)
			default:
				if s.gated && !s.noMore.Load() && s.b.Stats().Waiting == 0 {
					// Wait for the rest of the batch (the budget is not
					// full yet, more records come).
					select {
					case id := <-s.work:
						ids = append(ids, id)
						continue
					case <-time.After(100 * time.Microsecond):
						continue
					case <-ctx.Done():
						return
					}
				}
				break fill
			}
		}
		if s.jitter != nil {
			time.Sleep(time.Duration(s.jitter.IntN(200)) * time.Microsecond)
		}
		if s.gated {
			for s.b.Stats().Waiting == 0 && !s.noMore.Load() {
				select {
				case <-time.After(100 * time.Microsecond):
				case <-ctx.Done():
					return
				}
			}
			if s.b.Stats().Waiting > 0 {
				s.gateHit.Add(1)
			}
		}
		s.sending.Add(int64(len(ids)))
		for _, id := range ids {
			select {
			case s.acks <- id:
				s.sending.Add(-1)
			case <-ctx.Done():
				return
			}
		}
	}
}

// admitSelect is the rule followed: the admitter waits for the next
// reservation in the same select as the acknowledgements.
func admitSelect(ctx context.Context, t *testing.T, s *sink, n int) (maxInUse int64) {
	held := map[int]*flow.Ticket{}
	var pending *flow.Ticket
	next, acked := 0, 0
	for acked < n {
		if pending == nil && next < n {
			tk, err := s.b.Reserve(recSize)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			pending = tk
		}
		var grant <-chan struct{}
		if pending != nil {
			grant = pending.C
		}
		select {
		case <-grant:
			held[next], pending = pending, nil
			s.work <- next // never blocks: work holds what the budget holds
			next++
			if next == n {
				s.noMore.Store(true)
			}
			maxInUse = max(maxInUse, s.b.Stats().InUse)
		case id := <-s.acks:
			held[id].Release()
			delete(held, id)
			acked++
		case <-ctx.Done():
			t.Fatalf("the select form did not finish: %d of %d admitted, %d acknowledged, budget %+v",
				next, n, acked, s.b.Stats())
		}
	}
	return maxInUse
}

func TestSelectRuleNeverDeadlocks(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch int
		gated bool
		seed  uint64 // 0: no jitter
	}{
		{"acks arrive only when the budget is full", inFlight, true, 0},
		{"small batches, acks when full", 3, true, 0},
		{"one by one, acks when full", 1, true, 0},
		{"free-running sink", 5, false, 1},
		{"free-running sink, other timings", 2, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 2000
			b := warm(t, inFlight*recSize)
			s := newSink(b, c.batch, c.gated)
			if c.seed != 0 {
				s.jitter = rand.New(rand.NewPCG(c.seed, 3))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			var wg sync.WaitGroup
			wg.Go(func() { s.run(ctx) })
			defer func() { cancel(); close(s.work); wg.Wait() }()

			maxInUse := admitSelect(ctx, t, s, n)
			if st := b.Stats(); st.InUse != 0 || st.Waiting != 0 || st.Releases != n {
				t.Errorf("after the run: %+v", st)
			}
			if maxInUse != inFlight*recSize {
				t.Errorf("the budget never filled (at most %d of %d): the test did not exercise the full budget", maxInUse, inFlight*recSize)
			}
			if c.gated && s.gateHit.Load() == 0 {
				t.Error("no acknowledgement arrived while the admitter waited for the budget")
			}
		})
	}
}

// admitBlocking breaks the rule: it waits for the budget before it looks
// at acknowledgements (AcquireWithin stands for Acquire, bounded so the
// test can end). It returns how many records it admitted before a wait
// for the budget failed, or n.
func admitBlocking(s *sink, n int, wait time.Duration) int {
	for next := range n {
		if ok, _ := s.b.AcquireWithin(recSize, wait); !ok {
			return next
		}
		s.work <- next
		for drained := false; !drained; { // acknowledgements, only those already there
			select {
			case <-s.acks:
				s.b.Release(recSize)
			default:
				drained = true
			}
		}
	}
	return n
}

func TestBlockingAcquireOutsideSelectDeadlocks(t *testing.T) {
	const n = 100
	b := warm(t, inFlight*recSize)
	s := newSink(b, inFlight, true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx) })
	defer func() { cancel(); close(s.work); wg.Wait() }()

	const wait = 300 * time.Millisecond
	admitted := admitBlocking(s, n, wait)
	if admitted == n {
		t.Fatal("waiting outside the select finished: the test does not show the deadlock")
	}
	// The admitter gave up after waiting: with Acquire it would wait
	// forever, because the only goroutine that releases is itself, and the
	// acknowledgements that would let it go sit in the sink, unreceived.
	st := b.Stats()
	if admitted != inFlight || st.InUse != inFlight*recSize || st.Releases != 0 {
		t.Errorf("admitted %d, budget %+v: want the budget full (%d records) and nothing released", admitted, st, inFlight)
	}
	waitFor(t, "the sink to hold its acknowledgements", func() bool { return s.sending.Load() > 0 })
	t.Logf("deadlock shown: %d records admitted, budget full (%d bytes), %d acknowledgements waiting for the admitter for %s",
		admitted, st.InUse, s.sending.Load(), wait)
}
