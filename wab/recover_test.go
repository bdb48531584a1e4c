package wab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// frameOffsets lists the offset of every record frame of a segment file
// (sync mark frames may sit between them).
func frameOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	r, err := OpenSegment(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var offs []int64
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		offs = append(offs, r.Offset()-RecordSize(len(rec.Meta), len(rec.Payload)))
	}
	return offs
}

// openSegmentImage writes records into a fresh WAB directory, one request
// (so one batch, one fdatasync when Durable) per element of reqs, and stops
// it like a crash; it returns the directory, the open segment's bytes and
// the offset of every record frame in it.
func openSegmentImage(t *testing.T, reqs []Durability, perReq int) (string, []byte, []int64) {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	n := 0
	for _, d := range reqs {
		var ps [][]byte
		for range perReq {
			ps = append(ps, []byte(fmt.Sprintf("record-%02d-%s", n, strings.Repeat("x", 30))))
			n++
		}
		if err := submit(t, l, 0, d, int64(n), ps...); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, l)
	path := filepath.Join(dir, "shard-000", SegmentName(1))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return dir, data, frameOffsets(t, path)
}

// reopen writes data as the open segment of a copy of dir and runs Open.
func reopen(t *testing.T, src string, data []byte) (string, []readRec, error) {
	t.Helper()
	return reopenObserved(t, src, data, nil)
}

// reopenObserved is reopen with an Observer given to Open.
func reopenObserved(t *testing.T, src string, data []byte, obs Observer) (string, []readRec, error) {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, filepath.Join(src, "INSTANCE"), filepath.Join(dir, "INSTANCE"))
	path := filepath.Join(dir, "shard-000", SegmentName(1))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := testOpts(dir)
	if obs != nil {
		opts.Observer = obs
	}
	l, err := Open(context.Background(), opts)
	if err != nil {
		return path, nil, err
	}
	mustClose(t, l)
	return path, readAllSealed(t, nil, dir), nil
}

// cutObserver records the torn tails Open reports.
type cutObserver struct {
	cuts [][2]int // kept, validAfter
}

func (o *cutObserver) Batch(int, int, int, time.Duration) {}
func (o *cutObserver) Sealed(SegmentRef, uint64, int64)   {}
func (o *cutObserver) QueueDepth(int, int)                {}

func (o *cutObserver) TailCut(_ int, kept, validAfter int) {
	o.cuts = append(o.cuts, [2]int{kept, validAfter})
}

// TestOpenSegmentDamageRefused: damage in the middle of an open segment,
// followed by records written after an fdatasync that covered it, is not a
// torn tail. Open refuses to start, naming the file and the offset, instead
// of cutting every later (acknowledged) record.
func TestOpenSegmentDamageRefused(t *testing.T) {
	// Six Durable requests, one record each: six batches, six syncs.
	src, data, offs := openSegmentImage(t, slices.Repeat([]Durability{Durable}, 6), 1)
	if len(offs) != 6 {
		t.Fatalf("%d frames, want 6", len(offs))
	}
	third := offs[2]
	cases := []struct {
		name   string
		mutate func(b []byte)
	}{
		{"payload bit", func(b []byte) { b[third+FrameOverhead+3] ^= 0x08 }},
		{"crc byte", func(b []byte) { b[third+5] ^= 0xff }},
		{"length says past the end", func(b []byte) { b[third+1] ^= 0x10 }},
		{"length says too short", func(b []byte) { binary.BigEndian.PutUint32(b[third:], 3) }},
		{"frame zeroed", func(b []byte) { clear(b[third:offs[3]]) }},
		{"two frames zeroed", func(b []byte) { clear(b[offs[1]:offs[3]]) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := slices.Clone(data)
			c.mutate(img)
			path, recs, err := reopen(t, src, img)
			if err == nil {
				t.Fatalf("Open cut a damaged open segment and kept %d of 6 records", len(recs))
			}
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *CorruptionError", err)
			}
			wantOff := third
			if c.name == "two frames zeroed" {
				wantOff = offs[1]
			}
			if ce.Path != path || ce.Offset != wantOff {
				t.Fatalf("corruption at %s:%d, want %s:%d (%v)", ce.Path, ce.Offset, path, wantOff, err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", wantOff)) {
				t.Fatalf("error does not name file and offset: %v", err)
			}
			if got, _ := os.ReadFile(path); !slices.Equal(got, img) {
				t.Fatal("Open modified the damaged segment")
			}
		})
	}
}

// TestOpenSegmentTornTailCut: what a crash leaves of writes never synced is
// still cut, whatever follows it: nothing, zeros (a page never written),
// garbage, or records of the same unsynced writes (pages written out of
// order before a power loss).
func TestOpenSegmentTornTailCut(t *testing.T) {
	// Two Durable requests, then one Buffered request of four records:
	// the last batch is written but never synced; its first frame carries
	// the sync mark (the batch before it was synced).
	src, data, offs := openSegmentImage(t, []Durability{Durable, Durable, Buffered}, 4)
	if len(offs) != 12 {
		t.Fatalf("%d frames, want 12", len(offs))
	}
	unsynced := offs[9] // the second record of the unsynced batch
	cases := []struct {
		name  string
		image func() []byte
		want  int
	}{
		{"cut mid-frame", func() []byte { return slices.Clone(data[:offs[11]+5]) }, 11},
		{"zeros after", func() []byte { return slices.Concat(data[:offs[11]+5], make([]byte, 4096)) }, 11},
		{"garbage after", func() []byte { return slices.Concat(data[:offs[11]+5], []byte(strings.Repeat("\xff\x01", 99))) }, 11},
		{"unsynced page lost, later ones written", func() []byte {
			b := slices.Clone(data)
			clear(b[unsynced : unsynced+20])
			return b
		}, 9},
		{"unsynced bytes garbled, later ones written", func() []byte {
			b := slices.Clone(data)
			for i := unsynced; i < offs[10]; i++ {
				b[i] ^= 0x5a
			}
			return b
		}, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := &cutObserver{}
			_, recs, err := reopenObserved(t, src, c.image(), obs)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if len(recs) != c.want {
				t.Fatalf("recovered %d records, want %d", len(recs), c.want)
			}
			// The observer hears of the cut; the pages written after a
			// lost one are valid records dropped with it.
			if len(obs.cuts) != 1 || obs.cuts[0][0] != c.want || (c.want == 9 && obs.cuts[0][1] == 0) {
				t.Fatalf("cuts reported %v, want one keeping %d", obs.cuts, c.want)
			}
			for i, r := range recs {
				if !strings.HasPrefix(r.Payload, fmt.Sprintf("record-%02d-", i)) {
					t.Fatalf("record %d = %q", i, r.Payload)
				}
			}
		})
	}
}

// TestOpenSegmentWithoutSyncMarks: a segment written before sync marks
// existed (header flags 0) cannot tell unsynced bytes from durable ones, so
// any valid frame after a bad one makes Open refuse.
func TestOpenSegmentWithoutSyncMarks(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, testOpts(src))
	mustClose(t, l)
	h := Header{Version: Version, Shard: 0, Seq: 1, UID: 7, Created: 1}
	b := make([]byte, HeaderSize)
	encodeHeader(b, h)
	var offs []int64
	for i := range 4 {
		offs = append(offs, int64(len(b)))
		b = appendRecord(b, Durable, int64(i), nil, []byte(fmt.Sprintf("old-%d", i)))
	}
	damaged := slices.Clone(b)
	damaged[offs[1]+FrameOverhead] ^= 1
	if _, _, err := reopen(t, src, damaged); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", offs[1])) {
		t.Fatalf("Open of a damaged unmarked segment: %v, want corruption at %d", err, offs[1])
	}
	_, recs, err := reopen(t, src, b[:len(b)-3])
	if err != nil || len(recs) != 3 {
		t.Fatalf("torn unmarked segment: %d records, %v; want 3", len(recs), err)
	}
}

// TestIdleSyncMark: a flusher that goes idle after a synced batch writes a
// sync mark frame, so that damage inside that last batch (one request of
// several records here, so no later batch marks it) is refused too.
func TestIdleSyncMark(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	var ps [][]byte
	for i := range 4 {
		ps = append(ps, []byte(fmt.Sprintf("one-batch-%d", i)))
	}
	if err := submit(t, l, 0, Durable, 1, ps...); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shard-000", SegmentName(1))
	end := int64(HeaderSize) + 4*RecordSize(0, len("one-batch-0"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == end+FrameOverhead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment is %d bytes, want %d records and a sync mark (%d)", fi.Size(), end, end+FrameOverhead)
		}
		time.Sleep(time.Millisecond)
	}
	crash(t, l)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	offs := frameOffsets(t, path)
	data[offs[1]+FrameOverhead] ^= 4
	_, _, err = reopen(t, dir, data)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != offs[1] {
		t.Fatalf("Open of a segment damaged in its last, marked batch: %v; want corruption at %d", err, offs[1])
	}
}
