package parquetsink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// recAt is the record the tests put at position p when they know it in
// advance: every field differs from its neighbours', Received carries
// nanoseconds and a non-UTC zone, payloads are binary and may be empty.
func recAt(p uint64) sink.Record {
	sum := sha256.Sum256(fmt.Appendf(nil, "pos/%d", p))
	var payload []byte
	if p%5 != 0 {
		payload = append([]byte{0, 0xff, byte(p)}, sum[:p%29]...)
	}
	zone := time.FixedZone("test", int(p%3)*3600)
	return sink.Record{
		ID: sink.RecordID(sum[:16]), Payload: payload, Durability: sink.Durability(p % 2),
		Received: t0.Add(time.Duration(p) * time.Microsecond).Add(7 * time.Nanosecond).In(zone),
		Source:   fmt.Sprintf("source-%d", p%3),
	}
}

// recsAt returns the records recAt(first), ..., recAt(first+n-1).
func recsAt(first uint64, n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		out[i] = recAt(first + uint64(i))
	}
	return out
}

func sameRecord(a, b sink.Record) bool {
	return a.ID == b.ID && bytes.Equal(a.Payload, b.Payload) && a.Source == b.Source &&
		a.Durability == b.Durability && a.Received.Equal(b.Received)
}

func rawOpts(fs vfs.FS, dir string) Options {
	return Options{FS: fs, Dir: dir, Positions: true, MaxPayloadBytes: testMaxPayload}
}

// commitRaw commits recs and wants every one committed at want.
func commitRaw(t *testing.T, s *Sink, recs []sink.Record, want uint64) {
	t.Helper()
	res, first, err := s.CommitRaw(ctxT(t), sink.NewBatch(recs))
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("CommitRaw: %+v %v", res, err)
	}
	if first != want {
		t.Fatalf("CommitRaw: first position %d, want %d", first, want)
	}
}

// checkRaw reads r back in windows of several sizes from several starts
// and wants End == len(want), want[p] at every position p, no holes, and
// nothing at End.
func checkRaw(t *testing.T, r sink.RawReader, want []sink.Record) {
	t.Helper()
	ctx := ctxT(t)
	end, err := r.End(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if end != uint64(len(want)) {
		t.Fatalf("End = %d, want %d", end, len(want))
	}
	for _, window := range []int{1, 7, 1000} {
		for _, start := range []uint64{0, 3, end / 2, end} {
			from := min(start, end)
			for from < end {
				got, err := r.ReadFrom(ctx, from, window, 0)
				if err != nil {
					t.Fatalf("ReadFrom(%d, %d): %v", from, window, err)
				}
				if len(got) == 0 || len(got) > window {
					t.Fatalf("ReadFrom(%d, %d) returned %d records below End %d", from, window, len(got), end)
				}
				for _, p := range got {
					if p.Pos != from {
						t.Fatalf("ReadFrom: position %d, want %d (no holes expected)", p.Pos, from)
					}
					if !sameRecord(p.Record, want[p.Pos]) {
						t.Fatalf("position %d holds %+v, want %+v", p.Pos, p.Record, want[p.Pos])
					}
					from++
				}
			}
			if got, err := r.ReadFrom(ctx, end, window, 0); err != nil || len(got) != 0 {
				t.Fatalf("ReadFrom(End) = %d records, %v", len(got), err)
			}
		}
	}
}

// rawFiles lists the raw files of dir on fs and checks that every name is
// raw-<first> and that each Parquet file holds exactly the positions up to
// the next file's first (no gap, no overlap).
func rawFiles(t *testing.T, fs vfs.FS, dir string) (parquets, stages int) {
	t.Helper()
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := rawDir{fs: fs, dir: dir}
	files, err := d.files()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == rawLockName {
			continue
		}
		if _, _, ok := parseRawName(n); !ok {
			t.Fatalf("file %q in a raw directory is not named by position", n)
		}
	}
	for i, f := range files {
		if !f.parquet {
			stages++
			continue
		}
		parquets++
		if i+1 == len(files) {
			continue
		}
		rows, err := parquetRows(fs, filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if f.first+uint64(rows) != files[i+1].first {
			t.Fatalf("%s holds %d rows but the next file starts at %d", f.name, rows, files[i+1].first)
		}
	}
	return parquets, stages
}

func TestRawPositionsAcrossRollsAndRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		minFiles int
	}{
		{"a file per batch", 1, 30},
		{"a few batches per file", 1 << 10, 5},
		{"one file", 64 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := rawOpts(nil, dir)
			opts.MaxBytes = tc.maxBytes
			s := open(t, opts)
			var want []sink.Record
			for i := range 30 {
				recs := recsAt(uint64(len(want)), 1+i%9)
				commitRaw(t, s, recs, uint64(len(want)))
				want = append(want, recs...)
			}
			checkRaw(t, s, want) // from stages and Parquet files
			if p, st := rawFiles(t, vfs.OS, dir); p+st < tc.minFiles {
				t.Fatalf("%d files, want at least %d", p+st, tc.minFiles)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, st := rawFiles(t, vfs.OS, dir); st != 0 {
				t.Fatalf("%d stages left after Close", st)
			}
			checkRaw(t, s, want) // after Close, from Parquet only
			s2 := open(t, opts)
			checkRaw(t, s2, want)
			recs := recsAt(uint64(len(want)), 4)
			commitRaw(t, s2, recs, uint64(len(want)))
			want = append(want, recs...)
			checkRaw(t, s2, want)
			// The generic reader sees raw files, in position order.
			got, err := ReadDir(vfs.OS, dir)
			if err != nil || len(got) != len(want) {
				t.Fatalf("ReadDir: %d records, %v", len(got), err)
			}
			for i, g := range got {
				if g.ID != want[i].ID {
					t.Fatalf("ReadDir: record %d is %v, want %v", i, g.ID, want[i].ID)
				}
			}
		})
	}
}

// TestRawRejectedRecordsGetNoPosition: positions go to committed records
// only, in batch order.
func TestRawRejectedRecordsGetNoPosition(t *testing.T) {
	s := open(t, rawOpts(nil, t.TempDir()))
	commitRaw(t, s, recsAt(0, 3), 0)
	recs := recsAt(3, 5)
	poison := recs[1]
	poison.Payload = bytes.Repeat([]byte{1}, testMaxPayload+1)
	batch := append(append([]sink.Record{recs[0]}, poison), recs[1:]...) // 6 records, 1 rejected
	res, first, err := s.CommitRaw(ctxT(t), sink.NewBatch(batch))
	if err != nil || len(res.Rejected) != 1 || res.Rejected[0].Index != 1 || first != 3 {
		t.Fatalf("CommitRaw: %+v, first %d, %v", res, first, err)
	}
	checkRaw(t, s, recsAt(0, 8))
}

// TestRawReplayedBatchKeepsPositions: the same batch committed again into
// the stage it went to is answered with the positions it was given.
func TestRawReplayedBatchKeepsPositions(t *testing.T) {
	s := open(t, rawOpts(nil, t.TempDir()))
	b := sink.NewBatch(recsAt(0, 4))
	commitRaw(t, s, b.Records, 0)
	commitRaw(t, s, recsAt(4, 2), 4)
	res, first, err := s.CommitRaw(ctxT(t), b)
	if err != nil || len(res.Rejected) != 0 || first != 0 {
		t.Fatalf("replay: %+v, first %d, %v; want first 0", res, first, err)
	}
	checkRaw(t, s, recsAt(0, 6))
}

func TestRawModeRefusals(t *testing.T) {
	ctx := ctxT(t)
	t.Run("not raw", func(t *testing.T) {
		s := open(t, Options{Dir: t.TempDir()})
		_, _, err := s.CommitRaw(ctx, sink.NewBatch(recsAt(0, 1)))
		if !errors.Is(err, ErrNotRaw) || sink.IsTransient(err) {
			t.Fatalf("CommitRaw: %v, want permanent ErrNotRaw", err)
		}
		if _, err := s.End(ctx); !errors.Is(err, ErrNotRaw) {
			t.Fatalf("End: %v", err)
		}
		if _, err := s.ReadFrom(ctx, 0, 1, 0); !errors.Is(err, ErrNotRaw) {
			t.Fatalf("ReadFrom: %v", err)
		}
		if s.Replayable() {
			t.Fatal("Replayable without raw mode")
		}
		if !open(t, rawOpts(nil, t.TempDir())).Replayable() {
			t.Fatal("not Replayable in raw mode")
		}
	})
	t.Run("second writer", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, rawOpts(nil, dir))
		_, err := New(ctx, rawOpts(nil, dir))
		if !errors.Is(err, ErrRawBusy) || !errors.Is(err, vfs.ErrLocked) {
			t.Fatalf("second raw writer: %v, want ErrRawBusy", err)
		}
		commitRaw(t, s, recsAt(0, 2), 0)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2 := open(t, rawOpts(nil, dir))
		commitRaw(t, s2, recsAt(2, 2), 2)
	})
	t.Run("position gone", func(t *testing.T) {
		dir := t.TempDir()
		opts := rawOpts(nil, dir)
		opts.MaxBytes = 1
		s := open(t, opts)
		commitRaw(t, s, recsAt(0, 3), 0)
		commitRaw(t, s, recsAt(3, 3), 3)
		if err := vfs.OS.Remove(filepath.Join(dir, rawBase(0)+SuffixParquet)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadFrom(ctx, 1, 10, 0); !errors.Is(err, sink.ErrPositionGone) {
			t.Fatalf("ReadFrom below the oldest file: %v, want ErrPositionGone", err)
		}
		got, err := s.ReadFrom(ctx, 3, 10, 0)
		if err != nil || len(got) != 3 || got[0].Pos != 3 {
			t.Fatalf("ReadFrom(3): %d records, %v", len(got), err)
		}
	})
}

// TestRawRestartAfterProcessCrash: the process dies with a stage open (the
// kernel keeps everything); the next writer takes the directory, settles
// the stage and goes on from the end.
func TestRawRestartAfterProcessCrash(t *testing.T) {
	m := memfs.New()
	opts := rawOpts(m, "/raw")
	opts.MaxBytes = 2 << 10
	s := open(t, opts)
	var want []sink.Record
	for i := range 12 {
		recs := recsAt(uint64(len(want)), 2+i%4)
		commitRaw(t, s, recs, uint64(len(want)))
		want = append(want, recs...)
	}
	if _, st := rawFiles(t, m, "/raw"); st != 1 {
		t.Fatalf("%d stages before the crash, want 1", st)
	}
	c := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll})
	s2 := open(t, rawOpts(c, "/raw"))
	if _, st := rawFiles(t, c, "/raw"); st != 0 {
		t.Fatalf("%d stages after recovery", st)
	}
	checkRaw(t, s2, want)
	commitRaw(t, s2, recsAt(uint64(len(want)), 3), uint64(len(want)))
}

// TestRawTornStageTail: a crash tore the frame being written; recovery
// drops it, and neither End nor any position counts it.
func TestRawTornStageTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail func(frame []byte) []byte
	}{
		{"half a frame", func(f []byte) []byte { return f[:len(f)/2] }},
		{"header only", func(f []byte) []byte { return f[:frameHeaderLen] }},
		{"all but the last byte", func(f []byte) []byte { return f[:len(f)-1] }},
		{"bad checksum", func(f []byte) []byte { g := bytes.Clone(f); g[len(g)-1] ^= 1; return g }},
		{"zeros", func(f []byte) []byte { return make([]byte, len(f)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := memfs.New()
			s := open(t, rawOpts(m, "/raw"))
			want := recsAt(0, 7)
			commitRaw(t, s, want[:4], 0)
			commitRaw(t, s, want[4:], 4)
			fr := appendFrame(nil, t0, sink.DedupToken{}, recsAt(7, 3), nil)
			if _, err := s.cur.f.Write(tc.tail(fr)); err != nil {
				t.Fatal(err)
			}
			c := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll})
			// A reader of the crashed directory, before recovery.
			r, err := OpenRawReader(c, "/raw")
			if err != nil {
				t.Fatal(err)
			}
			checkRaw(t, r, want)
			r.Close()
			s2 := open(t, rawOpts(c, "/raw"))
			checkRaw(t, s2, want)
			commitRaw(t, s2, recsAt(7, 2), 7)
			checkRaw(t, s2, recsAt(0, 9))
		})
	}
}

// TestRawCrashKeepsAcknowledgedPositions: power is lost at a random file
// system call while batches are committed and stages rolled into Parquet.
// Recovery must find every acknowledged position holding its record, an
// end no lower than the acknowledged end and no higher than the batch in
// flight allows, and go on from that end.
func TestRawCrashKeepsAcknowledgedPositions(t *testing.T) {
	modes := []memfs.CrashOptions{
		{Mode: memfs.CrashDropUnsynced},
		{Mode: memfs.CrashKeepPrefix},
		{Mode: memfs.CrashTornPages},
		{Mode: memfs.CrashTornPages, Junk: true},
		{Mode: memfs.CrashKeepAll},
	}
	const seeds = 8
	for _, mode := range modes {
		name := mode.Mode.String()
		if mode.Junk {
			name += "+junk"
		}
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				crashRun(t, mode, seed)
			}
		})
	}
}

func crashRun(t *testing.T, mode memfs.CrashOptions, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := memfs.New()
	efs := errorfs.New(m)
	clk := newClock()
	opts := rawOpts(efs, "/raw")
	opts.MaxBytes = 3 << 10
	opts.MaxAge = time.Minute
	opts.Now = clk.Now
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var (
		want     []sink.Record
		acked    int // positions acknowledged when the crash happened
		inFlight int // records of the batch being committed then
		clone    *memfs.FS
		calls    int
		crashAt  = rng.IntN(400)
		batchLen int
	)
	efs.SetHook(func(errorfs.Event) {
		calls++
		if clone == nil && calls == crashAt {
			mode.Rand = rand.NewPCG(seed, 8)
			clone = m.CrashClone(mode)
			acked, inFlight = len(want), batchLen
		}
	})
	for i := 0; clone == nil && i < 60; i++ {
		if i%7 == 6 {
			clk.Add(time.Minute) // roll by age too
		}
		recs := recsAt(uint64(len(want)), 1+rng.IntN(12))
		batchLen = len(recs)
		res, first, err := s.CommitRaw(context.Background(), sink.NewBatch(recs))
		if err != nil || len(res.Rejected) != 0 || first != uint64(len(want)) {
			t.Fatalf("seed %d: CommitRaw: %+v, first %d, %v", seed, res, first, err)
		}
		want = append(want, recs...)
	}
	if clone == nil {
		mode.Rand = rand.NewPCG(seed, 8)
		clone = m.CrashClone(mode)
		acked, inFlight = len(want), 0
	}
	efs.SetHook(nil)

	r, err := New(context.Background(), rawOpts(clone, "/raw"))
	if err != nil {
		t.Fatalf("seed %d (crash at call %d): recovery: %v", seed, crashAt, err)
	}
	defer r.Close()
	ctx := context.Background()
	end, _ := r.End(ctx)
	if end < uint64(acked) || end > uint64(acked+inFlight) {
		t.Fatalf("seed %d (crash at call %d): End %d after the crash; %d acknowledged, %d in flight", seed, crashAt, end, acked, inFlight)
	}
	for from := uint64(0); from < end; {
		got, err := r.ReadFrom(ctx, from, 5, 0)
		if err != nil || len(got) == 0 {
			t.Fatalf("seed %d: ReadFrom(%d): %d records, %v", seed, from, len(got), err)
		}
		for _, p := range got {
			// Positions past the acknowledged end belong to the batch
			// in flight: they may survive, holding its records.
			if p.Pos != from || !sameRecord(p.Record, recAt(p.Pos)) {
				t.Fatalf("seed %d (crash at call %d): position %d (want %d) holds %v, want %v",
					seed, crashAt, p.Pos, from, p.Record.ID, recAt(p.Pos).ID)
			}
			from++
		}
	}
	res, first, err := r.CommitRaw(ctx, sink.NewBatch(recsAt(end, 2)))
	if err != nil || len(res.Rejected) != 0 || first != end {
		t.Fatalf("seed %d: commit after recovery: first %d, %v; want %d", seed, first, err, end)
	}
	rawFiles(t, clone, "/raw")
}

// TestRawSyncFailure injects I/O failures into commits. The failed batch is
// never acknowledged (End does not move, nothing is readable at its
// positions), every acknowledged position keeps its record, the abandoned
// stage is never synced again, and the retry takes the positions the
// failed batch would have had.
func TestRawSyncFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int // records committed (into one stage) before the failure
		rules  []errorfs.Rule
		// stops: the rescue cannot finish in place, so the sink refuses
		// commits until it is reopened.
		stops bool
	}{
		{"fdatasync of a stage holding commits", 5,
			[]errorfs.Rule{{Op: errorfs.OpSync, Path: "*" + SuffixStage, Once: true}}, false},
		{"write of a stage holding commits", 5,
			[]errorfs.Rule{{Op: errorfs.OpWrite, Path: "*" + SuffixStage, Once: true, Torn: true}}, false},
		{"fdatasync of a new stage", 0,
			[]errorfs.Rule{{Op: errorfs.OpSync, Path: "*" + SuffixStage, Once: true}}, false},
		{"directory sync after creating a stage", 0,
			[]errorfs.Rule{{Op: errorfs.OpSyncDir, Once: true}}, false},
		{"header write of a new stage", 0,
			[]errorfs.Rule{{Op: errorfs.OpWrite, Path: "*" + SuffixStage, Once: true}}, false},
		{"header write of a new stage, then its removal", 0, []errorfs.Rule{
			{Op: errorfs.OpWrite, Path: "*" + SuffixStage, Once: true},
			{Op: errorfs.OpRemove, Path: "*" + SuffixStage, Once: true},
		}, true},
		{"fdatasync, then the rescue's conversion", 5, []errorfs.Rule{
			{Op: errorfs.OpSync, Path: "*" + SuffixStage, Once: true},
			{Op: errorfs.OpSync, Path: "*" + SuffixTemp, Once: true},
		}, true},
		{"fdatasync of a new stage, then its removal", 0, []errorfs.Rule{
			{Op: errorfs.OpSync, Path: "*" + SuffixStage, Once: true},
			{Op: errorfs.OpRemove, Path: "*" + SuffixStage, Once: true},
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			m := memfs.New()
			efs := errorfs.New(m)
			s := open(t, rawOpts(efs, "/raw"))
			want := recsAt(0, tc.before)
			if tc.before > 0 {
				commitRaw(t, s, want, 0)
			}
			stage := filepath.Join("/raw", rawBase(0)+SuffixStage)
			for _, r := range tc.rules {
				efs.Add(r)
			}
			failed := recsAt(uint64(tc.before), 3)
			if _, _, err := s.CommitRaw(ctx, sink.NewBatch(failed)); err == nil || !sink.IsTransient(err) {
				t.Fatalf("CommitRaw with a failure: %v, want transient", err)
			}
			if end, _ := s.End(ctx); end != uint64(tc.before) {
				t.Fatalf("End %d after the failed commit, want %d", end, tc.before)
			}
			checkRaw(t, s, want)
			syncs := efs.CallsOn(errorfs.OpSync, stage)
			if tc.stops {
				if _, _, err := s.CommitRaw(ctx, sink.NewBatch(failed)); err == nil || !sink.IsTransient(err) {
					t.Fatalf("commit after the sink stopped: %v, want a transient refusal", err)
				}
				if h := s.Health(ctx); h.State != sink.Down {
					t.Fatalf("Health %+v, want down", h)
				}
				if efs.CallsOn(errorfs.OpSync, stage) != syncs {
					t.Fatal("the abandoned stage was synced again")
				}
				checkRaw(t, s, want)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// Recovery settles the stage; the failed batch's frame
				// was written and may survive (never acknowledged).
				s = open(t, rawOpts(efs, "/raw"))
				end, _ := s.End(ctx)
				if end != uint64(tc.before) && end != uint64(tc.before+len(failed)) {
					t.Fatalf("End %d after reopening", end)
				}
				got, err := s.ReadFrom(ctx, 0, tc.before, 0)
				if err != nil || len(got) != tc.before {
					t.Fatalf("ReadFrom after reopening: %d records, %v", len(got), err)
				}
				for i, p := range got {
					if !sameRecord(p.Record, want[i]) {
						t.Fatalf("acknowledged position %d changed", i)
					}
				}
				if end != uint64(tc.before) {
					want = append(want, failed...) // it survived, unacknowledged but kept
				} else {
					commitRaw(t, s, failed, end) // the drain's retry
					want = append(want, failed...)
				}
			} else {
				commitRaw(t, s, failed, uint64(tc.before)) // the drain's retry
				want = append(want, failed...)
				if efs.CallsOn(errorfs.OpSync, stage) != syncs && tc.before > 0 {
					t.Fatal("the abandoned stage was synced again")
				}
				if h := s.Health(ctx); h.State != sink.Healthy {
					t.Fatalf("Health %+v after the retry", h)
				}
			}
			more := recsAt(uint64(len(want)), 2)
			commitRaw(t, s, more, uint64(len(want)))
			want = append(want, more...)
			checkRaw(t, s, want)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawFiles(t, m, "/raw")
			// A power loss now changes nothing: everything was synced.
			c := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
			checkRaw(t, open(t, rawOpts(c, "/raw")), want)
		})
	}
}

func TestConformanceRaw(t *testing.T) {
	rawOnly := func(recs []Record) error {
		for _, r := range recs {
			if !strings.HasPrefix(r.Pos.File, rawPrefix) {
				return fmt.Errorf("file %s is not a raw file", r.Pos.File)
			}
		}
		return nil
	}
	for _, mem := range []bool{true, false} {
		t.Run(variant(mem), func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
				return harness(t, rawOpts(nil, ""), mem, rawOnly)
			})
		})
	}
}

// ReadFrom's byte bound, on the sink and on a read-only reader of its
// directory, in Parquet files and in the stage: it stops before the
// record past the bound, returns a first record larger than the bound
// alone, and a read from where one stopped goes on with the record it
// refused (seeking back in a Parquet file, inside a frame in a stage).
func TestRawReadFromByteBound(t *testing.T) {
	dir := t.TempDir()
	opts := rawOpts(vfs.OS, dir)
	opts.MaxBytes = 16 << 10
	s, err := New(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := []int{100, 300, 50, 6000, 200, 200, 9000, 10}
	for i := range 3 * len(sizes) / 2 {
		recs := recsAt(uint64(2*i), 2)
		for j := range recs {
			recs[j].Payload = make([]byte, sizes[(2*i+j)%len(sizes)])
		}
		commitRaw(t, s, recs, uint64(2*i))
	}
	if parquets, stages := rawFiles(t, vfs.OS, dir); parquets == 0 || stages == 0 {
		t.Fatalf("%d Parquet files and %d stages; the test wants both", parquets, stages)
	}
	r, err := OpenRawReader(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, from := range []uint64{0, 5, 13, 19} {
		sinktest.ReadBound(t, s, from)
		sinktest.ReadBound(t, r, from)
	}
}
