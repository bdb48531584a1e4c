package filesink

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

func commitRaw(t *testing.T, s *Sink, b sink.Batch) uint64 {
	t.Helper()
	res, first, err := s.CommitRaw(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 0 {
		t.Fatalf("rejected: %v", res.Rejected)
	}
	return first
}

// checkRaw reads every position of s in windows of each size and compares
// with want (want[p] is the record at position p).
func checkRaw(t *testing.T, s *Sink, want []sink.Record) {
	t.Helper()
	ctx := context.Background()
	end, _ := s.End(ctx)
	if end != uint64(len(want)) {
		t.Fatalf("End = %d, want %d", end, len(want))
	}
	for _, window := range []int{1, 3, 7, 1000} {
		for _, start := range []uint64{0, 1, uint64(len(want) / 2), uint64(len(want))} {
			from := start
			for from < end {
				got, err := s.ReadFrom(ctx, from, window, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) == 0 || len(got) > window {
					t.Fatalf("ReadFrom(%d,%d) returned %d records below end %d", from, window, len(got), end)
				}
				for _, p := range got {
					if p.Pos != from {
						t.Fatalf("ReadFrom: position %d, want %d (no holes expected)", p.Pos, from)
					}
					if p.Record.ID != want[p.Pos].ID || string(p.Record.Payload) != string(want[p.Pos].Payload) {
						t.Fatalf("position %d holds %v, want %v", p.Pos, p.Record.ID, want[p.Pos].ID)
					}
					from++
				}
			}
			if got, err := s.ReadFrom(ctx, end, window, 0); err != nil || len(got) != 0 {
				t.Fatalf("ReadFrom(end) = %d records, %v", len(got), err)
			}
		}
	}
}

func TestRawPositionsAcrossFilesAndRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Positions: true, MaxBytes: 2000}
	s := open(t, opts)
	var want []sink.Record
	for i := 0; i < 40; i++ {
		b := batch(i*10, 1+i%7, 50+i)
		first := commitRaw(t, s, b)
		if first != uint64(len(want)) {
			t.Fatalf("batch %d first position %d, want %d", i, first, len(want))
		}
		want = append(want, b.Records...)
	}
	if n := len(files(t, dir)); n < 5 {
		t.Fatalf("only %d files: rolling did not happen", n)
	}
	for _, name := range files(t, dir) {
		if _, _, ok := parseRawName(name); !ok {
			t.Fatalf("file %s is not named by position", name)
		}
	}
	checkRaw(t, s, want)
	// Reopen without Close (a crash that keeps everything): the end is
	// re-derived from the last file.
	s2 := open(t, opts)
	checkRaw(t, s2, want)
	b := batch(9000, 5, 10)
	if first := commitRaw(t, s2, b); first != uint64(len(want)) {
		t.Fatalf("after restart first position %d, want %d", first, len(want))
	}
	want = append(want, b.Records...)
	checkRaw(t, s2, want)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	checkRaw(t, open(t, opts), want)
	// The generic reader sees raw files too.
	lines, err := ReadDir(dir)
	if err != nil || len(lines) != len(want) {
		t.Fatalf("ReadDir: %d lines, %v", len(lines), err)
	}
}

// After a power loss, every acknowledged position holds what it held, and
// the end is at least the acknowledged end.
func TestRawCrashKeepsAcknowledgedPositions(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		m := memfs.New()
		opts := Options{FS: m, Dir: "/raw", Positions: true, MaxBytes: 1500}
		s := open(t, opts)
		var want []sink.Record
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := 0; i < 15; i++ {
			b := batch(i*10, 1+rng.IntN(6), 40)
			commitRaw(t, s, b)
			want = append(want, b.Records...)
		}
		// A batch written but not acknowledged: its bytes are in the
		// page cache, not yet synced, when the power goes.
		cur := s.cur
		if cur != nil {
			_, _ = cur.f.Write(appendRecord(nil, &batch(999, 1, 40).Records[0]))
		}
		c := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepPrefix, Rand: rand.NewPCG(seed, 2)})
		r, err := New(context.Background(), Options{FS: c, Dir: "/raw", Positions: true, MaxBytes: 1500})
		if err != nil {
			t.Fatalf("seed %d: reopen: %v", seed, err)
		}
		end, _ := r.End(context.Background())
		if end < uint64(len(want)) || end > uint64(len(want))+1 {
			t.Fatalf("seed %d: end %d after crash, acknowledged %d", seed, end, len(want))
		}
		got, err := r.ReadFrom(context.Background(), 0, len(want), 0)
		if err != nil || len(got) != len(want) {
			t.Fatalf("seed %d: read %d, %v", seed, len(got), err)
		}
		for i, p := range got {
			if p.Pos != uint64(i) || p.Record.ID != want[i].ID {
				t.Fatalf("seed %d: position %d changed after crash", seed, i)
			}
		}
	}
}

// A failed fdatasync stops the raw sink (no rescue, no retry of the
// sync); reopening recovers with every acknowledged position intact.
func TestRawSyncFailureStopsUntilReopen(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	opts := Options{FS: efs, Dir: dir, Positions: true}
	s := open(t, opts)
	b1 := batch(0, 5, 10)
	commitRaw(t, s, b1)
	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Once: true})
	if _, _, err := s.CommitRaw(context.Background(), batch(100, 3, 10)); err == nil || !sink.IsTransient(err) {
		t.Fatalf("commit with failing sync: %v", err)
	}
	syncs := efs.Calls(errorfs.OpSync)
	if _, _, err := s.CommitRaw(context.Background(), batch(200, 3, 10)); err == nil || !sink.IsTransient(err) {
		t.Fatalf("commit after failure: %v, want a transient refusal", err)
	}
	if efs.Calls(errorfs.OpSync) != syncs {
		t.Fatal("sink synced again after a failed fdatasync")
	}
	if h := s.Health(context.Background()); h.State != sink.Down {
		t.Fatalf("health %v after failure", h)
	}
	r := open(t, Options{Dir: dir, Positions: true})
	end, _ := r.End(context.Background())
	// The failed batch's lines are in the page cache and may be counted
	// (they were never acknowledged, so nobody relies on them either way).
	if end != 5 && end != 8 {
		t.Fatalf("end after reopen %d", end)
	}
	b3 := batch(300, 2, 10)
	if first := commitRaw(t, r, b3); first != end {
		t.Fatalf("first after reopen %d, want %d", first, end)
	}
	got, _ := r.ReadFrom(context.Background(), 0, 5, 0)
	for i, p := range got {
		if p.Record.ID != b1.Records[i].ID {
			t.Fatalf("acknowledged position %d changed", i)
		}
	}
}

func TestRawMethodsNeedRawMode(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir()})
	if _, _, err := s.CommitRaw(context.Background(), batch(0, 1, 1)); err == nil {
		t.Fatal("CommitRaw without raw mode")
	}
	if s.Replayable() {
		t.Fatal("Replayable without raw mode")
	}
}

func TestConformanceRaw(t *testing.T) {
	for _, mem := range []bool{true, false} {
		t.Run(variant(mem), func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				return harness(t, Options{Positions: true}, mem, nil)
			})
		})
	}
}

// ReadFrom's byte bound, on the sink and on a read-only reader of its
// directory: it stops before the record past the bound, returns a first
// record larger than the bound alone, and a read from where one stopped
// goes on with the record it refused — across the files of raw.
func TestRawReadFromByteBound(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir, Positions: true, MaxBytes: 4096})
	defer s.Close()
	for i, size := range []int{100, 300, 50, 6000, 200, 200, 9000, 10} {
		commitRaw(t, s, batch(i*2, 2, size))
	}
	r, _ := openReader(t, dir)
	for _, from := range []uint64{0, 5, 13} {
		sinktest.ReadBound(t, s, from)
		sinktest.ReadBound(t, r, from)
	}
}
