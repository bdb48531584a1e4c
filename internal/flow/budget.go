package flow

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// ObserveWait, if set, is told how long each grant waited (about 0
	// when granted at once). It is called after the budget's lock is
	// released, from whichever goroutine made the grant happen (the one
	// reserving, or the one whose release or cancel let a waiter in); it
	// should be quick.
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
	waiters   []*Ticket // FIFO; granted and cancelled ones are removed
	waitBytes int64     // the waiters' sizes
	acks      int       // releases since the last warm-up step
	releases  uint64    // every release, for the stuck detector's progress
	// steps counts warm-up steps; the timer armed after step k carries k,
	// so a timer that fires while an acknowledgement steps warm-up (and
	// waits for the lock) does not step it a second time.
	steps     uint64
	stepTimer *time.Timer
	closed    bool
}

// Ticket is a reservation of n bytes. C is closed once they are granted;
// the holder releases them with Release (or gives up with Cancel, which
// also releases them if they were granted meanwhile).
type Ticket struct {
	C  <-chan struct{}
	c  chan struct{} // C, closable, for a ticket that waits
	n  int64
	b  *Budget
	at time.Time // when it began to wait
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
	b.grantable = min(max(int64(float64(o.Limit)*o.WarmupFraction), 1), b.limit)
	b.mu.Lock()
	b.arm()
	b.mu.Unlock()
	return b
}

// Close stops the warm-up timer: what is grantable then stays as it is
// until acknowledgements step it up. Reservations keep working.
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.stepTimer != nil {
		b.stepTimer.Stop()
	}
}

func (b *Budget) oversize(n int64) error {
	return fmt.Errorf("%w: %d bytes, %d grantable of %d", ErrOversize, n, b.grantable, b.limit)
}

// Reserve asks for n bytes. It returns ErrOversize when n exceeds what the
// budget can grant now; otherwise a Ticket whose C is closed at once when
// the bytes are free and nobody is waiting ahead, or later.
func (b *Budget) Reserve(n int64) (*Ticket, error) {
	n = max(n, 0)
	t := &Ticket{n: n, b: b}
	b.mu.Lock()
	if n > b.grantable {
		err := b.oversize(n)
		b.mu.Unlock()
		return nil, err
	}
	if len(b.waiters) == 0 && b.used+n <= b.grantable {
		// Granted at once: the channel is one that is already closed.
		t.C = closed
		b.used += n
		t.granted = true
		b.mu.Unlock()
		b.observe(0)
		return t, nil
	}
	t.c = make(chan struct{})
	t.C, t.at = t.c, time.Now()
	b.waiters = append(b.waiters, t)
	b.waitBytes += n
	b.mu.Unlock()
	return t, nil
}

// closed is the channel of every ticket granted at once.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// TryAcquire takes n bytes if they are free now and nobody waits ahead;
// it returns ErrOversize as Reserve does.
func (b *Budget) TryAcquire(n int64) (bool, error) {
	n = max(n, 0)
	b.mu.Lock()
	if n > b.grantable {
		err := b.oversize(n)
		b.mu.Unlock()
		return false, err
	}
	if len(b.waiters) > 0 || b.used+n > b.grantable {
		b.mu.Unlock()
		return false, nil
	}
	b.used += n
	b.mu.Unlock()
	b.observe(0)
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
// granted in time (nothing is held then). The same rule as for Acquire
// applies: never from a goroutine that processes acknowledgements.
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
		// Cancel decides under the lock: granted since, it gives the bytes
		// back, so nothing is held either way.
		t.Cancel()
		return false, nil
	}
}

// Release gives back n bytes taken with TryAcquire or Acquire (or those of
// a granted Ticket, for a holder that keeps only the size: it must not
// call the Ticket's Release or Cancel as well), and counts one
// acknowledgement towards warm-up and towards progress.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	waits := b.release(n, true)
	b.mu.Unlock()
	b.observe(waits...)
}

// Release gives the ticket's bytes back, as Budget.Release does; the
// ticket must have been granted. Releasing twice, or after Cancel, panics.
func (t *Ticket) Release() {
	b := t.b
	b.mu.Lock()
	if !t.granted || t.done {
		b.mu.Unlock()
		panic("flow: release of a ticket that is not held")
	}
	t.done = true
	waits := b.release(t.n, true)
	b.mu.Unlock()
	b.observe(waits...)
}

// Cancel withdraws a reservation. If it had been granted meanwhile its
// bytes are given back and Cancel reports true, so the caller can tell
// whether it raced with the grant (it holds nothing either way
// afterwards). A cancelled grant is not an acknowledgement: it steps
// neither warm-up nor progress. Cancel after Release, or twice, does
// nothing.
func (t *Ticket) Cancel() (wasGranted bool) {
	b := t.b
	b.mu.Lock()
	if t.done {
		b.mu.Unlock()
		return false
	}
	t.done = true
	var waits []time.Duration
	if t.granted {
		waits = b.release(t.n, false)
	} else {
		for i, w := range b.waiters {
			if w == t {
				b.waiters = slices.Delete(b.waiters, i, i+1)
				b.waitBytes -= t.n
				break
			}
		}
		// t may have been the head that held the others back.
		waits = b.wake()
	}
	b.mu.Unlock()
	b.observe(waits...)
	return t.granted
}

// release gives back n bytes, counting an acknowledgement if ack, and
// grants what then fits; b.mu is held (and unlocked before it panics on
// a release of more than is held). It returns the waits to observe.
func (b *Budget) release(n int64, ack bool) []time.Duration {
	if n > b.used {
		used := b.used
		b.mu.Unlock()
		panic(fmt.Sprintf("flow: budget released %d bytes with %d held", n, used))
	}
	b.used -= n
	if ack {
		b.acks++
		b.releases++
		if b.grantable < b.limit && b.acks >= b.opts.WarmupAcks {
			b.step()
		}
	}
	return b.wake()
}

// grant gives a waiting t its bytes; b.mu is held.
func (b *Budget) grant(t *Ticket) {
	b.used += t.n
	t.granted = true
	close(t.c)
}

// wake grants waiters in order while they fit and returns how long each
// waited (when waits are observed); b.mu is held.
//
// A waiter larger than all that is grantable — possible only after
// SetLimit lowered the limit under a reservation already queued — is
// granted once nothing else is held: refusing it is no longer possible
// (its holder waits on C) and leaving it at the head would stall every
// reservation behind it for good. The overrun is that one record, which
// fitted the budget when it was reserved.
func (b *Budget) wake() (waits []time.Duration) {
	i := 0
	for ; i < len(b.waiters); i++ {
		t := b.waiters[i]
		fits := b.used+t.n <= b.grantable || (b.used == 0 && t.n > b.grantable)
		if !fits {
			break
		}
		b.grant(t)
		b.waitBytes -= t.n
		if b.opts.ObserveWait != nil {
			waits = append(waits, time.Since(t.at))
		}
	}
	if i > 0 {
		n := copy(b.waiters, b.waiters[i:])
		clear(b.waiters[n:])
		b.waiters = b.waiters[:n]
	}
	return waits
}

func (b *Budget) observe(waits ...time.Duration) {
	if b.opts.ObserveWait == nil {
		return
	}
	for _, d := range waits {
		b.opts.ObserveWait(d)
	}
}

// step doubles what is grantable, up to the limit, and re-arms the timer
// while warm-up goes on; b.mu is held. The caller wakes the waiters.
func (b *Budget) step() {
	b.grantable = min(b.grantable*2, b.limit)
	b.acks = 0
	b.steps++
	b.arm()
}

// arm starts the timer of the next warm-up step, stopping the previous
// one, while warm-up goes on and the budget is open; b.mu is held.
func (b *Budget) arm() {
	if b.stepTimer != nil {
		b.stepTimer.Stop()
		b.stepTimer = nil
	}
	if b.grantable >= b.limit || b.closed {
		return
	}
	step := b.steps
	b.stepTimer = time.AfterFunc(b.opts.WarmupTimeout, func() { b.warmupTimeout(step) })
}

// warmupTimeout steps warm-up if nothing stepped it since the timer that
// calls it was armed (after step number step).
func (b *Budget) warmupTimeout(step uint64) {
	b.mu.Lock()
	var waits []time.Duration
	if b.steps == step && b.grantable < b.limit && !b.closed {
		b.step()
		waits = b.wake()
	}
	b.mu.Unlock()
	b.observe(waits...)
}

// SetLimit changes the budget (a profile switch: a node taking on the
// quorum role runs with less). Lowering it below what is held grants
// nothing more until enough is released; a reservation already queued
// that is larger than the new limit is granted once nothing else is held
// (see wake), new ones that large are refused with ErrOversize. The
// warm-up state is kept, capped at the new limit: a warm budget stays
// warm, one warming up goes on doubling towards the new limit.
func (b *Budget) SetLimit(n int64) {
	if n <= 0 {
		panic(fmt.Sprintf("flow: budget limit %d", n))
	}
	b.mu.Lock()
	warm := b.grantable >= b.limit
	b.limit = n
	if warm || b.grantable > n {
		b.grantable = n
	}
	if b.grantable >= b.limit && b.stepTimer != nil {
		b.stepTimer.Stop()
		b.stepTimer = nil
	}
	waits := b.wake()
	b.mu.Unlock()
	b.observe(waits...)
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
	return BudgetStats{Limit: b.limit, Grantable: b.grantable, InUse: b.used,
		Waiting: len(b.waiters), WaitBytes: b.waitBytes, Releases: b.releases}
}
