package parquetsink

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
)

// listFS counts directory listings and can run a hook after each one (to
// turn a stage into Parquet under a reader) or change what it returns (to
// miss an entry, as a listing racing a rename can). With readOnly it fails
// the test on anything but reading.
type listFS struct {
	vfs.FS
	t        *testing.T
	readOnly bool
	lists    atomic.Int64
	// afterList and filter get the listing's number, from 1.
	afterList func(n int64)
	filter    func(n int64, names []string) []string
}

func (fs *listFS) ReadDir(dir string) ([]string, error) {
	names, err := fs.FS.ReadDir(dir)
	n := fs.lists.Add(1)
	if fs.filter != nil {
		names = fs.filter(n, names)
	}
	if fs.afterList != nil {
		fs.afterList(n)
	}
	return names, err
}

func (fs *listFS) refuse(op, name string) error {
	fs.t.Errorf("raw reader tried to %s %s", op, name)
	return os.ErrPermission
}

func (fs *listFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	if fs.readOnly {
		return nil, fs.refuse("create", name)
	}
	return fs.FS.Create(name, perm)
}

func (fs *listFS) OpenReadWrite(name string) (vfs.File, error) {
	if fs.readOnly {
		return nil, fs.refuse("open for writing", name)
	}
	return fs.FS.OpenReadWrite(name)
}

func (fs *listFS) Rename(a, b string) error {
	if fs.readOnly {
		return fs.refuse("rename", a)
	}
	return fs.FS.Rename(a, b)
}

func (fs *listFS) Remove(name string) error {
	if fs.readOnly {
		return fs.refuse("remove", name)
	}
	return fs.FS.Remove(name)
}

func (fs *listFS) MkdirAll(dir string, perm os.FileMode) error {
	if fs.readOnly {
		return fs.refuse("mkdir", dir)
	}
	return fs.FS.MkdirAll(dir, perm)
}

func (fs *listFS) SyncDir(dir string) error {
	if fs.readOnly {
		return fs.refuse("sync", dir)
	}
	return fs.FS.SyncDir(dir)
}

func (fs *listFS) Lock(name string) (io.Closer, error) {
	if fs.readOnly {
		return nil, fs.refuse("lock", name)
	}
	return fs.FS.Lock(name)
}

func openReader(t *testing.T, fs vfs.FS, dir string) (*RawReader, *listFS) {
	t.Helper()
	lfs := &listFS{FS: fs, t: t, readOnly: true}
	r, err := OpenRawReader(lfs, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, lfs
}

func TestRawReaderEmptyAndRefusals(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	r, _ := openReader(t, vfs.OS, dir)
	if end, err := r.End(ctx); err != nil || end != 0 {
		t.Fatalf("End of an empty directory = %d, %v", end, err)
	}
	if got, err := r.ReadFrom(ctx, 0, 10, 0); err != nil || len(got) != 0 {
		t.Fatalf("ReadFrom of an empty directory = %d records, %v", len(got), err)
	}
	if _, err := OpenRawReader(vfs.OS, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("opened a reader on a missing directory")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRawReader(vfs.OS, file); err == nil {
		t.Fatal("opened a reader on a file")
	}
	plain := t.TempDir()
	s := open(t, Options{Dir: plain})
	commit(t, s, mkRecords("plain", 3))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRawReader(vfs.OS, plain); err == nil {
		t.Fatal("opened a reader on output written without raw mode")
	}
}

// TestRawReaderFollowsWriter: while a writer commits and rolls stages into
// Parquet, a RawReader on its directory and the writer's own ReadFrom read
// everything, in order, without holes, and End never falls behind what
// was acknowledged.
func TestRawReaderFollowsWriter(t *testing.T) {
	dir := t.TempDir()
	opts := rawOpts(nil, dir)
	opts.MaxBytes = 2 << 10
	w := open(t, opts)
	r, _ := openReader(t, vfs.OS, dir)
	ctx := context.Background()

	const batches = 150
	var acked atomic.Uint64
	var final atomic.Int64
	final.Store(-1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range batches {
			recs := recsAt(acked.Load(), 1+i%6)
			res, first, err := w.CommitRaw(ctx, sink.NewBatch(recs))
			if err != nil || len(res.Rejected) != 0 || first != acked.Load() {
				t.Errorf("CommitRaw: first %d, %v; want %d", first, err, acked.Load())
				break
			}
			acked.Add(uint64(len(recs)))
		}
		final.Store(int64(acked.Load()))
	}()
	follow := func(name string, rd sink.RawReader) {
		defer wg.Done()
		var from uint64
		deadline := time.Now().Add(time.Minute)
		for {
			a := acked.Load()
			f := final.Load()
			end, err := rd.End(ctx)
			if err != nil {
				t.Errorf("%s: End: %v", name, err)
				return
			}
			if end < a {
				t.Errorf("%s: End %d behind the acknowledged end %d", name, end, a)
				return
			}
			for from < end {
				got, err := rd.ReadFrom(ctx, from, 7, 0)
				if err != nil || len(got) == 0 {
					t.Errorf("%s: ReadFrom(%d) below End %d: %d records, %v", name, from, end, len(got), err)
					return
				}
				for _, p := range got {
					if p.Pos != from || !sameRecord(p.Record, recAt(p.Pos)) {
						t.Errorf("%s: position %d (want %d) holds %v, want %v", name, p.Pos, from, p.Record.ID, recAt(p.Pos).ID)
						return
					}
					from++
				}
			}
			if f >= 0 && from >= uint64(f) {
				return
			}
			if from == a {
				time.Sleep(time.Millisecond) // let the writer move on
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: stuck at %d", name, from)
				return
			}
		}
	}
	wg.Add(2)
	go follow("RawReader", r)
	go follow("Sink", w)
	wg.Wait()
	if p, _ := rawFiles(t, vfs.OS, dir); p < 5 {
		t.Fatalf("%d Parquet files: the writer hardly rolled", p)
	}
	if end, _ := r.End(ctx); end != acked.Load() {
		t.Fatalf("RawReader End %d, writer acknowledged %d", end, acked.Load())
	}
}

// TestRawStageTurnedIntoParquetUnderRead: the writer turns the stage a
// reader has just listed into Parquet; the reader lists again and reads
// it.
func TestRawStageTurnedIntoParquetUnderRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		listAt  int64 // the listing after which the stage goes
		sinkFS  bool  // read through the writer's own ReadFrom
		endOnly bool
	}{
		{"RawReader.ReadFrom", 2, false, false},
		{"RawReader.End", 1, false, true},
		{"Sink.ReadFrom", 1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			dir := t.TempDir()
			clk := newClock()
			wfs := &listFS{FS: vfs.OS, t: t}
			opts := rawOpts(wfs, dir)
			opts.Now, opts.MaxAge = clk.Now, time.Minute
			w := open(t, opts)
			want := recsAt(0, 20)
			for i := range 4 {
				commitRaw(t, w, want[i*5:i*5+5], uint64(i*5))
			}
			var rd sink.RawReader = w
			lfs := wfs
			if !tc.sinkFS {
				rd, lfs = openReader(t, vfs.OS, dir)
			}
			var once sync.Once
			base := lfs.lists.Load()
			lfs.afterList = func(n int64) {
				if n == base+tc.listAt {
					once.Do(func() {
						clk.Add(time.Minute)
						if _, err := w.Commit(context.Background(), sink.Batch{}); err != nil { // rolls by age
							t.Error(err)
						}
					})
				}
			}
			if tc.endOnly {
				if end, err := rd.End(ctx); err != nil || end != 20 {
					t.Fatalf("End = %d, %v", end, err)
				}
			} else {
				got, err := rd.ReadFrom(ctx, 0, 100, 0)
				if err != nil || len(got) != 20 {
					t.Fatalf("ReadFrom = %d records, %v", len(got), err)
				}
				for i, p := range got {
					if p.Pos != uint64(i) || !sameRecord(p.Record, want[i]) {
						t.Fatalf("position %d: %+v", i, p)
					}
				}
			}
			lfs.afterList = nil
			if p, st := rawFiles(t, vfs.OS, dir); p != 1 || st != 0 {
				t.Fatalf("%d Parquet files and %d stages: the stage was not turned into Parquet", p, st)
			}
			if n := lfs.lists.Load() - base; n < tc.listAt+1 {
				t.Fatalf("%d listings: the read was not retried", n)
			}
			checkRaw(t, rd, want)
		})
	}
}

// TestRawReadDoesNotTrustAGapAtOnce: a listing that misses a file (as one
// racing a rename can) must not make positions look empty; a file that is
// really gone leaves positions that hold nothing, skipped.
func TestRawReadDoesNotTrustAGapAtOnce(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	opts := rawOpts(nil, dir)
	opts.MaxBytes = 1 // a Parquet file per batch
	w := open(t, opts)
	want := recsAt(0, 12)
	for i := range 4 {
		commitRaw(t, w, want[i*3:i*3+3], uint64(i*3))
	}
	r, lfs := openReader(t, vfs.OS, dir)
	middle := rawBase(3) + SuffixParquet
	base := lfs.lists.Load()
	hideOnce := func(n int64, names []string) []string {
		if n != base+2 { // the first listing of the read (End lists first)
			return names
		}
		return slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == middle })
	}
	lfs.filter = hideOnce
	got, err := r.ReadFrom(ctx, 0, 100, 0)
	if err != nil || len(got) != 12 {
		t.Fatalf("ReadFrom with a listing missing a file: %d records, %v", len(got), err)
	}
	for i, p := range got {
		if p.Pos != uint64(i) || !sameRecord(p.Record, want[i]) {
			t.Fatalf("position %d: got %d", i, p.Pos)
		}
	}
	if n := lfs.lists.Load() - base; n != 3 {
		t.Fatalf("%d listings, want 3 (End, the read, its retry)", n)
	}
	lfs.filter = nil
	if err := os.Remove(filepath.Join(dir, middle)); err != nil {
		t.Fatal(err)
	}
	for _, rd := range []sink.RawReader{r, w} {
		got, err = rd.ReadFrom(ctx, 1, 100, 0)
		if err != nil || len(got) != 8 || got[1].Pos != 2 || got[2].Pos != 6 {
			t.Fatalf("ReadFrom across a removed file: %d records, %v", len(got), err)
		}
		if got, err = rd.ReadFrom(ctx, 4, 1, 0); err != nil || len(got) != 1 || got[0].Pos != 6 {
			t.Fatalf("ReadFrom inside a removed file: %v, %v", got, err)
		}
	}
}

// TestRawReaderEndCountsTheLastStage: End counts complete frames only,
// only the new ones on each call, and counts again from the start when
// the stage is not the one it counted.
func TestRawReaderEndCountsTheLastStage(t *testing.T) {
	ctx := ctxT(t)
	m := memfs.New()
	if err := m.MkdirAll("/raw", 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("/raw", rawBase(10)+SuffixStage)
	write := func(data []byte, create bool) {
		t.Helper()
		if create {
			_ = m.Remove(path)
			f, err := m.Create(path, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		f, err := m.OpenReadWrite(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	frame := func(first uint64, n int) []byte {
		return appendFrame(nil, t0, sink.DedupToken{}, recsAt(first, n), nil)
	}
	r, _ := openReader(t, m, "/raw")
	end := func(want uint64) {
		t.Helper()
		if got, err := r.End(ctx); err != nil || got != want {
			t.Fatalf("End = %d, %v; want %d", got, err, want)
		}
	}
	write([]byte(stageMagic[:3]), true) // a stage being created
	end(10)
	write([]byte(stageMagic[3:]), false)
	end(10)
	write(frame(10, 3), false)
	end(13)
	f2 := frame(13, 2)
	write(f2[:len(f2)-3], false) // a frame being written
	end(13)
	write(f2[len(f2)-3:], false)
	end(15)
	got, err := r.ReadFrom(ctx, 10, 100, 0)
	if err != nil || len(got) != 5 || got[0].Pos != 10 || !sameRecord(got[4].Record, recAt(14)) {
		t.Fatalf("ReadFrom = %v, %v", got, err)
	}
	// The writer abandoned that stage and started it again (its frames
	// were never acknowledged): End counts the new one.
	write(append([]byte(stageMagic), frame(10, 4)...), true)
	end(14)
}

// TestRawReadKeepsParquetOpen: consecutive reads of a Parquet file open it
// once, and going back seeks instead of opening it again.
func TestRawReadKeepsParquetOpen(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	w := open(t, rawOpts(nil, dir))
	want := recsAt(0, 300)
	commitRaw(t, w, want, 0)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	efs := errorfs.New(vfs.OS)
	r, err := OpenRawReader(efs, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := filepath.Join(dir, rawBase(0)+SuffixParquet)
	if _, err := r.End(ctx); err != nil {
		t.Fatal(err)
	}
	opens := efs.CallsOn(errorfs.OpOpen, path)
	for _, from := range []uint64{0, 290, 7} {
		for p := from; p < 300; {
			got, err := r.ReadFrom(ctx, p, 13, 0)
			if err != nil || len(got) == 0 {
				t.Fatalf("ReadFrom(%d) = %d records, %v", p, len(got), err)
			}
			for _, g := range got {
				if g.Pos != p || !sameRecord(g.Record, want[p]) {
					t.Fatalf("position %d: %+v", p, g)
				}
				p++
			}
		}
	}
	if n := efs.CallsOn(errorfs.OpOpen, path) - opens; n != 1 {
		t.Fatalf("the Parquet file was opened %d times for reading", n)
	}
}
