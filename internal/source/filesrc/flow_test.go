package filesrc_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/source"
)

// TestPauseStopsReading: a paused file source reads nothing of what is
// appended meanwhile; resumed, it reads it all, once.
func TestPauseStopsReading(t *testing.T) {
	e := newEnv(t)
	f := e.create("a.log")
	e.appendLines(f, 100, 0)
	g := &enginetest.CountGate{Inner: e.check}
	s := e.source(nil)
	r := e.start(s, g)
	e.waitDurable()

	s.Pause()
	s.Pause()
	// The loop in flight when it paused finishes within a poll interval
	// (10ms); give it ten.
	time.Sleep(100 * time.Millisecond)
	written := g.N.Load()
	e.appendLines(f, 50, 0)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if n := g.N.Load(); n != written {
			t.Fatalf("while paused %d lines were written", n-written)
		}
	}
	if len(e.check.Missing()) != 50 {
		t.Fatalf("%d lines missing while paused, want 50", len(e.check.Missing()))
	}
	s.Resume()
	s.Resume()
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
}

// TestStagedReadAhead: the read-ahead derived from a prefetch bound.
func TestStagedReadAhead(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name     string
		prefetch int64
		ratio    float64
		maxLine  int
		want     int
	}{
		{"large budget: the default", 128 * mib, flow.DefaultColdRatio, mib, filesrc.DefaultMaxBatchBytes},
		{"small budget", 8 * mib, flow.DefaultColdRatio, 64 * kib, 2 * mib},
		{"a ratio below 1 counts as 1", 2 * mib, 0.5, 64 * kib, 2 * mib},
		{"never below the longest line", 64 * kib, flow.DefaultColdRatio, mib, mib + 1},
		{"a longest line above the default", 128 * mib, 1, 16 * mib, 16*mib + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := filesrc.StagedReadAhead(tc.prefetch, tc.ratio, tc.maxLine); got != tc.want {
				t.Fatalf("StagedReadAhead(%d, %v, %d) = %d, want %d", tc.prefetch, tc.ratio, tc.maxLine, got, tc.want)
			}
		})
	}
}

// TestReadAheadBoundsBatches: with a prefetch bound, no gate write holds
// more line bytes than the derived read-ahead, and everything is read.
func TestReadAheadBoundsBatches(t *testing.T) {
	e := newEnv(t)
	f := e.create("a.log")
	e.appendLines(f, 5000, 0) // ~150 KiB
	const prefetch, maxLine = 64 << 10, 1000
	readAhead := filesrc.StagedReadAhead(prefetch, flow.DefaultColdRatio, maxLine) // 16 KiB
	est := flow.NewEstimator(16)
	g := &enginetest.CountGate{Inner: e.check}
	r := e.start(e.source(func(o *filesrc.Options) {
		o.Prefetch, o.Estimator, o.MaxLineBytes = prefetch, est, maxLine
		o.MaxBatchRecords = 50 // enough batches for the estimator to trust its samples
	}), g)
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
	writes := g.Writes()
	if len(writes) < 5 {
		t.Fatalf("%d writes for ~150 KiB with a read-ahead of %d", len(writes), readAhead)
	}
	for i, w := range writes {
		if n := w.Bytes + int64(w.Records); n > int64(readAhead) { // lines and their newlines
			t.Fatalf("write %d holds %d bytes of lines, read-ahead %d", i, n, readAhead)
		}
	}
	// A line is held as read: nothing in proportion to its size beyond it.
	if got := est.Ratio(); got != 1 {
		t.Fatalf("the estimator's ratio is %v after %d batches of lines, want 1", got, len(writes))
	}
}

// TestLineLongerThanTheBatchBytes: a line longer than MaxBatchBytes (but
// within MaxLineBytes) is still read — the read-ahead grows to hold it —
// instead of stopping the source at it for good.
func TestLineLongerThanTheBatchBytes(t *testing.T) {
	e := newEnv(t)
	f := e.create("a.log")
	e.lines++
	long := strings.Repeat("L", 500)
	dev, ino, err := filesrc.Identify(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	e.check.ExpectPayload([]byte(long), enginetest.Position{Source: srcName, Partition: filesrc.FileKey(dev, ino, 0), Offset: 0})
	write(t, f, long+"\n")
	e.appendLines(f, 10, 0)
	r := e.start(e.source(func(o *filesrc.Options) { o.MaxBatchBytes, o.MaxLineBytes = 100, 1000 }), e.check)
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
}

// TestOriginHoldsMemoryPerBatch: a source that is its own raw asks Admit
// for each batch before the origin makes it durable, and releases it
// only after OnDurable has had it.
func TestOriginHoldsMemoryPerBatch(t *testing.T) {
	var mu sync.Mutex
	var held, admits, releases int
	var e *originEnv
	e = newOriginEnv(t, func(o *filesrc.Options) {
		o.MaxBatchRecords = 10
		o.Admit = func(_ context.Context, recs []source.Record) (func(), error) {
			mu.Lock()
			defer mu.Unlock()
			held += len(recs)
			admits++
			return func() {
				mu.Lock()
				defer mu.Unlock()
				held -= len(recs)
				releases++
			}, nil
		}
	})
	var bad atomic.Int64
	e.onDurable = func() {
		mu.Lock()
		defer mu.Unlock()
		if held == 0 {
			bad.Add(1)
		}
	}
	f := e.create("a.log")
	all := lines(t, f, "x", 95)
	r := e.start()
	e.waitRecords(len(all))
	r.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	if n := e.batchCount(); admits != n || releases != n || held != 0 || n < 10 || bad.Load() != 0 {
		t.Fatalf("%d batches, %d admitted, %d released, %d records still held, %d offered unheld", n, admits, releases, held, bad.Load())
	}
}
