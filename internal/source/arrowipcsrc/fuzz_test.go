package arrowipcsrc

import (
	"bytes"
	"slices"
	"testing"
)

var fuzzLimits = limits{maxMeta: 1 << 16, maxBody: 1 << 20, maxRows: 1 << 12}

// FuzzIPCReader feeds arbitrary bytes to the IPC reader, whole and in two
// parts. It must never panic or fail to advance (readAll bounds its
// steps), must read the same bytes the same way twice, and reading a
// prefix and then the rest must yield what reading the whole yields, up to
// where the prefix's reading finished the file.
func FuzzIPCReader(f *testing.F) {
	for _, file := range []bool{false, true} {
		b := writeIPC(f, file, 3, 0, 5)
		f.Add(b, uint16(len(b)/2))
		f.Add(b[:len(b)-3], uint16(40))
		bad := bytes.Clone(b)
		bad[len(bad)/2] ^= 0xff
		f.Add(bad, uint16(len(bad)/3))
	}
	// The schema only in the footer (Arrow JS).
	nf := schemaInFooterOnly(f, 2, 3)
	f.Add(nf, uint16(len(nf)-20))
	f.Add([]byte{}, uint16(0))
	f.Add([]byte("ARROW1\x00\x00"), uint16(3))
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		r := bytes.NewReader(b)
		size := int64(len(b))
		whole := readAll(t, newReader(r, fuzzLimits), size)
		if again := readAll(t, newReader(r, fuzzLimits), size); !slices.Equal(whole, again) {
			t.Fatalf("the same bytes read twice differ:\n%v\n%v", whole, again)
		}
		checkSteps(t, whole, size)

		k := min(int64(cut), size)
		rd := newReader(r, fuzzLimits)
		first := readAll(t, rd, k)
		parts := first
		last := first[len(first)-1]
		if last.kind == evIncomplete {
			parts = append(parts[:len(parts)-1], readAll(t, rd, size)...)
		}
		// The prefix may have finished the file (a stream's end marker
		// with bytes after it yet unwritten) or read its broken rest: the
		// parts agree with the whole up to there.
		n := len(parts)
		if last.kind != evIncomplete {
			n = len(first) - 1
			if p := first[max(n-1, 0)]; n > 0 && p.kind == evUndecodable && p.batch == -1 && p.end == k {
				n-- // the rest of the prefix: the whole's rest is longer
			}
		}
		for i := 0; i < n; i++ {
			if i >= len(whole) || parts[i] != whole[i] {
				t.Fatalf("read in two parts (cut at %d) differs from the whole at step %d:\nparts %v\nwhole %v", k, i, parts, whole)
			}
		}
	})
}

// checkSteps checks that steps advance through the bytes: each starts at
// or after the previous end and ends after it starts, and record batch
// indexes increase.
func checkSteps(t *testing.T, steps []step, size int64) {
	t.Helper()
	var end int64
	batch := int64(-1)
	for _, s := range steps {
		if s.kind != evBatch && s.kind != evUndecodable {
			continue
		}
		if s.off < end || s.end <= s.off || s.end > size {
			t.Fatalf("step %v does not advance past %d within %d bytes: %v", s, end, size, steps)
		}
		if s.batch >= 0 {
			if s.batch <= batch {
				t.Fatalf("batch index %d after %d: %v", s.batch, batch, steps)
			}
			batch = s.batch
		}
		end = s.end
	}
}
