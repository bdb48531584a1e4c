package dqaudit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
)

// entries makes n entries of both kinds, starting at window w.
func entries(w, n int) []dqaudit.Entry {
	base := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	out := make([]dqaudit.Entry, n)
	for i := range out {
		from := base.Add(time.Duration(w+i) * time.Minute)
		if i%3 == 2 {
			out[i] = dqaudit.Entry{Kind: "recovery", Sink: "pg", From: from, To: from.Add(time.Minute),
				Lo: uint64(1000 * i), Hi: uint64(1000*i + 500), Mode: "skip-quarantine"}
			continue
		}
		out[i] = dqaudit.Entry{Kind: "outcomes", Stream: "orders", Sink: "pg", Contract: "orders@3",
			From: from, To: from.Add(time.Minute),
			Outcomes: map[dqaudit.Outcome]int64{"pass": int64(100 + i), "reject": 2},
			Codes:    map[string]int64{"dq": 1, "contract": 1},
			Rules:    map[string]int64{"positive_amount": 1, "schema": 1, "warn \"quoted\"\n": 3},
			Sample:   []string{id(i).String(), id(i + 1).String()}}
	}
	return out
}

func TestDirWriterRoundTripAndRoll(t *testing.T) {
	fsys := memfs.New()
	w, err := dqaudit.OpenDir(fsys, "/data/dq-audit")
	if err != nil {
		t.Fatal(err)
	}
	dqaudit.SetFileMaxBytes(w, 2048)
	var want []dqaudit.Entry
	for b := range 10 {
		es := entries(b*4, 4)
		if err := w.Write(context.Background(), es); err != nil {
			t.Fatal(err)
		}
		want = append(want, es...)
	}
	if err := w.Write(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), entries(0, 1)); !errors.Is(err, dqaudit.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	names, _ := fsys.ReadDir("/data/dq-audit")
	if len(names) < 3 {
		t.Fatalf("files %v, want the 2 KiB limit to roll several", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "a-") || !strings.HasSuffix(n, ".ndjson") || !fsys.IsDurable("/data/dq-audit/"+n) {
			t.Fatalf("file %s: want a-<nanos>.ndjson, durable (content synced, entry synced)", n)
		}
	}
	got, err := dqaudit.ReadDir(fsys, "/data/dq-audit")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
	}
}

func appendTo(t *testing.T, fsys vfs.FS, name, s string) {
	t.Helper()
	f, err := fsys.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func TestReadDirTornLastLine(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		wantErr    bool
	}{
		{"cut mid-line", `{"kind":"outcomes","stream":"ord`, false},
		{"complete but unterminated", `{"kind":"recovery","sink":"pg","lo":1,"hi":2}`, false},
		{"garbage last line", "\x00\x00\x00\n", false},
		{"garbage with a line after it", "\x00\x00\n" + `{"kind":"recovery","sink":"pg","lo":1,"hi":2}` + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := memfs.New()
			w, err := dqaudit.OpenDir(fsys, "/a")
			if err != nil {
				t.Fatal(err)
			}
			want := entries(0, 5)
			if err := w.Write(context.Background(), want); err != nil {
				t.Fatal(err)
			}
			w.Close()
			names, _ := fsys.ReadDir("/a")
			appendTo(t, fsys, filepath.Join("/a", names[0]), tc.tail)
			got, err := dqaudit.ReadDir(fsys, "/a")
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "line 6") {
					t.Fatalf("got %d entries, %v; want an error naming line 6", len(got), err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %d entries, %v; want the %d written", len(got), err, len(want))
			}
		})
	}
}

// A failed fdatasync (or write, or directory sync) stops the writer for
// good: it is never retried, and every later Write fails with an error
// wrapping the first.
func TestDirWriterFailureIsSticky(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule errorfs.Rule
		op   errorfs.Op
	}{
		{"fdatasync", errorfs.Rule{Op: errorfs.OpSync, Path: "*.ndjson", After: 1, Once: true}, errorfs.OpSync},
		{"write", errorfs.Rule{Op: errorfs.OpWrite, Path: "*.ndjson", After: 1, Once: true, Errno: syscall.ENOSPC, Torn: true}, errorfs.OpWrite},
		{"directory sync", errorfs.Rule{Op: errorfs.OpSyncDir, Path: "/a", After: 1, Once: true}, errorfs.OpSyncDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := errorfs.New(memfs.New(), tc.rule)
			w, err := dqaudit.OpenDir(fsys, "/a")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			dqaudit.SetFileMaxBytes(w, 1) // every write a new file: the directory sync is exercised
			if err := w.Write(context.Background(), entries(0, 2)); err != nil {
				t.Fatal(err)
			}
			first := w.Write(context.Background(), entries(2, 2))
			if first == nil || !errors.Is(first, dqaudit.ErrStopped) {
				t.Fatalf("write during the fault: %v, want ErrStopped", first)
			}
			calls := fsys.Calls(tc.op)
			for i := range 3 {
				err := w.Write(context.Background(), entries(4+i, 1))
				if err == nil || !errors.Is(err, dqaudit.ErrStopped) || err.Error() != first.Error() {
					t.Fatalf("write %d after the fault: %v, want the first error %v", i, err, first)
				}
			}
			if fsys.Calls(tc.op) != calls {
				t.Fatalf("%d %s calls after the fault, want none", fsys.Calls(tc.op)-calls, tc.op)
			}
			var inj *errorfs.InjectedError
			if !errors.As(first, &inj) {
				t.Fatalf("%v does not wrap the injected error", first)
			}
			got, err := dqaudit.ReadDir(fsys, "/a")
			if err != nil || len(got) != 2 {
				t.Fatalf("read %d entries, %v: want the 2 acknowledged", len(got), err)
			}
		})
	}
}

func TestOpenDirRefusesNoDirectory(t *testing.T) {
	if _, err := dqaudit.OpenDir(memfs.New(), ""); err == nil {
		t.Fatal("no error for an empty directory name")
	}
	fsys := errorfs.New(memfs.New(), errorfs.Rule{Op: errorfs.OpMkdir})
	if _, err := dqaudit.OpenDir(fsys, "/x"); err == nil || !strings.Contains(err.Error(), "/x") {
		t.Fatalf("mkdir failure: %v", err)
	}
	if _, err := dqaudit.ReadDir(memfs.New(), "/missing"); err == nil {
		t.Fatal("no error reading a missing directory")
	}
}

// Several writers on one directory each take a file of their own.
func TestDirWritersShareADirectory(t *testing.T) {
	fsys := memfs.New()
	var ws []*dqaudit.DirWriter
	for i := range 5 {
		w, err := dqaudit.OpenDir(fsys, "/a")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.Write(context.Background(), entries(i, 1)); err != nil {
			t.Fatal(fmt.Errorf("writer %d: %w", i, err))
		}
		ws = append(ws, w)
	}
	got, err := dqaudit.ReadDir(fsys, "/a")
	if err != nil || len(got) != len(ws) {
		t.Fatalf("%d entries, %v", len(got), err)
	}
}
