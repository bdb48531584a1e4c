package filesrc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const srcName = "files"

type env struct {
	t       *testing.T
	dir     string
	wab     *enginetest.WAB
	check   *enginetest.Checker
	cursors *engine.FileCursorStore
	lines   int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.wab = enginetest.OpenWAB(t, 1)
	e.check = enginetest.NewTestChecker(t, e.wab.Gate(t), nil)
	var err error
	if e.cursors, err = engine.OpenFileCursorStore(nil, t.TempDir(), ""); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) source(mod func(*filesrc.Options)) *filesrc.Source {
	e.t.Helper()
	o := filesrc.Options{
		Name:         srcName,
		Glob:         filepath.Join(e.dir, "*.log"),
		PollInterval: 10 * time.Millisecond,
		RotateGrace:  200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnCommit:     func(file string, next int64) { e.check.Committed(srcName, file, next) },
	}
	if mod != nil {
		mod(&o)
	}
	s, err := filesrc.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// appendLines appends n unique lines to f (opened for append) and declares
// their positions under generation gen.
func (e *env) appendLines(f *os.File, n int, gen uint32) {
	e.t.Helper()
	dev, ino, err := filesrc.Identify(f.Name())
	if err != nil {
		// Renamed: identify through the descriptor.
		fi, serr := f.Stat()
		if serr != nil {
			e.t.Fatal(err)
		}
		dev, ino = devIno(fi)
	}
	off, err := f.Seek(0, 2)
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for range n {
		line := fmt.Sprintf("line-%06d %s", e.lines, strings.Repeat("x", e.lines%37))
		e.lines++
		e.check.ExpectPayload([]byte(line), enginetest.Position{Source: srcName, Partition: filesrc.FileKey(dev, ino, gen), Offset: off + int64(b.Len())})
		b.WriteString(line + "\n")
	}
	if _, err := f.WriteString(b.String()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) create(name string) *os.File {
	e.t.Helper()
	f, err := os.OpenFile(filepath.Join(e.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	return f
}

func (e *env) waitDurable() {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(e.check.Missing()) > 0 {
		if time.Now().After(deadline) {
			m := e.check.Missing()
			e.t.Fatalf("%d lines not durable, first %v", len(m), m[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type running = enginetest.Running

func (e *env) start(s *filesrc.Source, g source.Gate) *running {
	return enginetest.Start(context.Background(), s, g, e.cursors)
}

func (e *env) exactlyOnce() {
	e.t.Helper()
	copies := enginetest.Summary(e.t, e.wab.Records(e.t))
	if len(copies) != e.lines {
		e.t.Fatalf("%d distinct lines stored, want %d", len(copies), e.lines)
	}
	for p, n := range copies {
		if n != 1 {
			e.t.Fatalf("%q stored %d times", p, n)
		}
	}
}

func TestTailAppends(t *testing.T) {
	e := newEnv(t)
	a, b := e.create("a.log"), e.create("b.log")
	e.appendLines(a, 100, 0)
	r := e.start(e.source(nil), e.check)
	for i := range 10 {
		e.appendLines(a, 20, 0)
		e.appendLines(b, 10, 0)
		if i == 5 {
			// A line without its newline yet is not read.
			if _, err := a.WriteString("partial"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			e.lines++
			dev, ino, _ := filesrc.Identify(a.Name())
			off, _ := a.Seek(0, 1)
			e.check.ExpectPayload([]byte("partial line"), enginetest.Position{Source: srcName, Partition: filesrc.FileKey(dev, ino, 0), Offset: off - 7})
			if _, err := a.WriteString(" line\n"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
	// A line's id carries its file's birth time.
	births := map[int64]bool{vfs.Birth(a).UnixMilli(): true, vfs.Birth(b).UnixMilli(): true}
	for _, st := range e.wab.Records(t) {
		at, ok := record.IDTime(st.ID)
		if !ok || !births[at.UnixMilli()] {
			t.Fatalf("%q: id %s carries %v (time-ordered %v), not a file's birth time %v", st.Payload, st.ID, at, ok, births)
		}
	}
}

func TestRotationByRename(t *testing.T) {
	e := newEnv(t)
	old := e.create("app.log")
	e.appendLines(old, 100, 0)
	r := e.start(e.source(nil), e.check)
	e.waitDurable()
	// Rotate: the writer still has the old file open and writes a last few
	// lines to it; a new file takes the name.
	if err := os.Rename(filepath.Join(e.dir, "app.log"), filepath.Join(e.dir, "app.log.1")); err != nil {
		t.Fatal(err)
	}
	e.appendLines(old, 50, 0)
	cur := e.create("app.log")
	e.appendLines(cur, 100, 0)
	e.appendLines(old, 10, 0) // still writing to the rotated file
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
}

func TestTruncation(t *testing.T) {
	e := newEnv(t)
	f := e.create("app.log")
	e.appendLines(f, 100, 0)
	r := e.start(e.source(nil), e.check)
	e.waitDurable()
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the source see the shorter file
	e.appendLines(f, 20, 1)
	e.waitDurable()
	r.Stop(t)
	e.exactlyOnce()
}

// A crash after a durable write and before the cursor save: the restarted
// source resumes at the cursor, re-reading exactly that batch.
func TestRestartResumesFromCursor(t *testing.T) {
	e := newEnv(t)
	f := e.create("app.log")
	e.appendLines(f, 500, 0)
	crash := &enginetest.CrashAfter{Inner: e.check, N: 3}
	r := e.start(e.source(func(o *filesrc.Options) { o.MaxBatchRecords = 50 }), crash)
	select {
	case err := <-r.Done():
		if !errors.Is(err, enginetest.ErrCrashed) {
			t.Fatalf("Run = %v, want the crash", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("source did not stop on the gate error")
	}
	r.Cancel()
	if len(crash.Lost) != 50 {
		t.Fatalf("crashed batch has %d lines, want 50", len(crash.Lost))
	}
	lost := map[string]bool{}
	for _, rec := range crash.Lost {
		lost[string(rec.Payload)] = true
	}
	e.appendLines(f, 100, 0)
	r = e.start(e.source(nil), e.check)
	e.waitDurable()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != e.lines {
		t.Fatalf("%d distinct lines stored, want %d", len(copies), e.lines)
	}
	for p, n := range copies {
		if want := map[bool]int{true: 2, false: 1}[lost[p]]; n != want {
			t.Fatalf("%q stored %d times, want %d (in the un-cursored batch: %v)", p, n, want, lost[p])
		}
	}
}

func TestLongLineIsCut(t *testing.T) {
	e := newEnv(t)
	f := e.create("app.log")
	pieces := []string{strings.Repeat("a", 100), strings.Repeat("b", 100), strings.Repeat("c", 50)}
	if _, err := f.WriteString(strings.Join(pieces, "") + "\nafter\n"); err != nil {
		t.Fatal(err)
	}
	dev, ino, _ := filesrc.Identify(f.Name())
	for i, p := range append(pieces, "after") {
		off := int64(i * 100)
		if p == "after" {
			off = 251
		}
		e.check.ExpectPayload([]byte(p), enginetest.Position{Source: srcName, Partition: filesrc.FileKey(dev, ino, 0), Offset: off})
	}
	r := e.start(e.source(func(o *filesrc.Options) { o.MaxLineBytes = 100 }), e.check)
	e.waitDurable()
	r.Stop(t)
}

// The file is rotated while the source is down: on restart the cursor's
// file is found under its new name by identity and read to its end.
func TestRestartAfterRotation(t *testing.T) {
	e := newEnv(t)
	old := e.create("app.log")
	e.appendLines(old, 200, 0)
	crash := &enginetest.CrashAfter{Inner: e.check, N: 2}
	r := e.start(e.source(func(o *filesrc.Options) { o.MaxBatchRecords = 50 }), crash)
	if err := <-r.Done(); !errors.Is(err, enginetest.ErrCrashed) {
		t.Fatalf("Run = %v, want the crash", err)
	}
	r.Cancel()
	if err := os.Rename(filepath.Join(e.dir, "app.log"), filepath.Join(e.dir, "app.log.1")); err != nil {
		t.Fatal(err)
	}
	e.appendLines(old, 20, 0)
	e.appendLines(e.create("app.log"), 30, 0)
	r = e.start(e.source(nil), e.check)
	e.waitDurable()
	r.Stop(t)
	copies := enginetest.Summary(t, e.wab.Records(t))
	if len(copies) != e.lines {
		t.Fatalf("%d distinct lines stored, want %d", len(copies), e.lines)
	}
}
