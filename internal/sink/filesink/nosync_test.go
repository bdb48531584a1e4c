package filesink

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNoSync: with NoSync (a secondary with durable = false) a Commit
// writes without fdatasync, and a file is fdatasynced once, when it is
// finished, before its rename. Raw mode refuses NoSync.
func TestNoSync(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := open(t, Options{Dir: filepath.Join(dir, "b"), FS: fs, MaxBytes: 4096, NoSync: true})
	defer s.Close()
	commit(t, s, batch(0, 2, 10))
	commit(t, s, batch(2, 1, 10))
	commit(t, s, batch(3, 1, 5000)) // does not fit: the first file is finished
	ops := strings.Join(fs.opList(), "\n")
	want := `^create \S+\nwrite \S+\nsyncdir b\nwrite \S+\nsync \S+\nrename \S+ -> \S+\nsyncdir b\ncreate \S+\nwrite \S+\nsyncdir b\nsync \S+\nrename \S+ -> \S+\nsyncdir b$`
	if !regexp.MustCompile(want).MatchString(ops) {
		t.Errorf("ops:\n%s", ops)
	}
	got, err := ReadDirFS(fs, s.dir, true)
	if err != nil || len(got) != 4 {
		t.Fatalf("read back %d records, %v", len(got), err)
	}
	if _, err := New(context.Background(), Options{Dir: dir, Positions: true, NoSync: true}); err == nil {
		t.Error("raw mode accepted NoSync")
	}
}
