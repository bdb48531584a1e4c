package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrOversize is returned for a reservation larger than the budget can
// grant now (see Budget.Grantable). It is permanent for the record at this
// moment: waiting would stall everything queued behind it, so the caller
// sends the record to its dead-letter or quarantine lane with reason code
// oversize instead.
var ErrOversize = errors.New("flow: record larger than the grantable memory budget")

// Defaults of BudgetOptions.
const (
	DefaultWarmupFraction = 0.25
	DefaultWarmupAcks     = 1024
	DefaultWarmupTimeout  = 5 * time.Second
)

// BudgetOptions configure a Budget.
type BudgetOptions struct {
	// Limit is the budget in bytes (> 0).
	Limit int64
	// WarmupFraction is the share of Limit grantable at start (0 < f ≤ 1;
	// 0 takes DefaultWarmupFraction, 1 turns warm-up off). The grantable
	// amount doubles each time WarmupAcks releases have been counted or
	// WarmupTimeout has passed since the last step, whichever comes
	// first, until it reaches Limit.
	WarmupFraction float64
	WarmupAcks     int           // 0 takes DefaultWarmupAcks
	WarmupTimeout  time.Duration // 0 takes DefaultWarmupTimeout
	// ObserveWait, if set, is told how long each grant waited (0 when
	// granted at once). It is called with the budget's lock held: it must
	// be quick and must not call the budget.
	ObserveWait func(time.Duration)
}

// Budget is a semaphore counted in bytes: every record held in memory
// holds a reservation of its estimated size from the moment it is read
// until the stage downstream has made it durable.
//
// A reservation is a Ticket whose channel is closed when the bytes are
// granted, so that a goroutine that also processes acknowledgements can
// wait for it in a select beside them — blocking on a grant outside such a
// select deadlocks once the budget is full, because the acknowledgements
// that would release it never run. Grants are first come, first served: a
// large reservation at the head is not overtaken by smaller ones behind
// it, so it cannot starve.
//
// All methods are safe for concurrent use.
type Budget struct {
	opts BudgetOptions

	mu        sync.Mutex
	limit     int64 // the budget
	grantable int64 // what warm-up allows now (≤ limit)
	used      int64
	waiters   []*Ticket // FIFO; granted ones are removed
	acks      int       // releases since the last warm-up step
	releases  uint64    // every release, for the stuck detector's progress
	stepTimer *time.Timer
	closed    bool
}

// Ticket is a reservation of n bytes. C is closed once they are granted;
// the holder releases them with Release (or gives up with Cancel, which
// also releases them if they were granted meanwhile).
type Ticket struct {
	C <-chan struct{}
	c chan struct{}
	n int64
	b *Budget
	at time.Time // when reserved
	// granted and done are guarded by b.mu.
	granted, done bool
}

// N is the size of the reservation.
func (t *Ticket) N() int64 { return t.n }

// NewBudget makes a budget; it starts its warm-up timer, which Close stops.
func NewBudget(o BudgetOptions) *Budget {
	if o.Limit <= 0 {
		panic(fmt.Sprintf("flow: budget limit %d", o.Limit))
	}
	if o.WarmupFraction <= 0 || o.WarmupFraction > 1 {
		o.WarmupFraction = DefaultWarmupFraction
	}
	if o.WarmupAcks <= 0 {
		o.WarmupAcks = DefaultWarmupAcks
	}
	if o.WarmupTimeout <= 0 {
		o.WarmupTimeout = DefaultWarmupTimeout
	}
	b := &Budget{opts: o, limit: o.Limit}
	b.grantable = max(int64(float64(o.Limit)*o.WarmupFraction), 1)
	if b.grantable < b.limit {
		b.stepTimer = time.AfterFunc(o.WarmupTimeout, b.warmupTimeout)
	} else {
		b.grantable = b.limit
	}
	return b
}

// Close stops the warm-up timer. Reservations keep working.
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.stepTimer != nil {
		b.stepTimer.Stop()
	}
}

// Reserve asks for n bytes. It returns ErrOversize when n exceeds what the
// budget can grant now; otherwise a Ticket whose C is closed at once when
// the bytes are free and nobody is waiting ahead, or later.
func (b *Budget) Reserve(n int64) (*Ticket, error) {
	if n < 0 {
		n = 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.grantable {
		return nil, fmt.Errorf("%w: %d bytes, %d grantable of %d", ErrOversize, n, b.grantable, b.limit)
	}
	c := make(chan struct{})
	t := &Ticket{C: c, c: c, n: n, b: b, at: time.Now()}
	if len(b.waiters) == 0 && b.used+n <= b.grantable {
		b.grant(t)
	} else {
		b.waiters = append(b.waiters, t)
	}
	return t, nil
}

// TryAcquire takes n bytes if they are free now and nobody waits ahead;
// it returns ErrOversize as Reserve does.
func (b *Budget) TryAcquire(n int64) (bool, error) {
	if n < 0 {
		n = 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.grantable {
		return false, fmt.Errorf("%w: %d bytes, %d grantable of %d", ErrOversize, n, b.grantable, b.limit)
	}
	if len(b.waiters) > 0 || b.used+n > b.grantable {
		return false, nil
	}
	b.used += n
	if b.opts.ObserveWait != nil {
		b.opts.ObserveWait(0)
	}
	return true, nil
}

// Acquire waits for n bytes or for ctx to end. Only a goroutine that does
// not itself release what others hold may call it; one that processes
// acknowledgements must use Reserve and select.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	t, err := b.Reserve(n)
	if err != nil {
		return err
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Cancel()
		return ctx.Err()
	}
}

// AcquireWithin waits at most d for n bytes; false means they were not
// granted in time (nothing is held then).
func (b *Budget) AcquireWithin(n int64, d time.Duration) (bool, error) {
	t, err := b.Reserve(n)
	if err != nil {
		return false, err
	}
	select {
	case <-t.C:
		return true, nil
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-timer.C:
		select {
		case <-t.C: // granted as the timer fired
			return true, nil
		default:
		}
		t.Cancel() // releases the bytes if the grant came in between
		return false, nil
	}
}

// Release gives back n bytes taken with TryAcquire, Acquire or a granted
// Ticket's Release, and counts one acknowledgement towards warm-up.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic(fmt.Sprintf("flow: budget released %d bytes more than it granted", -b.used))
	}
	b.acks++
	b.releases++
	if b.grantable < b.limit && b.acks >= b.opts.WarmupAcks {
		b.step()
	}
	b.wake()
}

// Release gives the ticket's bytes back; the ticket must have been
// granted. Releasing twice panics. (Budget.Release(t.N()) does the same
// for a holder that keeps only the size; it must not Cancel afterwards.)
func (t *Ticket) Release() {
	b := t.b
	b.mu.Lock()
	if !t.granted || t.done {
		b.mu.Unlock()
		panic("flow: release of a ticket that is not held")
	}
	t.done = true
	b.mu.Unlock()
	b.Release(t.n)
}

// Cancel withdraws a reservation. If it had been granted meanwhile its
// bytes are released and Cancel reports true, so the caller can tell
// whether it raced with the grant (it holds nothing either way afterwards).
func (t *Ticket) Cancel() (wasGranted bool) {
	b := t.b
	b.mu.Lock()
	if t.done {
		b.mu.Unlock()
		return false
	}
	t.done = true
	if !t.granted {
		for i, w := range b.waiters {
			if w == t {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
		b.wake() // the head may have been what held the others back
		b.mu.Unlock()
		return false
	}
	b.mu.Unlock()
	b.Release(t.n)
	return true
}

// grant gives t its bytes; b.mu is held.
func (b *Budget) grant(t *Ticket) {
	b.used += t.n
	t.granted = true
	close(t.c)
	if b.opts.ObserveWait != nil {
		b.opts.ObserveWait(time.Since(t.at))
	}
}

// wake grants waiters in order while they fit; b.mu is held.
func (b *Budget) wake() {
	i := 0
	for ; i < len(b.waiters); i++ {
		t := b.waiters[i]
		if b.used+t.n > b.grantable {
			break
		}
		b.grant(t)
	}
	if i > 0 {
		n := copy(b.waiters, b.waiters[i:])
		clear(b.waiters[n:])
		b.waiters = b.waiters[:n]
	}
}

// step doubles what is grantable, up to the limit; b.mu is held.
func (b *Budget) step() {
	b.grantable = min(b.grantable*2, b.limit)
	b.acks = 0
	if b.stepTimer != nil {
		b.stepTimer.Stop()
		if b.grantable < b.limit && !b.closed {
			b.stepTimer.Reset(b.opts.WarmupTimeout)
		}
	}
	b.wake()
}

func (b *Budget) warmupTimeout() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grantable < b.limit && !b.closed {
		b.step()
	}
}

// SetLimit changes the budget (a profile switch: a node taking on the
// quorum role runs with less). Lowering it below what is held grants
// nothing more until enough is released; the warm-up state is kept, capped
// at the new limit.
func (b *Budget) SetLimit(n int64) {
	if n <= 0 {
		panic(fmt.Sprintf("flow: budget limit %d", n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	warm := b.grantable >= b.limit
	b.limit = n
	if warm || b.grantable > n {
		b.grantable = n
	}
	if b.stepTimer != nil && b.grantable < b.limit && !b.closed {
		b.stepTimer.Reset(b.opts.WarmupTimeout)
	}
	b.wake()
}

// BudgetStats is a snapshot of a Budget.
type BudgetStats struct {
	Limit     int64  // the budget
	Grantable int64  // what warm-up allows now
	InUse     int64  // held by granted reservations
	Waiting   int    // reservations not yet granted
	WaitBytes int64  // their sizes
	Releases  uint64 // releases since the start (progress)
}

// Stats returns a snapshot.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BudgetStats{Limit: b.limit, Grantable: b.grantable, InUse: b.used, Waiting: len(b.waiters), Releases: b.releases}
	for _, t := range b.waiters {
		s.WaitBytes += t.n
	}
	return s
}
