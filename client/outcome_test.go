package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/wire"
)

// scripted is a server handler that answers each request by the
// connection it came on and how many requests that connection has seen
// before (from 0).
func scripted(f func(conn, n int) action) func(received) action {
	var mu sync.Mutex
	seen := map[int]int{}
	return func(r received) action {
		mu.Lock()
		n := seen[r.conn]
		seen[r.conn]++
		mu.Unlock()
		return f(r.conn, n)
	}
}

// firstConnDrops: the first connection breaks with the request on it
// unanswered (the daemon may have stored it); later ones answer with
// later(n).
func firstConnDrops(later func(n int) action) func(conn, n int) action {
	return func(conn, n int) action {
		if conn == 0 {
			return action{kind: actDrop}
		}
		return later(n)
	}
}

// TestOutcomeOfRefusedPush: what a caller is told of a push refused or
// left unanswered, by whether a copy of it may have been stored. A
// request resent after a reconnect and refused Overloaded is retried
// whatever WithOverloadRetries says, and when the push's ctx ends first it
// is an *OutcomeUnknownError, never ErrOverloaded; a request every send of
// which was refused Overloaded was never stored, and keeps ErrOverloaded.
func TestOutcomeOfRefusedPush(t *testing.T) {
	const hint = 5 * time.Millisecond
	overloaded := overloadNack(hint)
	for _, tc := range []struct {
		name    string
		opts    []Option
		script  func(conn, n int) action
		ctx     time.Duration
		async   bool // PushAsync, its ctx ended right after the push
		want    error
		unknown bool // an *OutcomeUnknownError (else: not one)
		last    error
	}{
		{name: "resend refused Overloaded, then acked, no retries allowed",
			opts: []Option{WithOverloadRetries(0)},
			script: firstConnDrops(func(n int) action {
				if n < 3 {
					return overloaded
				}
				return action{}
			}),
			ctx: 10 * time.Second},
		{name: "resend refused Overloaded until the deadline, no retries allowed",
			opts:   []Option{WithOverloadRetries(0)},
			script: firstConnDrops(func(int) action { return overloaded }),
			ctx:    300 * time.Millisecond, want: context.DeadlineExceeded, unknown: true},
		{name: "resend refused Overloaded until the deadline, default retries",
			script: firstConnDrops(func(int) action { return overloaded }),
			ctx:    300 * time.Millisecond, want: context.DeadlineExceeded, unknown: true},
		{name: "resend refused Overloaded after its async ctx ended",
			opts:   []Option{WithOverloadRetries(0)},
			script: firstConnDrops(func(int) action { return overloaded }),
			ctx:    10 * time.Second, async: true, want: context.Canceled, unknown: true, last: ErrOverloaded},
		{name: "resend refused ShuttingDown",
			script: firstConnDrops(func(int) action { return action{kind: actNack, code: wire.CodeShuttingDown} }),
			ctx:    10 * time.Second, want: ErrShuttingDown, unknown: true},
		{name: "resend refused BadFrame: permanent",
			script: firstConnDrops(func(int) action { return action{kind: actNack, code: wire.CodeBadFrame} }),
			ctx:    10 * time.Second, want: ErrBadFrame},
		{name: "resend acked",
			script: firstConnDrops(func(int) action { return action{} }),
			ctx:    10 * time.Second},
		{name: "first send refused Overloaded, no retries allowed: not stored",
			opts:   []Option{WithOverloadRetries(0)},
			script: func(int, int) action { return overloaded },
			ctx:    10 * time.Second, want: ErrOverloaded},
		{name: "first send refused Overloaded twice, retries used up: not stored",
			opts:   []Option{WithOverloadRetries(1)},
			script: func(int, int) action { return overloaded },
			ctx:    10 * time.Second, want: ErrOverloaded},
		{name: "first send held after Overloaded when the deadline comes: not stored",
			opts:   []Option{WithOverloadMaxDelay(time.Minute)},
			script: func(int, int) action { return overloadNack(time.Minute) },
			ctx:    300 * time.Millisecond, want: context.DeadlineExceeded},
		{name: "written, unanswered when the deadline comes",
			script: func(int, int) action { return action{kind: actSilent} },
			ctx:    200 * time.Millisecond, want: context.DeadlineExceeded, unknown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newUnixServer(t, scripted(tc.script))
			c := dialT(t, s, tc.opts...)
			defer c.Close(ctxT(t, 100*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctx)
			defer cancel()
			var err error
			if tc.async {
				res := make(chan error, 1)
				if err := c.PushAsync(ctx, [][]byte{[]byte("x")}, Durable, func(err error) { res <- err }); err != nil {
					t.Fatal(err)
				}
				cancel()
				err = <-res
			} else {
				err = c.Push(ctx, []byte("x"), Durable)
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var ue *OutcomeUnknownError
			if got := errors.As(err, &ue); got != tc.unknown {
				t.Fatalf("got %v: an OutcomeUnknownError: %v, want %v", err, got, tc.unknown)
			}
			if !tc.unknown {
				return
			}
			if errors.Is(err, ErrOverloaded) || Retryable(err) || !errors.Is(err, ErrOutcomeUnknown) {
				t.Errorf("%v: matches ErrOverloaded %v, Retryable %v, matches ErrOutcomeUnknown %v; want false, false, true",
					err, errors.Is(err, ErrOverloaded), Retryable(err), errors.Is(err, ErrOutcomeUnknown))
			}
			if ue.Producer != c.Producer().ID() || ue.Records != 1 {
				t.Errorf("names producer %x, %d records; want %x, 1", ue.Producer, ue.Records, c.Producer().ID())
			}
			if tc.last != nil && !errors.Is(ue.Last, tc.last) {
				t.Errorf("last answer %v, want %v", ue.Last, tc.last)
			}
		})
	}
}

// TestCloseGivesUpUnknown: Close giving up on a request written and
// unanswered fails it with an *OutcomeUnknownError wrapping ErrClosed; a
// request never written gets plain ErrClosed.
func TestCloseGivesUpUnknown(t *testing.T) {
	s := newUnixServer(t, func(received) action { return action{kind: actSilent} })
	c := dialT(t, s)
	res := make(chan error, 1)
	if err := c.PushAsync(ctxT(t, 5*time.Second), [][]byte{[]byte("x")}, Durable, func(err error) { res <- err }); err != nil {
		t.Fatal(err)
	}
	for len(s.received()) == 0 {
		time.Sleep(time.Millisecond)
	}
	c.Close(ctxT(t, 50*time.Millisecond))
	err := <-res
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("got %v, want an OutcomeUnknownError of ErrClosed", err)
	}
}

// TestRepushKeepsIdentity: an *OutcomeUnknownError pushed again with
// Repush goes out with the same sequence number and event time, so the
// daemon stores it under the id of the copy it may hold; a client of
// another producer refuses to.
func TestRepushKeepsIdentity(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	s := newUnixServer(t, scripted(firstConnDrops(func(int) action {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return overloadNack(time.Millisecond)
		}
		return action{}
	})))
	c := dialT(t, s)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := c.Push(short, []byte("x"), Durable)
	var ue *OutcomeUnknownError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want an OutcomeUnknownError", err)
	}
	other := dialT(t, s)
	if err := other.Repush(ctxT(t, 5*time.Second), ue); err == nil {
		t.Fatal("a client of another producer pushed the records again")
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if err := c.Repush(ctxT(t, 5*time.Second), ue); err != nil {
		t.Fatalf("repush: %v", err)
	}
	rs := s.received()
	first, last := rs[0], rs[len(rs)-1]
	if last.firstSeq != first.firstSeq || last.eventTime != first.eventTime || string(last.payloads[0]) != "x" {
		t.Errorf("repushed as seq %d time %d, first seq %d time %d", last.firstSeq, last.eventTime, first.firstSeq, first.eventTime)
	}
	if first.firstSeq != ue.FirstSeq {
		t.Errorf("error names sequence %d, the push had %d", ue.FirstSeq, first.firstSeq)
	}
}
