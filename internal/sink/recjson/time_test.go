package recjson

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// AppendTime writes exactly what time.Time.AppendFormat(RFC3339Nano)
// writes for the time in UTC.
func TestAppendTime(t *testing.T) {
	check := func(tm time.Time) {
		t.Helper()
		want := tm.UTC().Format(time.RFC3339Nano)
		if got := string(AppendTime([]byte("x"), tm)); got != "x"+want {
			t.Fatalf("AppendTime(%v) = %q, want %q", tm, got[1:], want)
		}
	}
	for _, tm := range []time.Time{
		time.Unix(0, 0), time.Unix(-1, 0), time.Unix(-1, 999999999), time.Unix(0, 1), time.Unix(0, 100),
		time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 2, 29, 23, 59, 59, 120000000, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 500, time.FixedZone("x", 3600)), time.Date(1900, 3, 1, 0, 0, 0, 1, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64), time.Unix(1<<40, 3),
	} {
		check(tm)
	}
	rapid.Check(t, func(rt *rapid.T) {
		check(time.Unix(rapid.Int64Range(-1<<38, 1<<38).Draw(rt, "sec"), rapid.Int64Range(0, 999999999).Draw(rt, "ns")))
	})
}

func BenchmarkAppendTime(b *testing.B) {
	tm := time.Now()
	buf := make([]byte, 0, 64)
	b.Run("recjson", func(b *testing.B) {
		for range b.N {
			buf = AppendTime(buf[:0], tm)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for range b.N {
			buf = tm.UTC().AppendFormat(buf[:0], time.RFC3339Nano)
		}
	})
}
