package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

const universe = 160

// model is the reference: one bool per position.
type model [universe + 8]bool

func (m *model) gaps(end uint64) []Span {
	var out []Span
	for p := uint64(0); p < end; p++ {
		if m[p] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Hi == p {
			out[n-1].Hi++
		} else {
			out = append(out, Span{p, p + 1})
		}
	}
	return out
}

func checkSpanSet(t *rapid.T, s *SpanSet, m *model) {
	sp := s.spans
	for i, x := range sp {
		if x.Lo >= x.Hi {
			t.Fatalf("empty span %v in %v", x, s)
		}
		if i > 0 && sp[i-1].Hi >= x.Lo {
			t.Fatalf("spans %v and %v overlap or touch in %v", sp[i-1], x, s)
		}
	}
	for p := uint64(0); p < universe+8; p++ {
		if s.Contains(p) != m[p] {
			t.Fatalf("Contains(%d) = %v, model %v; set %v", p, s.Contains(p), m[p], s)
		}
	}
	for end := uint64(0); end <= universe+8; end += 7 {
		want := m.gaps(end)
		got := s.Gaps(end)
		if len(got) != len(want) {
			t.Fatalf("Gaps(%d) = %v, want %v (set %v)", end, got, want, s)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Gaps(%d) = %v, want %v (set %v)", end, got, want, s)
			}
		}
		g, ok := s.FirstGap(end)
		if ok != (len(want) > 0) || (ok && g != want[0]) {
			t.Fatalf("FirstGap(%d) = %v,%v want %v", end, g, ok, want)
		}
		var missing uint64
		for _, w := range want {
			missing += w.Len()
		}
		if s.Missing(end) != missing {
			t.Fatalf("Missing(%d) = %d, want %d", end, s.Missing(end), missing)
		}
	}
	var prefix uint64
	for prefix < universe+8 && m[prefix] {
		prefix++
	}
	if s.Prefix() != prefix {
		t.Fatalf("Prefix = %d, want %d (set %v)", s.Prefix(), prefix, s)
	}
}

func TestSpanSetProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s SpanSet
		var m model
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			lo := rapid.Uint64Range(0, universe).Draw(t, "lo")
			hi := rapid.Uint64Range(0, universe).Draw(t, "hi")
			if rapid.IntRange(0, 4).Draw(t, "op") == 0 {
				s.Remove(lo, hi)
				for p := lo; p < hi; p++ {
					m[p] = false
				}
			} else {
				s.Add(lo, hi)
				for p := lo; p < hi; p++ {
					m[p] = true
				}
			}
			checkSpanSet(t, &s, &m)
			from := rapid.Uint64Range(0, universe).Draw(t, "from")
			end := rapid.Uint64Range(0, universe+8).Draw(t, "end")
			g, ok := s.FirstGapFrom(from, end)
			var want Span
			wok := false
			for _, w := range m.gaps(end) {
				if w.Hi > from {
					want, wok = Span{max(w.Lo, from), w.Hi}, true
					break
				}
			}
			if ok != wok || g != want {
				t.Fatalf("FirstGapFrom(%d,%d) = %v,%v want %v,%v (set %v)", from, end, g, ok, want, wok, &s)
			}
			if s.ContainsSpan(lo, hi) != func() bool {
				for p := lo; p < hi; p++ {
					if !m[p] {
						return false
					}
				}
				return true
			}() {
				t.Fatalf("ContainsSpan(%d,%d) wrong for %v", lo, hi, &s)
			}
		}
		// Encoding round-trips.
		b, _ := s.AppendBinary(nil)
		d, rest, err := decodeSpanSet(append(b, 0xAA))
		if err != nil || len(rest) != 1 {
			t.Fatalf("decode: %v rest %d", err, len(rest))
		}
		checkSpanSet(t, &d, &m)
		var u SpanSet
		if err := u.UnmarshalBinary(b); err != nil {
			t.Fatalf("UnmarshalBinary: %v", err)
		}
		checkSpanSet(t, &u, &m)
		if err := u.UnmarshalBinary(append(b, 0)); err == nil {
			t.Fatal("UnmarshalBinary accepted a trailing byte")
		}
		// Merging two sets is the union of their models.
		var o SpanSet
		var om model
		for i := rapid.IntRange(0, 6).Draw(t, "others"); i > 0; i-- {
			lo := rapid.Uint64Range(0, universe).Draw(t, "olo")
			hi := rapid.Uint64Range(0, universe).Draw(t, "ohi")
			o.Add(lo, hi)
			for p := lo; p < hi; p++ {
				om[p] = true
			}
		}
		s.AddSet(&o)
		for p := range m {
			m[p] = m[p] || om[p]
		}
		checkSpanSet(t, &s, &m)
	})
}

func TestSpanSetDecodeRejectsJunk(t *testing.T) {
	for _, b := range [][]byte{nil, {5}, {1, 0, 0}, {2, 0, 1, 0, 1}, {1, 0x80}} {
		if _, _, err := decodeSpanSet(b); err == nil {
			t.Errorf("decodeSpanSet(%x) accepted junk", b)
		}
	}
}

// The SpanSet encoding, as documented on AppendBinary, decoded from a
// golden coverage row and written back byte for byte.
func TestSpanSetGoldenRow(t *testing.T) {
	row, err := os.ReadFile(filepath.Join("testdata", "coverage_row.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var s SpanSet
	if err := s.UnmarshalBinary(row); err != nil {
		t.Fatal(err)
	}
	want := []Span{{0, 100}, {150, 200}, {1000, 1300}}
	if !slices.Equal(s.Spans(), want) {
		t.Fatalf("decoded %v, want %v", s.Spans(), want)
	}
	b, err := s.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, row) {
		t.Fatalf("encoded % x, want % x", b, row)
	}
	var empty SpanSet
	if b, _ := empty.AppendBinary(nil); !bytes.Equal(b, []byte{0}) {
		t.Fatalf("the empty set encodes as % x", b)
	}
	for _, bad := range [][]byte{
		{0x01, 0x00, 0x00},              // a zero length
		{0x02, 0x00, 0x01, 0x00, 0x01},  // a zero gap after the first span
		{0x05, 0x00},                    // more spans than bytes
		append(slices.Clone(row), 0x00), // trailing bytes
	} {
		if err := new(SpanSet).UnmarshalBinary(bad); err == nil {
			t.Errorf("% x decoded", bad)
		}
	}
}
