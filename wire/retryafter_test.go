package wire

import (
	"testing"
	"time"
)

func TestRetryAfterMessage(t *testing.T) {
	for _, tc := range []struct {
		d      time.Duration
		reason string
		want   string
		parsed time.Duration
	}{
		{100 * time.Millisecond, "memory budget exhausted", "retry_after_ms=100; memory budget exhausted", 100 * time.Millisecond},
		{1500 * time.Microsecond, "x", "retry_after_ms=2; x", 2 * time.Millisecond},
		{0, "", "retry_after_ms=1", time.Millisecond},
		{-time.Second, "r", "retry_after_ms=1; r", time.Millisecond},
		{1000 * 24 * time.Hour, "r", "retry_after_ms=2147483647; r", (1<<31 - 1) * time.Millisecond},
	} {
		got := RetryAfterMessage(tc.d, tc.reason)
		if got != tc.want {
			t.Errorf("RetryAfterMessage(%v, %q) = %q, want %q", tc.d, tc.reason, got, tc.want)
		}
		d, rest, ok := ParseRetryAfter(got)
		if !ok || rest != tc.reason || d != tc.parsed {
			t.Errorf("ParseRetryAfter(%q) = %v, %q, %v; want %v, %q, true", got, d, rest, ok, tc.parsed, tc.reason)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		d    time.Duration
		rest string
		ok   bool
	}{
		{"retry_after_ms=250; busy", 250 * time.Millisecond, "busy", true},
		{"retry_after_ms=250;busy", 250 * time.Millisecond, "busy", true},
		{"retry_after_ms=7", 7 * time.Millisecond, "", true},
		{"retry_after_ms=0; now", 0, "now", true},
		{"retry_after_ms=99999999999; x", 0, "retry_after_ms=99999999999; x", false},
		{"retry_after_ms=9999999999", (1<<31 - 1) * time.Millisecond, "", true},
		{"retry_after_ms=; x", 0, "retry_after_ms=; x", false},
		{"retry_after_ms=12x", 0, "retry_after_ms=12x", false},
		{"retry_after_ms=-5", 0, "retry_after_ms=-5", false},
		{"queue full", 0, "queue full", false},
		{"", 0, "", false},
		{" retry_after_ms=5", 0, " retry_after_ms=5", false},
	} {
		d, rest, ok := ParseRetryAfter(tc.msg)
		if d != tc.d || rest != tc.rest || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %q, %v; want %v, %q, %v", tc.msg, d, rest, ok, tc.d, tc.rest, tc.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	f.Add("retry_after_ms=100; busy")
	f.Add("retry_after_ms=")
	f.Fuzz(func(t *testing.T, msg string) {
		d, rest, ok := ParseRetryAfter(msg)
		if d < 0 || !ok && (d != 0 || rest != msg) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %q, %v", msg, d, rest, ok)
		}
		if ok {
			d2, rest2, ok2 := ParseRetryAfter(RetryAfterMessage(d, rest))
			if !ok2 || rest2 != rest || d2 != max(d, time.Millisecond) {
				t.Fatalf("round trip of %q: %v, %q, %v", msg, d2, rest2, ok2)
			}
		}
	})
}
