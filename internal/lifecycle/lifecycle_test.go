package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopsInReverseOrder(t *testing.T) {
	s := New(nil)
	var mu sync.Mutex
	var order []string
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Start(name, func() (StopFunc, error) {
			return func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, name)
				return nil
			}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("names %v", got)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"c", "b", "a"}) {
		t.Fatalf("stopped in order %v, want c b a", order)
	}
	if err := s.Stop(context.Background()); err == nil {
		t.Fatal("second Stop returned nil")
	}
}

func TestStartErrorNamesThePart(t *testing.T) {
	s := New(nil)
	boom := errors.New("boom")
	err := s.Start("sink", func() (StopFunc, error) { return nil, boom })
	if !errors.Is(err, boom) || err.Error() != "sink: boom" {
		t.Fatalf("err %v", err)
	}
	if len(s.Names()) != 0 {
		t.Fatal("a part that failed to start was pushed")
	}
}

// TestHungPartsShareOneDeadline hangs several parts at once — some that
// ignore their context, some that honour it late — and sees Stop return
// within the deadline and one straggle, with every part asked to stop
// and each hung one named.
func TestHungPartsShareOneDeadline(t *testing.T) {
	tests := []struct {
		name  string
		parts []time.Duration // how long each stop ignores ctx (0: returns at once)
		want  int             // abandoned parts
	}{
		{"none hung", []time.Duration{0, 0, 0}, 0},
		{"one hung", []time.Duration{0, time.Hour, 0}, 1},
		{"all hung", []time.Duration{time.Hour, time.Hour, time.Hour, time.Hour}, 4},
		{"slow but under the deadline", []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil)
			release := make(chan struct{})
			var wg sync.WaitGroup
			called := make([]atomic.Bool, len(tc.parts))
			for i, d := range tc.parts {
				wg.Add(1)
				s.Push("part", func(ctx context.Context) error {
					defer wg.Done()
					called[i].Store(true)
					if d == 0 {
						return nil
					}
					select {
					case <-time.After(d):
					case <-release:
					}
					return nil
				})
			}
			const deadline = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := s.Stop(ctx)
			took := time.Since(start)
			close(release)
			wg.Wait()
			if max := deadline + DefaultStraggle + 100*time.Millisecond; took > max {
				t.Fatalf("Stop took %s, want at most %s", took, max)
			}
			n := 0
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					if errors.Is(e, ErrAbandoned) {
						n++
					}
				}
			}
			if n != tc.want {
				t.Fatalf("%d parts abandoned (%v), want %d", n, err, tc.want)
			}
			for i := range called {
				if !called[i].Load() {
					t.Fatalf("part %d never asked to stop", i)
				}
			}
		})
	}
}
