package drain

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// openLog opens a write-ahead buffer that never seals by age.
func openLog(t *testing.T, dir string) *wab.Log {
	t.Helper()
	l, err := wab.Open(context.Background(), wab.Options{Dir: dir, Shards: 1, SegmentMaxAge: -1, PreallocateBytes: 1 << 20})
	if err != nil {
		t.Fatalf("wab.Open: %v", err)
	}
	return l
}

// submit writes payloads to shard 0, one request each, alternating tiers,
// and waits for every acknowledgement.
func submit(t *testing.T, l *wab.Log, payloads ...string) {
	t.Helper()
	var wg sync.WaitGroup
	for i, p := range payloads {
		wg.Add(1)
		req := &wab.Request{Durability: wab.Durability(i % 2), Payloads: [][]byte{[]byte(p)}, Received: time.Now().UnixNano(),
			Done: func(err error) {
				if err != nil {
					t.Errorf("ack of %s: %v", p, err)
				}
				wg.Done()
			}}
		if err := l.Submit(context.Background(), 0, req, time.Second); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	wg.Wait()
}

func delivered(s *scriptSink) map[string]int {
	out := map[string]int{}
	for _, b := range s.got() {
		for _, p := range payloadsOf(b) {
			out[p]++
		}
	}
	return out
}

// TestTailDeliveredBeforeSeal: records acknowledged into an open segment
// reach the sink without a seal; once the segment is sealed (at Close)
// and drained, nothing is delivered twice and the segment is removed.
func TestTailDeliveredBeforeSeal(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	s := &scriptSink{max: 100}
	opts := fastOptions(dir, l, s, nil)
	opts.Linger = time.Millisecond
	r := start(t, opts)

	submit(t, l, payloads("a", 7)...)
	waitFor(t, "the open segment's records in the sink", func() bool { return len(delivered(s)) == 7 })
	if refs, _ := l.Sealed(); len(refs) != 0 {
		t.Fatalf("a segment was sealed: %v", refs)
	}
	// A second drain run (a restart) resumes after what was confirmed.
	r.stop(t)
	submit(t, l, payloads("b", 5)...)
	r = start(t, opts)
	waitFor(t, "the records written after the restart", func() bool { return len(delivered(s)) == 12 })
	r.stop(t)

	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	src := newDirSource(dir)
	refs, _ := src.Sealed()
	if len(refs) != 1 {
		t.Fatalf("sealed segments after Close: %v", refs)
	}
	r = start(t, fastOptions(dir, src, s, nil))
	waitFor(t, "the sealed segment removed", func() bool { return !exists(refs[0].Path) })
	r.stop(t)
	for p, n := range delivered(s) {
		if n != 1 {
			t.Errorf("%s delivered %d times", p, n)
		}
	}
	if got := len(delivered(s)); got != 12 {
		t.Errorf("delivered %d distinct records, want 12", got)
	}
}

// TestTailLinger: records that trickle into an open segment within the
// linger go out in one sub-batch; without a linger each goes out alone.
func TestTailLinger(t *testing.T) {
	for _, tc := range []struct {
		name       string
		linger     time.Duration
		maxBatches int
	}{
		{"linger", 400 * time.Millisecond, 1},
		{"none", -1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir)
			defer l.Close(context.Background())
			s := &scriptSink{max: 100}
			opts := fastOptions(dir, l, s, nil)
			opts.Linger = tc.linger
			r := start(t, opts)
			for i := range 5 {
				submit(t, l, fmt.Sprintf("r-%d", i))
				if tc.linger < 0 {
					waitFor(t, "the record delivered", func() bool { return len(delivered(s)) == i+1 })
				}
			}
			waitFor(t, "every record delivered", func() bool { return len(delivered(s)) == 5 })
			r.stop(t)
			if n := len(s.got()); n < 1 || n > tc.maxBatches {
				t.Errorf("%d sub-batches, want 1..%d", n, tc.maxBatches)
			}
		})
	}
}

// TestSidecarPastPowerLossCut: a sealed segment holding fewer records than
// its sidecar counts — its Buffered tail delivered from the open segment,
// then cut by a power loss — is removed without delivering anything again.
func TestSidecarPastPowerLossCut(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeSegment(t, dir, 0, 1, payloads("p", 3)...)
	if err := wab.WriteProgress(vfs.OS, path, wab.Progress{Records: 5, Offset: 4096}); err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{max: 100}
	r := start(t, fastOptions(dir, newDirSource(dir), s, nil))
	waitFor(t, "the segment removed", func() bool { return !exists(path) })
	r.stop(t)
	if b := s.got(); len(b) != 0 {
		t.Fatalf("delivered again: %v", b)
	}
	if exists(wab.ConfirmedPath(path)) {
		t.Error("sidecar left behind")
	}
}
