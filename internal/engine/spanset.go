package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Span is the half-open range of raw positions [Lo, Hi).
type Span struct {
	Lo, Hi uint64
}

// Len is the number of positions in the span.
func (s Span) Len() uint64 {
	if s.Hi <= s.Lo {
		return 0
	}
	return s.Hi - s.Lo
}

func (s Span) String() string { return fmt.Sprintf("[%d,%d)", s.Lo, s.Hi) }

// SpanSet is a set of raw positions kept as sorted, disjoint, non-adjacent
// spans: the coverage of a sink (which positions it has durably received).
// The zero value is empty and ready to use. A SpanSet is not safe for
// concurrent use.
type SpanSet struct {
	spans []Span
}

// Spans returns a copy of the spans, in order.
func (s *SpanSet) Spans() []Span { return append([]Span(nil), s.spans...) }

// Clone returns an independent copy.
func (s *SpanSet) Clone() SpanSet { return SpanSet{spans: s.Spans()} }

// Empty reports whether the set holds no position.
func (s *SpanSet) Empty() bool { return len(s.spans) == 0 }

// Add adds [lo, hi), merging with the spans it overlaps or touches. An
// empty range adds nothing.
func (s *SpanSet) Add(lo, hi uint64) {
	if hi <= lo {
		return
	}
	// First span whose end reaches lo (touching counts): it and every span
	// up to the last one starting at or before hi merge with [lo, hi).
	i := s.search(lo)
	j := i
	for j < len(s.spans) && s.spans[j].Lo <= hi {
		lo = min(lo, s.spans[j].Lo)
		hi = max(hi, s.spans[j].Hi)
		j++
	}
	if i == j {
		s.spans = append(s.spans, Span{})
		copy(s.spans[i+1:], s.spans[i:])
		s.spans[i] = Span{lo, hi}
		return
	}
	s.spans[i] = Span{lo, hi}
	s.spans = append(s.spans[:i+1], s.spans[j:]...)
}

// AddSet adds every span of o.
func (s *SpanSet) AddSet(o *SpanSet) {
	for _, sp := range o.spans {
		s.Add(sp.Lo, sp.Hi)
	}
}

// Remove removes [lo, hi) from the set.
func (s *SpanSet) Remove(lo, hi uint64) {
	if hi <= lo {
		return
	}
	out := make([]Span, 0, len(s.spans)+1)
	for _, sp := range s.spans {
		if sp.Hi <= lo || sp.Lo >= hi {
			out = append(out, sp)
			continue
		}
		if sp.Lo < lo {
			out = append(out, Span{sp.Lo, lo})
		}
		if sp.Hi > hi {
			out = append(out, Span{hi, sp.Hi})
		}
	}
	s.spans = out
}

// search is the index of the first span with Hi >= p.
func (s *SpanSet) search(p uint64) int {
	lo, hi := 0, len(s.spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.spans[m].Hi < p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Contains reports whether p is in the set.
func (s *SpanSet) Contains(p uint64) bool {
	i := s.search(p + 1)
	return i < len(s.spans) && s.spans[i].Lo <= p && p < s.spans[i].Hi
}

// ContainsSpan reports whether every position of [lo, hi) is in the set.
func (s *SpanSet) ContainsSpan(lo, hi uint64) bool {
	if hi <= lo {
		return true
	}
	i := s.search(lo + 1)
	return i < len(s.spans) && s.spans[i].Lo <= lo && hi <= s.spans[i].Hi
}

// Prefix is the end of the contiguous run of positions starting at 0: every
// position below it is in the set. It is 0 when 0 is not in the set.
func (s *SpanSet) Prefix() uint64 {
	if len(s.spans) == 0 || s.spans[0].Lo != 0 {
		return 0
	}
	return s.spans[0].Hi
}

// Max is one past the highest position in the set, 0 when empty.
func (s *SpanSet) Max() uint64 {
	if len(s.spans) == 0 {
		return 0
	}
	return s.spans[len(s.spans)-1].Hi
}

// Count is how many positions below end are in the set.
func (s *SpanSet) Count(end uint64) uint64 {
	var n uint64
	for _, sp := range s.spans {
		if sp.Lo >= end {
			break
		}
		n += min(sp.Hi, end) - sp.Lo
	}
	return n
}

// Gaps returns the ranges below end that are not in the set, in order.
func (s *SpanSet) Gaps(end uint64) []Span {
	var out []Span
	next := uint64(0)
	for _, sp := range s.spans {
		if sp.Lo >= end {
			break
		}
		if sp.Lo > next {
			out = append(out, Span{next, sp.Lo})
		}
		next = sp.Hi
	}
	if next < end {
		out = append(out, Span{next, end})
	}
	return out
}

// FirstGap is the first range below end not in the set; ok is false when
// every position below end is in the set.
func (s *SpanSet) FirstGap(end uint64) (g Span, ok bool) {
	return s.FirstGapFrom(0, end)
}

// FirstGapFrom is the first range in [from, end) not in the set.
func (s *SpanSet) FirstGapFrom(from, end uint64) (g Span, ok bool) {
	next := from
	for i := s.search(from + 1); i < len(s.spans); i++ {
		sp := s.spans[i]
		if sp.Lo >= end {
			break
		}
		if sp.Lo > next {
			return Span{next, min(sp.Lo, end)}, true
		}
		next = max(next, sp.Hi)
	}
	if next < end {
		return Span{next, end}, true
	}
	return Span{}, false
}

// Missing is how many positions below end are not in the set.
func (s *SpanSet) Missing(end uint64) uint64 { return end - s.Count(end) }

func (s *SpanSet) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, sp := range s.spans {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(sp.String())
	}
	b.WriteByte('}')
	return b.String()
}

// AppendBinary appends the set's encoding: a uvarint count, then each span
// as the uvarint distance from the previous span's end to Lo and the
// uvarint length.
//
// # The SpanSet encoding
//
// It is the value of a 'coverage' row of a Postgres raw's offsets table
// (weir_offsets, internal/sink/pgsink) and each sink's coverage in the
// offset file (offsetfile.go), one sink's coverage in each. Every number
// is an unsigned LEB128 varint (encoding/binary's Uvarint: 7 bits a byte,
// least significant group first, the high bit set on every byte but the
// last; at most 10 bytes):
//
//	count                  the number of spans, n
//	n times:
//	  gap                  Lo minus the previous span's Hi (0 before the first span)
//	  length               Hi minus Lo
//
// The spans are the set's own: sorted, disjoint and not adjacent, so after
// the first span gap and length are never 0, and the first span's length
// is never 0 (its gap may be, when the set holds position 0). The empty
// set is the single byte 0x00. Nothing follows the last span in a row
// (UnmarshalBinary refuses trailing bytes); the offset file places the
// next field right after it. A decoder refuses a zero length, a zero gap
// after the first span, a count larger than the bytes left, and a span
// that would pass 2^64.
//
// Example (testdata/coverage_row.bin, TestSpanSetGoldenRow): the set
// {[0,100) [150,200) [1000,1300)} is
//
//	03        3 spans
//	00 64     gap 0,   length 100  → [0,100)
//	32 32     gap 50,  length 50   → [150,200)
//	a0 06     gap 800                (0x20 + 0x06<<7)
//	ac 02     length 300           → [1000,1300)  (0x2c + 0x02<<7)
func (s *SpanSet) AppendBinary(b []byte) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(s.spans)))
	prev := uint64(0)
	for _, sp := range s.spans {
		b = binary.AppendUvarint(b, sp.Lo-prev)
		b = binary.AppendUvarint(b, sp.Hi-sp.Lo)
		prev = sp.Hi
	}
	return b, nil
}

var errBadSpans = errors.New("bad span encoding")

// decodeSpanSet decodes what AppendBinary produced from the front of b and
// returns the rest.
func decodeSpanSet(b []byte) (SpanSet, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return SpanSet{}, nil, errBadSpans
	}
	b = b[k:]
	s := SpanSet{spans: make([]Span, 0, n)}
	prev := uint64(0)
	for i := uint64(0); i < n; i++ {
		d, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return SpanSet{}, nil, errBadSpans
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || l == 0 || (i > 0 && d == 0) {
			return SpanSet{}, nil, errBadSpans
		}
		lo := prev + d
		if lo < prev || lo+l < lo {
			return SpanSet{}, nil, errBadSpans
		}
		s.spans = append(s.spans, Span{lo, lo + l})
		prev = lo + l
		b = b[k1+k2:]
	}
	return s, b, nil
}

// UnmarshalBinary sets the set to what AppendBinary encoded in b, which
// must hold nothing else.
func (s *SpanSet) UnmarshalBinary(b []byte) error {
	set, rest, err := decodeSpanSet(b)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errBadSpans, len(rest))
	}
	*s = set
	return nil
}
