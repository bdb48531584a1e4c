package filesink

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/weir-io/weir/sink"
)

// TestEncodeBufferBounded: after a batch of large records (16 MiB, 64 KiB
// each) and after a single 4 MiB record, the encode buffer the sink keeps
// is at most 2 × EncodeChunk (docs/flow_control.md, "Buffers outside
// records"), and every record is in the files, in order. Before the
// buffer was written in chunks it kept the whole batch's encoding.
// keptBound is 2 × EncodeChunk, written out so the test builds without it.
const keptBound = 2 << 20

func TestEncodeBufferBounded(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	var want []sink.Record
	big := batch(0, 256, 64<<10)
	want = append(want, big.Records...)
	commit(t, s, big)
	if c := cap(s.buf); c > keptBound {
		t.Errorf("after a 16 MiB batch the sink keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	one := sink.NewBatch([]sink.Record{rec(256, strings.Repeat("y", 4<<20))})
	want = append(want, one.Records...)
	commit(t, s, one)
	if c := cap(s.buf); c > keptBound {
		t.Errorf("after a 4 MiB record the sink keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	small := batch(257, 10, 100)
	want = append(want, small.Records...)
	commit(t, s, small)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, want)
}

// TestValidPrefix: what recovery keeps of a file left open by a crash,
// line by line — including lines longer than its read buffer and long
// runs of junk — read through a reader that hands out 1,000 bytes at a
// time.
func TestValidPrefix(t *testing.T) {
	good := func(n int) string {
		return `{"weir_record_id":"0000000000000000000000000000000a","payload":"` + strings.Repeat("x", n) + `"}` + "\n"
	}
	short, long := good(10), good(3*recoveryBuf)
	for _, tc := range []struct {
		name string
		data string
		keep int
		bad  bool
	}{
		{"empty", "", 0, false},
		{"whole lines", short + short, 2 * len(short), false},
		{"partial last line", short + short[:20], len(short), false},
		{"zeros after", short + strings.Repeat("\x00", 3*recoveryBuf), len(short), false},
		{"junk line after", short + "junk\n", len(short), false},
		{"long lines", long + short + long, 2*len(long) + len(short), false},
		{"long partial line", short + long[:len(long)-2], len(short), false},
		{"long junk line after", short + strings.Repeat("j", 2*recoveryBuf) + "\n", len(short), false},
		{"bad then good", short + "junk\n" + short, 0, true},
		{"long junk then good", short + strings.Repeat("j", 2*recoveryBuf) + "\n" + short, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, size, err := validPrefix(iotest.HalfReader(strings.NewReader(tc.data)))
			if tc.bad {
				if err == nil {
					t.Fatalf("no error; want one for a bad line followed by a good one")
				}
				return
			}
			if err != nil || keep != int64(tc.keep) || size != int64(len(tc.data)) {
				t.Fatalf("keep %d, size %d, %v; want keep %d, size %d", keep, size, err, tc.keep, len(tc.data))
			}
		})
	}
}

// TestRecoveryReadsALineAtATime: recovering a 32 MiB file left open by a
// crash allocates about a line's room, not the file (it read the whole
// file into memory, which at a restart under load was the largest
// allocation of the process).
func TestRecoveryReadsALineAtATime(t *testing.T) {
	dir := t.TempDir()
	crashed := open(t, Options{Dir: dir, MaxAge: time.Hour, MaxBytes: 1 << 30})
	commit(t, crashed, batch(0, 512, 64<<10))
	// A crash: the file stays open (never closed) and gets a torn tail.
	names, err := filepath.Glob(filepath.Join(dir, "*"+SuffixOpen))
	if err != nil || len(names) != 1 {
		t.Fatalf("open files: %v, %v", names, err)
	}
	f, err := os.OpenFile(names[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"weir_record_id":"00`)
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := open(t, Options{Dir: dir}) // recovers the open file
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
		t.Errorf("recovering a 32 MiB file allocated %d bytes; want at most 2 MiB", alloc)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(dir)
	if err != nil || len(got) != 512 {
		t.Fatalf("%d records after recovery, %v; want 512", len(got), err)
	}
}
