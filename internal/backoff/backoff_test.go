package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		p    Policy
		n    int
		want time.Duration
	}{
		{Policy{10 * ms, time.Second}, 0, 10 * ms},
		{Policy{10 * ms, time.Second}, 1, 20 * ms},
		{Policy{10 * ms, time.Second}, 6, 640 * ms},
		{Policy{10 * ms, time.Second}, 7, time.Second},
		{Policy{10 * ms, time.Second}, 1 << 20, time.Second},
		{Policy{3 * time.Second, time.Second}, 0, time.Second},
		{Policy{0, time.Second}, 3, time.Second},
	} {
		if got := tc.p.Delay(tc.n); got != tc.want {
			t.Errorf("%+v.Delay(%d) = %v, want %v", tc.p, tc.n, got, tc.want)
		}
	}
}

func TestJittered(t *testing.T) {
	p := Policy{100 * time.Millisecond, time.Second}
	for n := range 6 {
		d := p.Delay(n)
		for range 100 {
			if j := p.Jittered(n); j < d/2 || j > d {
				t.Fatalf("Jittered(%d) = %v, outside [%v, %v]", n, j, d/2, d)
			}
		}
	}
}

func TestBackoffNextReset(t *testing.T) {
	b := Backoff{Policy: Policy{time.Millisecond, 4 * time.Millisecond}}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{1, 2, 4, 4, 4}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("Next × 5 = %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Millisecond {
		t.Fatalf("Next after Reset = %v", d)
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep with a live context did not wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) || time.Since(start) > time.Second {
		t.Fatal("Sleep with an ended context waited")
	}
}
