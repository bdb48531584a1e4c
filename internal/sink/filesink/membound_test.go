package filesink

import (
	"runtime"
	"strings"
	"testing"

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

// TestRecoverReadsALineAtATime: finishing a file a crash left open —
// 32 MiB of 64 KiB records, read at start, before any budget — allocates
// a few line buffers, not the file (docs/flow_control.md, "Buffers
// outside records"), and keeps every record. Recovery used to read the
// whole file into memory (up to MaxBytes, 128 MiB by default, and twice
// that while the buffer grew): the restarted process of the memory-bound
// test peaked at 306 MiB against a 230 MiB bound before its budget held
// anything.
func TestRecoverReadsALineAtATime(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	want := batch(0, 512, 64<<10)
	commit(t, s, want)
	// A crash: s is never closed, its file stays .open.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s2 := open(t, Options{Dir: dir})
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("recovering a 32 MiB file allocated %d bytes; want at most 4 MiB", got)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, got, want.Records)
}
