package setting

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false},
		{"4096", 4096, false},
		{" 4096 ", 4096, false},
		{"1KiB", 1 << 10, false},
		{"64MiB", 64 << 20, false},
		{"256 MiB", 256 << 20, false},
		{"4GiB", 4 << 30, false},
		{"10B", 10, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"-1", 0, true},
		{"+5", 0, true},
		{"1.5MiB", 0, true},
		{"1MB", 0, true},
		{"1mib", 0, true},
		{"1 KB", 0, true},
		{"99999999999GiB", 0, true},
		{"0x10", 0, true},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
	for n, want := range map[int64]string{0: "0", 64: "64", 1536: "1536", 3072: "3KiB", 4 << 20: "4MiB", 4<<30 + 1: "4294967297", 3 << 30: "3GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("round trip %d: %d, %v", n, back, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"250ms", 250 * time.Millisecond, false},
		{"5s", 5 * time.Second, false},
		{"1h30m", 90 * time.Minute, false},
		{"0", 0, false},
		{"", 0, true},
		{"5", 0, true},
		{"5 s", 0, true},
		{"five seconds", 0, true},
	}
	for _, tc := range cases {
		got, err := ParseDuration(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", time.Minute: "1m", 5 * time.Minute: "5m", time.Hour: "1h", 90 * time.Second: "1m30s", 24 * time.Hour: "24h", 100 * time.Millisecond: "100ms"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
