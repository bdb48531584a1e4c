package synclog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/synclog"
	"github.com/weir-io/weir/internal/vfs"
)

var errStopped, errClosed = errors.New("stopped"), errors.New("closed")

// Appends roll to a new file past FileMaxBytes (an append is never
// split), a name another writer took is asked for again, and Close
// refuses later appends.
func TestRollNamesClose(t *testing.T) {
	dir := t.TempDir()
	n := 0
	name := func() string { n++; return fmt.Sprintf("f-%03d.log", n) }
	// Another writer already has the first name.
	if err := os.WriteFile(filepath.Join(dir, "f-001.log"), []byte("theirs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := synclog.New(synclog.Options{FS: vfs.OS, Dir: dir, FileMaxBytes: 10, Name: name, Stopped: errStopped, Closed: errClosed})
	for _, line := range []string{"aaaa\n", "bbbb\n", "cccc\n", "dddddddddddd\n", "e\n"} {
		if err := l.Append([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]byte("late\n")); !errors.Is(err, errClosed) {
		t.Fatalf("append after Close: %v, want Closed", err)
	}
	want := map[string]string{
		"f-001.log": "theirs\n",
		"f-002.log": "aaaa\nbbbb\n",
		"f-003.log": "cccc\n",
		"f-004.log": "dddddddddddd\n",
		"f-005.log": "e\n",
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name())
		if want[e.Name()] != string(b) {
			t.Errorf("%s holds %q, want %q", e.Name(), b, want[e.Name()])
		}
	}
	if len(got) != len(want) {
		t.Errorf("files %s, want %d", strings.Join(got, " "), len(want))
	}
}
