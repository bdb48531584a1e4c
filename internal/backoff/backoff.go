// Package backoff is weir's one capped exponential backoff. Every retry
// loop — a source restarting, a Kafka offset commit, a secondary's commit,
// the drain's sub-batch, the accept loop, the client's redial — takes its
// pauses from a Policy and waits with Sleep, so that they double, cap and
// stop on cancellation the same way.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff: Min before the first retry,
// doubling, never more than Max.
type Policy struct {
	Min, Max time.Duration
}

// Delay is the pause before retry n (0 for the first): Min·2ⁿ, at most
// Max (Max when Min is not positive).
func (p Policy) Delay(n int) time.Duration {
	d := p.Min
	if d <= 0 {
		return p.Max
	}
	for i := 0; i < n && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// Jittered is Delay(n) drawn uniformly from [Delay(n)/2, Delay(n)], for
// many clients that would otherwise retry in step.
func (p Policy) Jittered(n int) time.Duration {
	d := p.Delay(n)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Backoff is a Policy's position in a loop that pauses after each failure
// and starts over after a success.
type Backoff struct {
	Policy
	n int
}

// Next returns the pause before the next retry and moves on.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.n)
	if d < b.Max {
		b.n++
	}
	return d
}

// Reset starts over at Min.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d, or until ctx ends; it reports whether it waited d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
