package sink

import "testing"

// ReadLimit takes records until max, or until the next one would pass
// maxBytes; the first record is taken whatever its size.
func TestReadLimit(t *testing.T) {
	rec := func(n int) *Positioned { return &Positioned{Record: Record{Payload: make([]byte, n)}} }
	per := rec(100).MemSize()
	for _, tc := range []struct {
		name     string
		max      int
		maxBytes int64
		sizes    []int
		want     int
	}{
		{"records only", 3, 0, []int{100, 100, 100, 100}, 3},
		{"bytes stop before the record past them", 10, 2*per + per/2, []int{100, 100, 100, 100}, 2},
		{"bytes met exactly", 10, 2 * per, []int{100, 100, 100}, 2},
		{"first record larger than maxBytes", 10, per / 2, []int{100, 100}, 1},
		{"a large record after a small one waits", 10, 2 * per, []int{100, 1000, 100}, 1},
		{"max 0 takes nothing", 0, 0, []int{100}, 0},
	} {
		fresh := NewReadLimit(tc.max, tc.maxBytes)
		if n, b := fresh.Left(); tc.max > 0 && (n != tc.max || (tc.maxBytes > 0) != (b == tc.maxBytes) || (tc.maxBytes <= 0) != (b == -1)) {
			t.Errorf("%s: a fresh limit leaves %d records and %d bytes", tc.name, n, b)
		}
		l := NewReadLimit(tc.max, tc.maxBytes)
		got := 0
		for _, n := range tc.sizes {
			if !l.Take(rec(n)) {
				break
			}
			got++
		}
		if got != tc.want || !l.Done() {
			t.Errorf("%s: took %d (done %v), want %d and done", tc.name, got, l.Done(), tc.want)
		}
		if n, b := l.Left(); n != 0 || b != 0 {
			t.Errorf("%s: done, and Left says %d records and %d bytes", tc.name, n, b)
		}
	}
}
