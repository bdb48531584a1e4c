package filesink

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// readOnlyFS fails the test on anything but reading, and can run a hook
// after each directory listing (to rename a file under the reader).
type readOnlyFS struct {
	vfs.FS
	t          *testing.T
	afterList  func()
	listsCount atomic.Int64
}

func (fs *readOnlyFS) refuse(op, name string) error {
	fs.t.Errorf("raw reader tried to %s %s", op, name)
	return os.ErrPermission
}

func (fs *readOnlyFS) Create(name string, _ os.FileMode) (vfs.File, error) {
	return nil, fs.refuse("create", name)
}
func (fs *readOnlyFS) OpenReadWrite(name string) (vfs.File, error) {
	return nil, fs.refuse("open for writing", name)
}
func (fs *readOnlyFS) Rename(a, _ string) error               { return fs.refuse("rename", a) }
func (fs *readOnlyFS) Remove(name string) error               { return fs.refuse("remove", name) }
func (fs *readOnlyFS) MkdirAll(d string, _ os.FileMode) error { return fs.refuse("mkdir", d) }
func (fs *readOnlyFS) SyncDir(d string) error                 { return fs.refuse("sync", d) }
func (fs *readOnlyFS) Lock(name string) (io.Closer, error)    { return nil, fs.refuse("lock", name) }

func (fs *readOnlyFS) ReadDir(dir string) ([]string, error) {
	names, err := fs.FS.ReadDir(dir)
	fs.listsCount.Add(1)
	if fs.afterList != nil {
		fs.afterList()
	}
	return names, err
}

func openReader(t *testing.T, dir string) (*RawReader, *readOnlyFS) {
	t.Helper()
	fs := &readOnlyFS{FS: vfs.OS, t: t}
	r, err := OpenRawReader(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, fs
}

// readAll reads [from, to) in windows of n and checks each record against
// want.
func readAll(t *testing.T, r *RawReader, from, to uint64, n int, want []sink.Record) {
	t.Helper()
	ctx := context.Background()
	for from < to {
		got, err := r.ReadFrom(ctx, from, n, 0)
		if err != nil {
			t.Fatalf("ReadFrom(%d): %v", from, err)
		}
		if len(got) == 0 {
			t.Fatalf("ReadFrom(%d) returned nothing below %d", from, to)
		}
		for _, p := range got {
			if p.Pos >= to {
				return
			}
			if p.Pos != from {
				t.Fatalf("position %d, want %d", p.Pos, from)
			}
			if p.Record.ID != want[p.Pos].ID || string(p.Record.Payload) != string(want[p.Pos].Payload) {
				t.Fatalf("position %d holds %v, want %v", p.Pos, p.Record.ID, want[p.Pos].ID)
			}
			from++
		}
	}
}

func TestRawReaderEmptyAndMissingDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, _ := openReader(t, dir)
	if end, err := r.End(ctx); err != nil || end != 0 {
		t.Fatalf("End of an empty dir = %d, %v", end, err)
	}
	if got, err := r.ReadFrom(ctx, 0, 10, 0); err != nil || len(got) != 0 {
		t.Fatalf("ReadFrom of an empty dir = %d records, %v", len(got), err)
	}
	if _, err := OpenRawReader(vfs.OS, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("opened a reader on a missing directory")
	}
	if files(t, dir) != nil {
		t.Fatalf("the reader left files: %v", files(t, dir))
	}
	// Output written without raw mode has no positions.
	plain := t.TempDir()
	s := open(t, Options{Dir: plain})
	commit(t, s, batch(0, 3, 10))
	s.Close()
	if _, err := OpenRawReader(vfs.OS, plain); err == nil {
		t.Fatal("opened a reader on a directory written without raw mode")
	}
}

// TestRawReaderFollowsWriter: a writer commits and rolls files while the
// reader, bounded by the end the writer acknowledged (as the fan-out
// bounds it by the offset store's raw end), reads everything in order.
func TestRawReaderFollowsWriter(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, Positions: true, MaxBytes: 3000})
	defer w.Close()
	r, _ := openReader(t, dir)
	ctx := context.Background()

	const batches = 200
	var (
		mu    sync.Mutex
		want  []sink.Record
		acked atomic.Uint64
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range batches {
			b := batch(i*5, 1+i%5, 40)
			mu.Lock()
			if _, _, err := w.CommitRaw(ctx, b); err != nil {
				mu.Unlock()
				t.Error(err)
				return
			}
			want = append(want, b.Records...)
			acked.Store(uint64(len(want)))
			mu.Unlock()
		}
	}()
	var from uint64
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := acked.Load()
		end, err := r.End(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if end < a {
			t.Fatalf("End %d is behind the acknowledged end %d", end, a)
		}
		mu.Lock()
		snapshot := want[:a:a]
		mu.Unlock()
		readAll(t, r, from, a, 7, snapshot)
		from = a
		select {
		case <-done:
			if from == acked.Load() {
				if n := len(files(t, dir)); n < 5 {
					t.Fatalf("only %d files: the writer never rolled", n)
				}
				if end, _ := r.End(ctx); end != from {
					t.Fatalf("End %d after the writer stopped, want %d", end, from)
				}
				return
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("reader stuck at %d", from)
		}
	}
}

// TestRawReaderFileRenamedUnderIt: the writer finishes (renames) the file
// the reader has just listed; the reader lists again and reads it.
func TestRawReaderFileRenamedUnderIt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, Positions: true})
	var want []sink.Record
	for i := range 4 {
		b := batch(i*10, 10, 20)
		commitRaw(t, w, b)
		want = append(want, b.Records...)
	}
	r, fs := openReader(t, dir)
	var once sync.Once
	fs.afterList = func() { once.Do(func() { w.Close() }) } // .open → .ndjson
	readAll(t, r, 0, uint64(len(want)), 100, want)
	if fs.listsCount.Load() < 3 {
		t.Fatalf("%d listings: the rename was not retried", fs.listsCount.Load())
	}

	// The same for End, which counts the last file.
	w = open(t, Options{Dir: dir, Positions: true})
	b := batch(100, 5, 20)
	commitRaw(t, w, b)
	once = sync.Once{}
	fs.afterList = func() { once.Do(func() { w.Close() }) }
	if end, err := r.End(ctx); err != nil || end != uint64(len(want)+5) {
		t.Fatalf("End = %d, %v, want %d", end, err, len(want)+5)
	}
}

// TestRawReaderBoundedByEnd: a partial line being written is neither
// counted nor read; a counted tail the writer later cuts (crash recovery)
// is uncounted again.
func TestRawReaderBoundedByEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, Positions: true})
	b := batch(0, 6, 20)
	commitRaw(t, w, b)
	r, _ := openReader(t, dir)
	end, err := r.End(ctx)
	if err != nil || end != 6 {
		t.Fatalf("End = %d, %v", end, err)
	}
	open := filepath.Join(dir, rawBase(0)+SuffixOpen)
	f, err := os.OpenFile(open, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(`{"weir_record_id":"00`); err != nil { // a write in progress
		t.Fatal(err)
	}
	if end, _ := r.End(ctx); end != 6 {
		t.Fatalf("End counts a partial line: %d", end)
	}
	got, err := r.ReadFrom(ctx, 0, 100, 0)
	if err != nil || len(got) != 6 {
		t.Fatalf("ReadFrom = %d records, %v", len(got), err)
	}
	if got, err := r.ReadFrom(ctx, 6, 100, 0); err != nil || len(got) != 0 {
		t.Fatalf("ReadFrom(end) = %d records, %v", len(got), err)
	}
	// The line completes (unacknowledged: End counts what is on disk)...
	if _, err := f.WriteString("junk\n"); err != nil {
		t.Fatal(err)
	}
	if end, _ := r.End(ctx); end != 7 {
		t.Fatalf("End = %d after a complete line, want 7", end)
	}
	// ...and the writer's crash recovery cuts it.
	st, _ := os.Stat(open)
	if err := os.Truncate(open, st.Size()-int64(len(`{"weir_record_id":"00junk`+"\n"))); err != nil {
		t.Fatal(err)
	}
	if end, _ := r.End(ctx); end != 6 {
		t.Fatalf("End = %d after the tail was cut, want 6", end)
	}
}
