package arrowipcsrc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
)

// srcEnv is a source over a temporary directory writing through a real
// write-ahead buffer gate with a quarantine lane, its cursor in a real
// cursor store.
type srcEnv struct {
	t       *testing.T
	dir     string
	qdir    string
	wab     *enginetest.WAB
	gate    *engine.WABGate
	cursors *engine.FileCursorStore
	commits chan struct{}
}

func newSrcEnv(t *testing.T) *srcEnv {
	t.Helper()
	e := &srcEnv{t: t, dir: t.TempDir(), qdir: t.TempDir(), wab: enginetest.OpenWAB(t, 1), commits: make(chan struct{}, 1024)}
	e.gate = e.wab.GateWith(t, engine.GateOptions{Quarantine: quarantine.NewOnDemand(quarantine.Options{Dir: e.qdir, MaxBytes: 1 << 24})})
	var err error
	if e.cursors, err = engine.OpenFileCursorStore(nil, t.TempDir(), ""); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *srcEnv) source(maxBatch int) *Source {
	e.t.Helper()
	s, err := New(Options{
		Name: "arrows", Glob: filepath.Join(e.dir, "*.arrow*"), PollInterval: 5 * time.Millisecond, MaxBatchRecords: maxBatch,
		Columns:  arrowrec.Columns{Key: "name"},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnCommit: func(string, int64, int64) { e.commits <- struct{}{} },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *srcEnv) write(name string, b []byte) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), b, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// cursorOf is the saved cursor's file entries by base name.
func (e *srcEnv) cursorOf() map[string]*file {
	e.t.Helper()
	c, err := e.cursors.Load(context.Background(), "arrows")
	if err != nil {
		e.t.Fatal(err)
	}
	var cur cursor
	if len(c) > 0 {
		if err := json.Unmarshal(c, &cur); err != nil {
			e.t.Fatal(err)
		}
	}
	out := map[string]*file{}
	for _, f := range cur.Files {
		out[filepath.Base(f.Path)] = f
	}
	return out
}

// waitCursor waits until ok holds of the saved cursor.
func (e *srcEnv) waitCursor(what string, ok func(map[string]*file) bool) {
	e.t.Helper()
	deadline := time.After(20 * time.Second)
	for !ok(e.cursorOf()) {
		select {
		case <-e.commits:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("timed out waiting for the cursor: %s; it is %v", what, e.cursorOf())
		}
	}
}

func done(names ...string) func(map[string]*file) bool {
	return func(c map[string]*file) bool {
		for _, n := range names {
			if f := c[n]; f == nil || !f.Done {
				return false
			}
		}
		return true
	}
}

// rowsOf checks the buffer's records: one per row, distinct ids, payloads
// the rows' JSON with "id" numbering them; it returns the ids (the "id"
// column's values) in the order the buffer holds them.
func rowsOf(t *testing.T, e *srcEnv) []int64 {
	t.Helper()
	stored := e.wab.Records(t)
	ids := map[string]bool{}
	var out []int64
	for _, s := range stored {
		var row struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		}
		if err := json.Unmarshal([]byte(s.Payload), &row); err != nil {
			t.Fatalf("payload %q: %v", s.Payload, err)
		}
		if string(s.Key) != row.Name || row.Name != fmt.Sprintf("row-%d", row.ID) {
			t.Fatalf("record %q has key %q", s.Payload, s.Key)
		}
		if ids[s.ID.String()] {
			t.Fatalf("id %s twice", s.ID)
		}
		ids[s.ID.String()] = true
		out = append(out, row.ID)
	}
	return out
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestSourceReadsFilesAndStreamsInNameOrder: IPC files and streams in a
// directory are read in name order, every row once, in gate writes of at
// most max_batch_records (a larger Arrow batch in parts), and each file
// is marked done in the cursor.
func TestSourceReadsFilesAndStreamsInNameOrder(t *testing.T) {
	e := newSrcEnv(t)
	e.write("b.arrows", writeIPC(t, false, 7, 5))
	e.write("a.arrow", writeIPC(t, true, 4, 0, 9))
	run := enginetest.Start(context.Background(), e.source(4), e.gate, e.cursors)
	e.waitCursor("both files read", done("a.arrow", "b.arrows"))
	run.Stop(t)
	got := rowsOf(t, e)
	want := append(seq(0, 13), seq(0, 12)...)
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want a.arrow's 0..12 then b.arrows' 0..11", got)
	}
	if c := e.cursorOf(); c["a.arrow"].Batch != 3 || c["b.arrows"].Batch != 2 {
		t.Fatalf("cursor %+v %+v, want 3 and 2 batches", c["a.arrow"], c["b.arrows"])
	}
}

// TestSourcePartialFileReadUpToItsLastCompleteBatch: a file being written
// — its footer missing, its last batch torn — and a stream whose last
// message is torn are read up to their last complete batch, nothing
// after it; once completed, the rest is read, every row once.
func TestSourcePartialFileReadUpToItsLastCompleteBatch(t *testing.T) {
	for _, isFile := range []bool{true, false} {
		t.Run(fmt.Sprintf("file=%v", isFile), func(t *testing.T) {
			e := newSrcEnv(t)
			whole := writeIPC(t, isFile, 3, 4, 5)
			frames := batchFrames(t, whole)
			name := "x.arrows"
			if isFile {
				name = "x.arrow"
			}
			cut := frames[1][1] + (frames[2][1]-frames[2][0])/2 // inside the third batch
			e.write(name, whole[:cut])
			run := enginetest.Start(context.Background(), e.source(100), e.gate, e.cursors)
			e.waitCursor("two batches", func(c map[string]*file) bool { return c[name] != nil && c[name].Batch == 2 })
			time.Sleep(50 * time.Millisecond) // polls that must read nothing more
			if c := e.cursorOf()[name]; c.Batch != 2 || c.Done || c.Off != frames[2][0] {
				t.Fatalf("cursor %+v on a torn file, want 2 batches and offset %d", c, frames[2][0])
			}
			e.write(name, whole) // the writer finishes
			e.waitCursor("the file done", done(name))
			run.Stop(t)
			if got := rowsOf(t, e); !slices.Equal(got, seq(0, 12)) {
				t.Fatalf("rows %v, want 0..11 once each", got)
			}
		})
	}
}

// TestSourceCorruptBatchQuarantinedRestContinues: a corrupt batch goes to
// the gate's quarantine with code decode, its bytes kept, and the batches
// after it are read.
func TestSourceCorruptBatchQuarantinedRestContinues(t *testing.T) {
	for _, isFile := range []bool{true, false} {
		t.Run(fmt.Sprintf("file=%v", isFile), func(t *testing.T) {
			e := newSrcEnv(t)
			b := writeIPC(t, isFile, 3, 4, 5)
			frames := batchFrames(t, b)
			corruptBatch(b, frames[1])
			e.write("c.arrow", b)
			run := enginetest.Start(context.Background(), e.source(100), e.gate, e.cursors)
			e.waitCursor("the file done", done("c.arrow"))
			run.Stop(t)
			if got, want := rowsOf(t, e), append(seq(0, 3), seq(7, 12)...); !slices.Equal(got, want) {
				t.Fatalf("rows %v, want %v (batch 1 quarantined)", got, want)
			}
			q, err := quarantine.ReadDir(vfs.OS, e.qdir)
			if err != nil {
				t.Fatal(err)
			}
			if len(q) != 1 {
				t.Fatalf("quarantine holds %d records, want 1", len(q))
			}
			payload := []byte(q[0].Record.Payload)
			if q[0].Record.PayloadEncoding == "base64" {
				if payload, err = base64.StdEncoding.DecodeString(q[0].Record.Payload); err != nil {
					t.Fatal(err)
				}
			}
			if q[0].ReasonCode != "decode" || q[0].Stage != "gate" || !bytes.Equal(payload, b[frames[1][0]:frames[1][1]]) {
				t.Fatalf("quarantine holds %+v, want batch 1's message with code decode", q)
			}
		})
	}
}

// TestSourceResumesFromItsCursor: a source stopped in the middle of a
// directory (and of an Arrow batch: gate writes of 2 rows) resumes where
// its cursor is: every row once over both runs.
func TestSourceResumesFromItsCursor(t *testing.T) {
	e := newSrcEnv(t)
	for i := range 4 {
		e.write(fmt.Sprintf("f%d.arrow", i), writeIPC(t, i%2 == 0, 3, 5))
	}
	run := enginetest.Start(context.Background(), e.source(2), e.gate, e.cursors)
	e.waitCursor("inside the second file", func(c map[string]*file) bool { return c["f1.arrow"] != nil && c["f1.arrow"].Row > 0 })
	run.Stop(t)
	run = enginetest.Start(context.Background(), e.source(2), e.gate, e.cursors)
	e.waitCursor("all files", done("f0.arrow", "f1.arrow", "f2.arrow", "f3.arrow"))
	run.Stop(t)
	var want []int64
	for range 4 {
		want = append(want, seq(0, 8)...)
	}
	if got := rowsOf(t, e); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want each file's 0..7 once", got)
	}
}

// TestSourceReadsAFileOnAReusedInodeAgain: a file read to its end is
// deleted and another written — on the same inode, as file systems reuse
// them — under the same name: the new file is read, not taken for the
// done one.
func TestSourceReadsAFileOnAReusedInodeAgain(t *testing.T) {
	e := newSrcEnv(t)
	path := filepath.Join(e.dir, "r.arrow")
	e.write("r.arrow", writeIPC(t, true, 3))
	run := enginetest.Start(context.Background(), e.source(100), e.gate, e.cursors)
	e.waitCursor("the first file", done("r.arrow"))
	// Rewrite the same inode in place with other content: what a reused
	// inode looks like to the source.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(writeIPC(t, false, 4, 4)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.waitCursor("the second file", func(c map[string]*file) bool {
		return c["r.arrow"] != nil && c["r.arrow"].Gen == 1 && c["r.arrow"].Done
	})
	run.Stop(t)
	if got, want := rowsOf(t, e), append(seq(0, 3), seq(0, 8)...); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want the first file's 0..2 then the second's 0..7", got)
	}
}
