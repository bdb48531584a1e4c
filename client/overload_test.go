package client

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/wire"
)

// overloadNack is the daemon's Overloaded answer with a hint of d.
func overloadNack(d time.Duration) action {
	return action{kind: actNack, code: wire.CodeOverloaded, msg: wire.RetryAfterMessage(d, "memory budget exhausted")}
}

// TestOverloadedWaitsAndResends: a request refused Overloaded is sent
// again after the hinted pause, unchanged and ahead of what was pushed
// meanwhile; nothing is written during the pause, and the caller sees
// only the Ack.
func TestOverloadedWaitsAndResends(t *testing.T) {
	const hint = 80 * time.Millisecond
	var mu sync.Mutex
	refused := false
	s := newUnixServer(t, func(r received) action {
		mu.Lock()
		defer mu.Unlock()
		if string(r.payloads[0]) == "a" && !refused {
			refused = true
			return overloadNack(hint)
		}
		return action{}
	})
	c := dialT(t, s)
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	aDone := make(chan error, 1)
	if err := c.PushAsync(ctx, [][]byte{[]byte("a")}, Durable, func(err error) { aDone <- err }); err != nil {
		t.Fatal(err)
	}
	// Wait for the refusal to be held, then push b: it must wait for the
	// pause too, and go after a's resend.
	deadline := time.Now().Add(5 * time.Second)
	for c.OverloadRetried() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Overloaded answer was not taken up")
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Push(ctx, []byte("b"), Durable); err != nil {
		t.Fatalf("push b: %v", err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("push a: %v", err)
	}
	if time.Since(start) < hint {
		t.Fatalf("both acked after %v, before the %v pause", time.Since(start), hint)
	}
	rs := s.received()
	if len(rs) != 3 {
		t.Fatalf("server saw %d requests, want a, a again, b: %+v", len(rs), rs)
	}
	first, again, b := rs[0], rs[1], rs[2]
	if string(again.payloads[0]) != "a" || string(b.payloads[0]) != "b" {
		t.Fatalf("order %q %q %q, want a a b", first.payloads[0], again.payloads[0], b.payloads[0])
	}
	if again.firstSeq != first.firstSeq || again.eventTime != first.eventTime || again.id != first.id {
		t.Errorf("resent as id %d seq %d time %d, first id %d seq %d time %d",
			again.id, again.firstSeq, again.eventTime, first.id, first.firstSeq, first.eventTime)
	}
	if gap := again.at.Sub(first.at); gap < hint {
		t.Errorf("resent %v after the refusal, want at least the %v hint", gap, hint)
	}
	if gap := again.at.Sub(first.at); gap > DefaultOverloadMaxDelay {
		t.Errorf("resent %v after the refusal, more than the cap", gap)
	}
	if gap := b.at.Sub(first.at); gap < hint {
		t.Errorf("b written %v after a's refusal, during the pause", gap)
	}
	if c.OverloadRetried() != 1 || c.Resent() != 0 {
		t.Errorf("OverloadRetried = %d, Resent = %d; want 1, 0", c.OverloadRetried(), c.Resent())
	}
}

// TestOverloadRetriesUsedUp: with WithOverloadRetries(2) the third
// Overloaded answer reaches the caller, with its hint.
func TestOverloadRetriesUsedUp(t *testing.T) {
	s := newUnixServer(t, func(received) action { return overloadNack(3 * time.Millisecond) })
	c := dialT(t, s, WithOverloadRetries(2))
	err := c.Push(ctxT(t, 10*time.Second), []byte("x"), Buffered)
	var ne *NackError
	if !errors.As(err, &ne) || !errors.Is(err, ErrOverloaded) || !Retryable(err) {
		t.Fatalf("got %v, want an Overloaded NackError", err)
	}
	if ne.RetryAfter != 3*time.Millisecond {
		t.Errorf("RetryAfter = %v, want 3ms", ne.RetryAfter)
	}
	if n := len(s.received()); n != 3 {
		t.Errorf("server saw %d requests, want 3 (two retries)", n)
	}
	if c.OverloadRetried() != 2 {
		t.Errorf("OverloadRetried = %d, want 2", c.OverloadRetried())
	}
}

// TestOverloadedCloseGivesUp: a request the daemon keeps refusing is
// failed with ErrClosed when Close's ctx ends, and Close returns.
func TestOverloadedCloseGivesUp(t *testing.T) {
	s := newUnixServer(t, func(received) action { return overloadNack(time.Millisecond) })
	c, err := Dial(ctxT(t, 5*time.Second), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	if err := c.PushAsync(ctxT(t, 5*time.Second), [][]byte{[]byte("x")}, Durable, func(err error) { res <- err }); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctxT(t, 100*time.Millisecond)); err == nil {
		t.Error("Close returned nil with a request unanswered")
	}
	if err := <-res; !errors.Is(err, ErrClosed) {
		t.Errorf("request ended with %v, want ErrClosed", err)
	}
	if c.OverloadRetried() == 0 {
		t.Error("the request was never retried")
	}
}

func TestOverloadDelay(t *testing.T) {
	ms := time.Millisecond
	c := &Client{opts: defaultOptions()}
	c.opts.overloadMax = 500 * ms
	for _, tc := range []struct {
		hint   time.Duration
		n      int
		lo, hi time.Duration
	}{
		{100 * ms, 1, 100 * ms, 150 * ms},
		{100 * ms, 2, 200 * ms, 300 * ms},
		{100 * ms, 3, 400 * ms, 500 * ms},
		{100 * ms, 40, 500 * ms, 500 * ms},
		{time.Hour, 1, 500 * ms, 500 * ms},
		{0, 1, DefaultBackoffMin, DefaultBackoffMin * 3 / 2},
	} {
		for range 50 {
			if d := c.overloadDelay(tc.hint, tc.n); d < tc.lo || d > tc.hi {
				t.Fatalf("overloadDelay(%v, %d) = %v, want within [%v, %v]", tc.hint, tc.n, d, tc.lo, tc.hi)
			}
		}
	}
}
