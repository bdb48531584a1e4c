package wab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tier  func(i int) Durability
		multi int // payloads per request
	}{
		{"durable", func(int) Durability { return Durable }, 1},
		{"buffered", func(int) Durability { return Buffered }, 1},
		{"mixed", func(i int) Durability { return Durability(i % 2) }, 1},
		{"multi-record requests", func(i int) Durability { return Durability(i % 2) }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOpts(dir)
			o.Shards = 3
			l := mustOpen(t, o)
			want := map[int][]string{}
			for i := range 30 {
				shard := i % 3
				var ps [][]byte
				for j := range tc.multi {
					p := fmt.Sprintf("rec-%d-%d", i, j)
					ps = append(ps, []byte(p))
					want[shard] = append(want[shard], p)
				}
				if err := submit(t, l, shard, tc.tier(i), int64(1000+i), ps...); err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
			}
			inst := l.Instance()
			mustClose(t, l)
			if left := openSegments(t, dir); len(left) != 0 {
				t.Fatalf("open segments left after Close: %v", left)
			}
			got := map[int][]string{}
			ids := map[[16]byte]bool{}
			for _, r := range readAllSealed(t, nil, dir) {
				got[r.Shard] = append(got[r.Shard], r.Payload)
				var i int
				fmt.Sscanf(r.Payload, "rec-%d-", &i)
				if r.Durability != tc.tier(i) || r.Received != int64(1000+i) {
					t.Fatalf("record %q: durability %d received %d", r.Payload, r.Durability, r.Received)
				}
				if ids[r.ID] {
					t.Fatalf("duplicate record id for %q", r.Payload)
				}
				ids[r.ID] = true
			}
			for shard := range 3 {
				if !slices.Equal(got[shard], want[shard]) {
					t.Fatalf("shard %d: got %v, want %v", shard, got[shard], want[shard])
				}
			}
			// Reopening keeps the instance id and the records.
			l = mustOpen(t, o)
			if l.Instance() != inst {
				t.Fatal("instance id changed on reopen")
			}
			mustClose(t, l)
			if n := len(readAllSealed(t, nil, dir)); n != 30*tc.multi {
				t.Fatalf("after reopen: %d records", n)
			}
		})
	}
}

// eventLog records file-system events and acks in one order.
type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (e *eventLog) add(s string) {
	e.mu.Lock()
	e.evs = append(e.evs, s)
	e.mu.Unlock()
}

func TestDurableAckOrdering(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.New(vfs.OS)
	var log eventLog
	fs.SetHook(func(ev errorfs.Event) {
		if ev.Err == nil {
			log.add(ev.Op.String() + " " + ev.Path)
		}
	})
	o := testOpts(dir)
	o.FS = fs
	o.SegmentMaxBytes = 1024 // several new segments
	l := mustOpen(t, o)
	for i := range 40 {
		// The ack is logged inside Done, on the flusher, so that it is
		// ordered with the flusher's file-system calls.
		ch := make(chan error, 1)
		req := &Request{Durability: Durable, Payloads: [][]byte{[]byte(strings.Repeat("x", 100))}, Done: func(err error) {
			log.add(fmt.Sprintf("ack %d", i))
			ch <- err
		}}
		if err := l.Submit(context.Background(), 0, req, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)

	evs := log.evs
	acks, segs := 0, map[string]bool{}
	for i, ev := range evs {
		if !strings.HasPrefix(ev, "ack ") {
			continue
		}
		acks++
		// The last write before the ack ...
		w := -1
		for j := i - 1; j >= 0; j-- {
			if strings.HasPrefix(evs[j], "write ") && isSegFile(evs[j][len("write "):]) {
				w = j
				break
			}
		}
		if w < 0 {
			t.Fatalf("%s: no write before it", ev)
		}
		path := evs[w][len("write "):]
		segs[path] = true
		// ... was followed by an fdatasync of that file before the ack.
		synced := false
		for j := w + 1; j < i; j++ {
			if evs[j] == "sync "+path {
				synced = true
			}
		}
		if !synced {
			t.Fatalf("%s: acked before fdatasync of %s (events %v)", ev, path, evs[w:i+1])
		}
		// The segment's creation was made durable (file sync and directory
		// sync after the create) before the ack.
		c := slices.Index(evs[:i], "create "+path)
		if c < 0 {
			t.Fatalf("%s: no create of %s", ev, path)
		}
		dirSynced, fileSynced := false, false
		for j := c + 1; j < i; j++ {
			if evs[j] == "syncdir "+filepath.Dir(path) {
				dirSynced = true
			}
			if evs[j] == "sync "+path {
				fileSynced = true
			}
			if strings.HasPrefix(evs[j], "write "+path) && !(fileSynced && dirSynced) && j > c+1 {
				t.Fatalf("record written to %s before its creation was durable", path)
			}
		}
		if !dirSynced || !fileSynced {
			t.Fatalf("%s: new segment %s acked before its directory fsync", ev, path)
		}
	}
	if acks != 40 || len(segs) < 3 {
		t.Fatalf("acks %d, segments %d: test did not exercise rotation", acks, len(segs))
	}
}

func TestBufferedAcksWithoutSync(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.New(vfs.OS)
	o := testOpts(dir)
	o.FS = fs
	l := mustOpen(t, o)
	for i := range 20 {
		if err := submit(t, l, 0, Buffered, int64(i), []byte("b")); err != nil {
			t.Fatal(err)
		}
	}
	seg := filepath.Join(dir, "shard-000", SegmentName(1))
	if n := fs.CallsOn(errorfs.OpSync, seg); n != 1 {
		t.Fatalf("buffered records caused %d fdatasyncs on the segment, want only the creation's", n)
	}
	if n := fs.CallsOn(errorfs.OpWrite, seg); n != 21 {
		t.Fatalf("%d writes, want header + one per request", n)
	}
	// A Buffered request is acked even if the sync that would follow it
	// fails: make every later segment sync fail and check it is not reached.
	fs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*.wab"})
	if err := submit(t, l, 0, Buffered, 99, []byte("b")); err != nil {
		t.Fatalf("buffered request waited for an fdatasync: %v", err)
	}
	if err := submit(t, l, 0, Durable, 100, []byte("d")); err == nil {
		t.Fatal("durable request acked although fdatasync failed")
	}
	_ = l.Close(context.Background())
}

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	o := testOpts(dir)
	o.Observer = rec
	l := mustOpen(t, o)
	const writers, each = 64, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := submit(t, l, 0, Durable, int64(w*each+i), []byte(fmt.Sprint(w, "-", i))); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustClose(t, l)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	total := 0
	for _, n := range rec.batches {
		total += n
	}
	if total != writers*each {
		t.Fatalf("observer saw %d records", total)
	}
	if len(rec.batches) >= total || slices.Max(rec.batches) < 2 {
		t.Fatalf("no group commit: %d batches for %d records (max %d)", len(rec.batches), total, slices.Max(rec.batches))
	}
	if rec.syncs != len(rec.batches) {
		t.Fatalf("%d syncs for %d durable batches", rec.syncs, len(rec.batches))
	}
	t.Logf("%d records in %d batches (max %d)", total, len(rec.batches), slices.Max(rec.batches))
	if n := len(readAllSealed(t, nil, dir)); n != total {
		t.Fatalf("read back %d records", n)
	}
}

func TestRotationBySize(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.SegmentMaxBytes = 2048
	o.PreallocateBytes = 1024
	l := mustOpen(t, o)
	var want []string
	for i := range 60 {
		p := fmt.Sprintf("%03d-%s", i, strings.Repeat("p", 90))
		want = append(want, p)
		if err := submit(t, l, 0, Durable, int64(i), []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	refs, err := ListSealed(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) < 3 {
		t.Fatalf("%d sealed segments, want several", len(refs))
	}
	for i, ref := range refs {
		fi, err := os.Stat(ref.Path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > o.SegmentMaxBytes {
			t.Fatalf("%s is %d bytes, over %d", ref.Path, fi.Size(), o.SegmentMaxBytes)
		}
		if i > 0 && ref.Seq != refs[i-1].Seq+1 {
			t.Fatalf("sequence gap: %d after %d", ref.Seq, refs[i-1].Seq)
		}
		info, err := InspectSegment(vfs.OS, ref.Path)
		if err != nil || !info.OK() || !info.HasFooter {
			t.Fatalf("%s: %+v %v", ref.Path, info, err)
		}
	}
	if got := payloads(readAllSealed(t, nil, dir)); !slices.Equal(got, want) {
		t.Fatalf("order or content differs: %v", got)
	}
}

func TestRotationByAge(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.SegmentMaxAge = 100 * time.Millisecond
	l := mustOpen(t, o)
	defer mustClose(t, l)
	// Drain the notification Open sends for recovery.
	select {
	case <-l.Notify():
	default:
	}
	if err := submit(t, l, 0, Buffered, 1, []byte("lonely")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Notify():
	case <-time.After(5 * time.Second):
		t.Fatal("idle segment not sealed by age")
	}
	refs, _ := l.Sealed()
	if len(refs) != 1 {
		t.Fatalf("sealed = %v", refs)
	}
	// The next (empty) segment is never sealed.
	time.Sleep(300 * time.Millisecond)
	if refs, _ := l.Sealed(); len(refs) != 1 {
		t.Fatalf("empty segment sealed: %v", refs)
	}
	if recs, _ := readSegment(t, vfs.OS, refs[0].Path); len(recs) != 1 || recs[0].Payload != "lonely" {
		t.Fatalf("sealed holds %v", recs)
	}
}

func TestCloseSealsAndRemovesEmpty(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.Shards = 2
	l := mustOpen(t, o)
	if err := submit(t, l, 1, Buffered, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if left := openSegments(t, dir); len(left) != 0 {
		t.Fatalf("open segments after Close: %v", left)
	}
	refs, _ := ListSealed(vfs.OS, dir)
	if len(refs) != 1 || refs[0].Shard != 1 {
		t.Fatalf("sealed = %v (the empty shard 0 segment must be removed, not sealed)", refs)
	}
	if err := l.Submit(context.Background(), 0, &Request{Done: func(error) {}}, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestReopenRecoversAcked(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.Shards = 2
	o.SegmentMaxBytes = 4096
	want := fillAndCrash(t, o, 100, func(i int) Durability { return Durability(i % 2) })
	if len(openSegments(t, dir)) == 0 {
		t.Fatal("crash left no open segment to recover")
	}
	l := mustOpen(t, o)
	refs, _ := l.Sealed()
	// New records go to a fresh segment with a higher sequence.
	if err := submit(t, l, 0, Durable, 1000, []byte("after")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	var got []string
	for _, r := range readAllSealed(t, nil, dir) {
		if r.Payload != "after" {
			got = append(got, r.Payload)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("recovered %d records, want %d", len(got), len(want))
	}
	after, _ := ListSealed(vfs.OS, dir)
	if len(after) != len(refs)+1 {
		t.Fatalf("sealed before %d after %d", len(refs), len(after))
	}
}

// fillAndCrash opens a log with o, writes n records "r000", "r001", …
// round-robin over its shards in the tier tier(i) gives, every one acked,
// and crashes it (open segments left as written). It returns the payloads.
func fillAndCrash(t *testing.T, o Options, n int, tier func(i int) Durability) []string {
	t.Helper()
	l := mustOpen(t, o)
	var want []string
	for i := range n {
		p := fmt.Sprintf("r%03d", i)
		if err := submit(t, l, i%o.Shards, tier(i), int64(i), []byte(p)); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	crash(t, l)
	return want
}

// TestReopenWithFewerShards: a log left by a crash with four shards (open
// segments in every shard) is opened with two — as after an upgrade to a
// default of one shard per CPU on a 2-core machine. Every acked record of
// all four shards is recovered and listed; new records go to shards 0 and 1
// only; opened with four again, shards 2 and 3 continue their sequences.
func TestReopenWithFewerShards(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.Shards = 4
	o.SegmentMaxBytes = 4096
	want := fillAndCrash(t, o, 200, func(int) Durability { return Durable })
	if n := len(openSegments(t, dir)); n != 4 {
		t.Fatalf("crash left %d open segments, want one per shard", n)
	}
	lastSeq := func() map[int]uint64 {
		refs, err := ListSealed(vfs.OS, dir)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int]uint64{}
		for _, r := range refs {
			m[r.Shard] = max(m[r.Shard], r.Seq)
		}
		return m
	}

	o.Shards = 2
	l := mustOpen(t, o)
	if l.Shards() != 2 {
		t.Fatalf("Shards() = %d", l.Shards())
	}
	if len(openSegments(t, dir)) > 2 {
		t.Errorf("open segments after reopening with 2 shards: %v", openSegments(t, dir))
	}
	recovered := lastSeq()
	for sh := range 4 {
		if _, ok := recovered[sh]; !ok {
			t.Errorf("shard %d: nothing sealed after recovery", sh)
		}
	}
	if err := submit(t, l, 2, Durable, 1000, []byte("x")); err == nil {
		t.Error("Submit to shard 2 of a 2-shard log succeeded")
	}
	for sh := range 2 {
		if err := submit(t, l, sh, Durable, 1000, []byte(fmt.Sprintf("two-%d", sh))); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)

	o.Shards = 4
	l = mustOpen(t, o)
	for sh := range 4 {
		if err := submit(t, l, sh, Durable, 2000, []byte(fmt.Sprintf("four-%d", sh))); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	final := lastSeq()
	for sh := range 4 {
		if final[sh] <= recovered[sh] {
			t.Errorf("shard %d: last sealed seq %d, want above %d (sequence continued)", sh, final[sh], recovered[sh])
		}
	}
	var got []string
	seen := map[string]int{}
	for _, r := range readAllSealed(t, nil, dir) {
		seen[r.Payload]++
		if strings.HasPrefix(r.Payload, "r") {
			got = append(got, r.Payload)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("recovered %d records of the 4-shard log, want %d", len(got), len(want))
	}
	for _, p := range []string{"two-0", "two-1", "four-0", "four-1", "four-2", "four-3"} {
		if seen[p] != 1 {
			t.Errorf("record %q found %d times", p, seen[p])
		}
	}
}

// TestTornTail cuts the open segment at every byte of its last record and
// checks that recovery keeps exactly the records before it.
func TestTornTail(t *testing.T) {
	const n = 5
	src, data, offs := openSegmentImage(t, slices.Repeat([]Durability{Durable}, n), 1)
	lastLen := int(RecordSize(0, len("record-04-")+30))
	lastStart := int(offs[n-1])
	data = data[:lastStart+lastLen] // without a sync mark after it
	type variant struct {
		name string
		tail func(cut []byte) []byte
	}
	variants := []variant{
		{"cut", func(b []byte) []byte { return b }},
		{"cut+zeros", func(b []byte) []byte { return append(b, make([]byte, 100)...) }},
		{"cut+garbage", func(b []byte) []byte { return append(b, []byte(strings.Repeat("\xff\x01", 50))...) }},
	}
	for _, v := range variants {
		for cut := lastStart; cut <= len(data); cut++ {
			wantN := n - 1
			if cut == len(data) {
				wantN = n
				if v.name != "cut" {
					wantN = n // garbage after complete records: records kept
				}
			}
			dir := t.TempDir()
			copyFile(t, filepath.Join(src, "INSTANCE"), filepath.Join(dir, "INSTANCE"))
			file := append([]byte(nil), data[:cut]...)
			file = v.tail(file)
			if err := os.MkdirAll(filepath.Join(dir, "shard-000"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "shard-000", SegmentName(1)), file, 0o600); err != nil {
				t.Fatal(err)
			}
			lo := testOpts(dir)
			lo.PreallocateBytes = -1
			l, err := Open(context.Background(), lo)
			if err != nil {
				t.Fatalf("%s at %d: Open: %v", v.name, cut, err)
			}
			mustClose(t, l)
			recs := readAllSealed(t, nil, dir)
			if len(recs) != wantN {
				t.Fatalf("%s at %d: recovered %d records, want %d", v.name, cut, len(recs), wantN)
			}
			for i, r := range recs {
				if !strings.HasPrefix(r.Payload, fmt.Sprintf("record-%02d-", i)) {
					t.Fatalf("%s at %d: record %d = %q", v.name, cut, i, r.Payload)
				}
			}
			if len(openSegments(t, dir)) != 0 {
				t.Fatalf("open segment left")
			}
		}
	}
}

func TestTornCreationRemoved(t *testing.T) {
	for _, size := range []int{0, 10, HeaderSize} {
		dir := t.TempDir()
		path := filepath.Join(dir, "shard-000", SegmentName(7))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, testOpts(dir))
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("size %d: torn creation not removed: %v", size, err)
		}
		if err := submit(t, l, 0, Durable, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		mustClose(t, l)
		refs, _ := ListSealed(vfs.OS, dir)
		if len(refs) != 1 || refs[0].Seq != 8 {
			t.Fatalf("size %d: sealed %v, want seq 8", size, refs)
		}
	}
}

func TestSealedCorruptionFailsOpen(t *testing.T) {
	src := t.TempDir()
	so := testOpts(src)
	so.PreallocateBytes = -1 // no sync mark frames between the records
	l := mustOpen(t, so)
	for i := range 3 {
		if err := submit(t, l, 0, Durable, int64(i), []byte(fmt.Sprintf("record-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	name := SegmentName(1) + ".sealed"
	good, err := os.ReadFile(filepath.Join(src, "shard-000", name))
	if err != nil {
		t.Fatal(err)
	}
	rec := int(RecordSize(0, len("record-0")))
	footer := HeaderSize + 3*rec
	if len(good) != footer+FooterFrameSize {
		t.Fatalf("sealed segment is %d bytes, want %d", len(good), footer+FooterFrameSize)
	}
	flip := func(off int) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= 0x40; return b }
	}
	end := int64(len(good))
	// Open trusts a sealed segment's footer: it checks the header and the
	// last FooterFrameSize bytes (openOff is where it reports damage; -1:
	// damage between them, which Open does not read). InspectSegment (weir
	// verify) reads every frame and reports the first bad one (wantOff).
	cases := []struct {
		name    string
		mutate  func([]byte) []byte
		wantOff int64
		openOff int64
	}{
		{"header byte", flip(20), 0, 0},
		{"first record length", flip(HeaderSize + 2), HeaderSize, -1},
		{"second record payload", flip(HeaderSize + rec + FrameOverhead + 1), int64(HeaderSize + rec), -1},
		{"third record crc", flip(HeaderSize + 2*rec + 5), int64(HeaderSize + 2*rec), -1},
		{"footer payload", flip(footer + FrameOverhead + 7), int64(footer), int64(footer)},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, end, end + 1 - FooterFrameSize},
		{"footer cut", func(b []byte) []byte { return b[:len(b)-1] }, int64(footer), end - 1 - FooterFrameSize},
		{"footer missing", func(b []byte) []byte { return b[:footer] }, int64(footer), int64(footer) - FooterFrameSize},
		{"footer only header", func(b []byte) []byte { return b[:footer+4] }, int64(footer), int64(footer) + 4 - FooterFrameSize},
		{"footer counts too many", func(b []byte) []byte {
			return slices.Concat(b[:footer], appendFooter(nil, Footer{Records: 9, FirstReceived: 0, LastReceived: 2}))
		}, int64(footer), int64(footer)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, filepath.Join(src, "INSTANCE"), filepath.Join(dir, "INSTANCE"))
			path := filepath.Join(dir, "shard-000", name)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, c.mutate(slices.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			info, err := InspectSegment(vfs.OS, path)
			if err != nil || info.Corruption == nil || info.Corruption.Offset != c.wantOff || !info.Damaged() {
				t.Fatalf("InspectSegment: %+v, %v; want corruption at %d", info.Corruption, err, c.wantOff)
			}
			l, err := Open(context.Background(), testOpts(dir))
			if c.openOff < 0 {
				if err != nil {
					t.Fatalf("Open read past the footer's word: %v", err)
				}
				mustClose(t, l)
				return
			}
			if err == nil {
				mustClose(t, l)
				t.Fatal("Open accepted a corrupt sealed segment")
			}
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *CorruptionError", err)
			}
			if ce.Path != path || ce.Offset != c.openOff {
				t.Fatalf("corruption at %s:%d (%s), want %s:%d", ce.Path, ce.Offset, ce.Reason, path, c.openOff)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error text does not name the file: %v", err)
			}
			// The lock was released: a healthy directory opens again.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, testOpts(dir))
			mustClose(t, l)
		})
	}
}

func TestSyncFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.New(vfs.OS)
	o := testOpts(dir)
	o.FS = fs
	l := mustOpen(t, o)
	const okBefore = 4
	for i := range okBefore {
		if err := submit(t, l, 0, Durable, int64(i), []byte(fmt.Sprint("ok", i))); err != nil {
			t.Fatal(err)
		}
	}
	seg := filepath.Join(dir, "shard-000", SegmentName(1))
	syncsBefore := fs.CallsOn(errorfs.OpSync, seg)
	fs.Add(errorfs.Rule{Op: errorfs.OpSync, Path: "*.wab", Once: true, Errno: syscall.EIO})
	err := submit(t, l, 0, Durable, 100, []byte("doomed"))
	if err == nil {
		t.Fatal("batch acked although its fdatasync failed")
	}
	if !errors.Is(err, ErrShardFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Done error %v does not wrap ErrShardFailed and EIO", err)
	}
	if !errors.Is(l.ShardErr(0), ErrShardFailed) {
		t.Fatalf("ShardErr = %v", l.ShardErr(0))
	}
	// The rule fired once only: a retried fdatasync would now "succeed".
	for i := range 3 {
		err := submit(t, l, 0, Durable, int64(200+i), []byte("later"))
		if !errors.Is(err, ErrShardFailed) {
			t.Fatalf("later submit: %v, want ErrShardFailed", err)
		}
	}
	if err := l.Close(context.Background()); !errors.Is(err, ErrShardFailed) {
		t.Fatalf("Close = %v, want the shard's error", err)
	}
	if n := fs.CallsOn(errorfs.OpSync, seg); n != syncsBefore+1 {
		t.Fatalf("fdatasync called %d times after the failure, want 0 (never retried, not even at Close)", n-syncsBefore-1)
	}
	// Restart: what was acked is there.
	l = mustOpen(t, testOpts(dir))
	mustClose(t, l)
	got := payloads(readAllSealed(t, nil, dir))
	if len(got) < okBefore || !slices.Equal(got[:okBefore], []string{"ok0", "ok1", "ok2", "ok3"}) {
		t.Fatalf("after restart: %v", got)
	}
	for _, p := range got {
		if p == "later" {
			t.Fatal("a request refused by the failed shard was written")
		}
	}
}

func TestDiskFull(t *testing.T) {
	big := strings.Repeat("B", 3000)
	cases := []struct {
		name        string
		opts        func(*Options)
		rule        errorfs.Rule
		payload     string
		shardFailed bool
		// early: the rule is in place from Open on (its After lets the
		// creations of the first segments through), so that it does not
		// race with the flusher preparing the next segment after an ack.
		early bool
	}{
		{
			name:    "write with nothing written",
			rule:    errorfs.Rule{Op: errorfs.OpWrite, Path: "*.wab", Errno: syscall.ENOSPC},
			payload: "small",
		},
		{
			name:        "torn write",
			rule:        errorfs.Rule{Op: errorfs.OpWrite, Path: "*.wab", Errno: syscall.ENOSPC, Torn: true},
			payload:     "small-but-torn",
			shardFailed: true,
		},
		{
			name:    "quota",
			rule:    errorfs.Rule{Op: errorfs.OpWrite, Path: "*.wab", Errno: syscall.EDQUOT},
			payload: "small",
		},
		{
			name:    "preallocation",
			opts:    func(o *Options) { o.PreallocateBytes = 4096 },
			rule:    errorfs.Rule{Op: errorfs.OpPreallocate, Path: "*.wab", Errno: syscall.ENOSPC},
			payload: big,
		},
		{
			// Each record fills a segment: Open creates the first, each
			// acked record's seal prepares the next; the third creation
			// (prepared after the second record) and every later one fail.
			name:    "segment creation",
			opts:    func(o *Options) { o.SegmentMaxBytes = 4000 },
			rule:    errorfs.Rule{Op: errorfs.OpCreate, Path: "*.wab", Errno: syscall.ENOSPC, After: 2},
			payload: big,
			early:   true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := errorfs.New(vfs.OS)
			o := testOpts(dir)
			o.FS = fs
			if c.opts != nil {
				c.opts(&o)
			}
			if c.early {
				fs.Add(c.rule)
			}
			l := mustOpen(t, o)
			var acked []string
			for i := range 2 {
				p := fmt.Sprintf("acked-%d-%s", i, c.payload)
				if err := submit(t, l, 0, Durable, int64(i), []byte(p)); err != nil {
					t.Fatalf("before the fault: %v", err)
				}
				acked = append(acked, p)
			}
			if !c.early {
				fs.Add(c.rule)
			}
			err := submit(t, l, 0, Durable, 50, []byte("full-"+c.payload))
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("err = %v, want ErrDiskFull", err)
			}
			if got := errors.Is(err, ErrShardFailed); got != c.shardFailed {
				t.Fatalf("shard failed = %v (%v), want %v", got, err, c.shardFailed)
			}
			fs.Clear()
			err = submit(t, l, 0, Durable, 60, []byte("after-"+c.payload))
			if c.shardFailed {
				if !errors.Is(err, ErrShardFailed) {
					t.Fatalf("after torn write: %v", err)
				}
			} else {
				if err != nil {
					t.Fatalf("shard did not recover once space was back: %v", err)
				}
				acked = append(acked, "after-"+c.payload)
			}
			_ = l.Close(context.Background())
			refused := "full-" + c.payload
			if c.shardFailed {
				refused = "" // a torn write: the record may be there
			}
			reopenHolds(t, dir, acked, refused)
		})
	}
}

// reopenHolds recovers dir and checks that every acked payload is there
// and the refused one (unless empty) is not.
func reopenHolds(t *testing.T, dir string, acked []string, refused string) {
	t.Helper()
	l := mustOpen(t, testOpts(dir))
	mustClose(t, l)
	got := payloads(readAllSealed(t, nil, dir))
	for _, p := range acked {
		if !slices.Contains(got, p) {
			t.Fatalf("acked record %.20q lost; have %d records", p, len(got))
		}
	}
	if refused != "" && slices.Contains(got, refused) {
		t.Fatal("the refused record was written")
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	_, err := Open(context.Background(), testOpts(dir))
	if !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Open: %v, want vfs.ErrLocked", err)
	}
	mustClose(t, l)
	l = mustOpen(t, testOpts(dir))
	mustClose(t, l)
}

func TestSubmitErrors(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.QueueCapacity = 1
	o.MaxRecordBytes = 10
	l := mustOpen(t, o)
	ctx := context.Background()
	if err := l.Submit(ctx, 1, &Request{Done: func(error) {}}, 0); err == nil {
		t.Fatal("shard out of range accepted")
	}
	if err := l.Submit(ctx, 0, &Request{Payloads: [][]byte{make([]byte, 11)}, Done: func(error) {}}, 0); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if err := l.Submit(ctx, 0, &Request{Durability: 7, Done: func(error) {}}, 0); err == nil {
		t.Fatal("bad durability accepted")
	}
	// Block the flusher inside a Done to fill the queue.
	entered, release := make(chan struct{}), make(chan struct{})
	first := &Request{Payloads: [][]byte{[]byte("a")}, Done: func(error) { close(entered); <-release }}
	if err := l.Submit(ctx, 0, first, time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	done := make(chan error, 1)
	if err := l.Submit(ctx, 0, &Request{Payloads: [][]byte{[]byte("b")}, Done: func(err error) { done <- err }}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Submit(ctx, 0, &Request{Payloads: [][]byte{[]byte("c")}, Done: func(error) {}}, 20*time.Millisecond); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("full queue: %v, want ErrQueueTimeout", err)
	}
	// Close with an expired context: the queued request gets ErrClosed.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- l.Close(cctx) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued request at aborted Close: %v", err)
	}
	if err := <-closed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v", err)
	}
	// What was written was still sealed.
	if got := payloads(readAllSealed(t, nil, dir)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("sealed %v", got)
	}
}

func TestOrphanSidecarRemoved(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	if err := submit(t, l, 0, Durable, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	refs, _ := ListSealed(vfs.OS, dir)
	if err := WriteConfirmed(vfs.OS, refs[0].Path, 1); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "shard-000", SegmentName(99)+".confirmed")
	copyFile(t, ConfirmedPath(refs[0].Path), orphan)
	stray := filepath.Join(dir, "shard-000", "junk.tmp")
	copyFile(t, ConfirmedPath(refs[0].Path), stray)
	l = mustOpen(t, testOpts(dir))
	mustClose(t, l)
	for _, p := range []string{orphan, stray} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s not removed", p)
		}
	}
	if n, err := ReadConfirmed(vfs.OS, refs[0].Path); err != nil || n != 1 {
		t.Fatalf("kept sidecar: %d %v", n, err)
	}
}

// wbFS records the writeback a flusher starts on the files it creates.
type wbFS struct {
	vfs.FS
	mu    sync.Mutex
	calls []wbCall
}

type wbCall struct {
	path   string
	off, n int64
}

type wbFile struct {
	vfs.File
	fs *wbFS
}

func (f wbFile) StartWriteback(off, n int64) error {
	f.fs.mu.Lock()
	f.fs.calls = append(f.fs.calls, wbCall{f.Name(), off, n})
	f.fs.mu.Unlock()
	return vfs.StartWriteback(f.File, off, n)
}

func (fs *wbFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return wbFile{f, fs}, nil
}

// TestBufferedWriteback: a segment written by Buffered batches has its
// pages sent to disk in page-aligned steps of at least writebackChunk,
// each starting where the last ended and never beyond what was written;
// Durable batches, which are synced, start none.
func TestBufferedWriteback(t *testing.T) {
	for _, tc := range []struct {
		name string
		tier Durability
		want bool
	}{{"Buffered", Buffered, true}, {"Durable", Durable, false}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &wbFS{FS: vfs.OS}
			o := testOpts(t.TempDir())
			o.FS = fs
			o.PreallocateBytes = 8 << 20
			l := mustOpen(t, o)
			payload := make([]byte, 32<<10)
			const n = 160 // 5 MiB
			for i := range n {
				if err := submit(t, l, 0, tc.tier, int64(i+1), payload); err != nil {
					t.Fatal(err)
				}
			}
			// What the segment holds: header, records, and at most a few
			// sync marks.
			size := HeaderSize + n*RecordSize(0, len(payload)) + n*FrameOverhead
			mustClose(t, l)
			fs.mu.Lock()
			defer fs.mu.Unlock()
			if !tc.want {
				if len(fs.calls) != 0 {
					t.Fatalf("writeback started on a synced segment: %v", fs.calls)
				}
				return
			}
			if len(fs.calls) < 4 {
				t.Fatalf("%d writebacks for %d bytes written without fdatasync, want at least 4: %v", len(fs.calls), size, fs.calls)
			}
			next := int64(0)
			for i, c := range fs.calls {
				if c.off != next || c.off%4096 != 0 || c.n%4096 != 0 || c.n < writebackChunk || c.off+c.n > size {
					t.Fatalf("writeback %d: [%d, +%d) after %d, written %d: want page-aligned, contiguous, at least %d, within what was written",
						i, c.off, c.n, next, size, writebackChunk)
				}
				next = c.off + c.n
			}
		})
	}
}

// TestSubmitRacingClose: Submits and SubmitBatches from many goroutines race
// Close. Each request either fails at once (and Done is never called) or is
// answered exactly once; none is sent on a closed queue.
func TestSubmitRacingClose(t *testing.T) {
	for round := range 20 {
		o := testOpts(t.TempDir())
		o.Shards = 2
		o.QueueCapacity = 4
		l := mustOpen(t, o)
		var accepted, answered, doubled atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					mk := func() *Request {
						var once atomic.Bool
						return &Request{Durability: Durability(i % 2), Payloads: [][]byte{[]byte("x")}, Received: int64(i + 1),
							Done: func(error) {
								if once.Swap(true) {
									doubled.Add(1)
								}
								answered.Add(1)
							}}
					}
					var err error
					n := int64(1)
					if g%2 == 0 {
						err = l.Submit(context.Background(), g%4/2, mk(), time.Millisecond)
					} else { // a batch hand-off of three
						n = 3
						err = l.SubmitBatch(context.Background(), g%4/2, []*Request{mk(), mk(), mk()}, time.Millisecond)
					}
					if err == nil {
						accepted.Add(n)
					} else if errors.Is(err, ErrClosed) {
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if doubled.Load() != 0 || answered.Load() != accepted.Load() {
			t.Fatalf("round %d: %d Submits accepted, %d answers, %d answered twice", round, accepted.Load(), answered.Load(), doubled.Load())
		}
	}
}

// TestSubmitBatch: requests handed over together with SubmitBatch are
// written in order with single Submits around them, split across flusher
// batches when they exceed BatchMaxRecords, each answered exactly once with
// its tier's promise; a batch with a malformed request is refused whole.
func TestSubmitBatch(t *testing.T) {
	rec := &recorder{}
	o := testOpts(t.TempDir())
	o.BatchMaxRecords = 5
	o.Observer = rec
	l := mustOpen(t, o)
	var answers sync.WaitGroup
	var mu sync.Mutex
	done := map[string]int{}
	var want []string
	mk := func(name string, d Durability) *Request {
		want = append(want, name)
		answers.Add(1)
		return &Request{Durability: d, Payloads: [][]byte{[]byte(name)}, Received: int64(len(want)),
			Done: func(err error) {
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
				mu.Lock()
				done[name]++
				mu.Unlock()
				answers.Done()
			}}
	}
	ctx := context.Background()
	for round := range 4 {
		var batch []*Request
		for i := range 7 {
			batch = append(batch, mk(fmt.Sprintf("b%d-%d", round, i), Durability(i%2)))
		}
		if err := l.SubmitBatch(ctx, 0, batch, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := l.Submit(ctx, 0, mk(fmt.Sprintf("s%d", round), Durable), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	bad := []*Request{{Payloads: [][]byte{[]byte("x")}, Done: func(error) { t.Error("refused batch answered") }}, {Payloads: [][]byte{[]byte("y")}}}
	if err := l.SubmitBatch(ctx, 0, bad, time.Second); err == nil {
		t.Fatal("a batch with a request without Done was accepted")
	}
	answers.Wait()
	mustClose(t, l)
	for _, name := range want {
		if done[name] != 1 {
			t.Errorf("%s answered %d times", name, done[name])
		}
	}
	if got := payloads(readAllSealed(t, nil, o.Dir)); !slices.Equal(got, want) {
		t.Fatalf("records on disk:\n%v\nwant, in submission order:\n%v", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range rec.batches {
		if n > o.BatchMaxRecords {
			t.Fatalf("a flusher batch of %d records, BatchMaxRecords %d", n, o.BatchMaxRecords)
		}
	}
}
