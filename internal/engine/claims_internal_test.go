package engine

import (
	"slices"
	"testing"
)

func TestGapCells(t *testing.T) {
	set := func(spans ...Span) *SpanSet {
		s := &SpanSet{}
		for _, sp := range spans {
			s.Add(sp.Lo, sp.Hi)
		}
		return s
	}
	for _, c := range []struct {
		set  *SpanSet
		end  uint64
		want []uint64
	}{
		{set(Span{0, 10}, Span{15, 20}, Span{130, 140}), 250, []uint64{0, 1, 2, 3, 4}},
		{set(Span{0, 100}), 100, nil},
		{set(Span{0, 100}), 101, []uint64{2}},
		{set(), 0, nil},
		{set(Span{0, 49}, Span{51, 200}), 200, []uint64{0, 1}},
		{set(Span{0, 50}, Span{100, 150}), 200, []uint64{1, 3}},
		{set(Span{10, 20}), 30, []uint64{0}},
	} {
		got := slices.Collect(c.set.gapCells(c.end, 50))
		if !slices.Equal(got, c.want) {
			t.Errorf("gapCells(%v, end %d) = %v, want %v", c.set, c.end, got, c.want)
		}
	}
	var first []uint64
	for k := range set().gapCells(1000, 50) {
		first = append(first, k)
		if len(first) == 2 {
			break
		}
	}
	if !slices.Equal(first, []uint64{0, 1}) {
		t.Errorf("stopping early: %v", first)
	}
	if WindowKey("pg", 7) != "pg/7" {
		t.Errorf("WindowKey %q", WindowKey("pg", 7))
	}
}
