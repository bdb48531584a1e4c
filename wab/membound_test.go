package wab

import (
	"fmt"
	"strings"
	"testing"
)

// keptBound is keptBufBytes written out, so the test builds without it.
const keptBound = 2 << 20

// TestEncodeBufferBounded: after a batch of large records (16 MiB, 64 KiB
// each, one request) and after a single 4 MiB record, the encode buffer a
// shard keeps is at most 2 MiB (docs/flow_control.md, "Buffers outside
// records"), and every record is in the segment, in order. Before the
// flusher wrote in chunks it kept the whole batch's frames.
func TestEncodeBufferBounded(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.BatchMaxRecords = 1024
	l := mustOpen(t, o)
	var want []string
	var big [][]byte
	for i := range 256 {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", 64<<10)
		big = append(big, []byte(p))
		want = append(want, p)
	}
	if err := submit(t, l, 0, Durable, 1, big...); err != nil {
		t.Fatal(err)
	}
	if c := cap(l.shards[0].buf); c > keptBound {
		t.Errorf("after a 16 MiB batch the shard keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	one := strings.Repeat("y", 4<<20)
	want = append(want, one)
	if err := submit(t, l, 0, Durable, 2, []byte(one)); err != nil {
		t.Fatal(err)
	}
	if c := cap(l.shards[0].buf); c > keptBound {
		t.Errorf("after a 4 MiB record the shard keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	want = append(want, "small")
	if err := submit(t, l, 0, Durable, 3, []byte("small")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	got := payloads(readAllSealed(t, nil, dir))
	if len(got) != len(want) {
		t.Fatalf("read %d records back, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
}
