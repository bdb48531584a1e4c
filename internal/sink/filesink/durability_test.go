package filesink

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink/sinktest"
)

// unsyncedFS turns file syncs (files) or directory syncs (dirs) into
// no-ops that report success: the bug the conformance suite's Durability
// case exists to catch.
type unsyncedFS struct {
	vfs.FS
	files, dirs bool
}

func (fs unsyncedFS) Create(name string, perm os.FileMode) (vfs.File, error) {
	return fs.file(fs.FS.Create(name, perm))
}

func (fs unsyncedFS) OpenReadWrite(name string) (vfs.File, error) {
	return fs.file(fs.FS.OpenReadWrite(name))
}

func (fs unsyncedFS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil || !fs.files {
		return f, err
	}
	return unsyncedFile{f}, nil
}

func (fs unsyncedFS) SyncDir(dir string) error {
	if fs.dirs {
		return nil
	}
	return fs.FS.SyncDir(dir)
}

type unsyncedFile struct{ vfs.File }

func (unsyncedFile) Sync() error { return nil }

// brokenSyncEnv selects, in the child process of
// TestConformanceCatchesMissingSync, which syncs the sink loses.
const brokenSyncEnv = "WEIR_FILESINK_BROKEN_SYNC"

var brokenSyncs = map[string]unsyncedFS{
	"file-sync-noop": {files: true},
	"dir-sync-noop":  {dirs: true},
}

// TestConformanceCatchesMissingSync proves the Durability case can fail:
// it runs the whole conformance suite, in a child process, against the
// file sink on memfs with file (or directory) syncs turned into no-ops,
// and expects the suite to fail in the Durability case — and only there:
// every other case reads back a destination that never crashed and
// cannot tell.
func TestConformanceCatchesMissingSync(t *testing.T) {
	if mode := os.Getenv(brokenSyncEnv); mode != "" {
		broken, ok := brokenSyncs[mode]
		if !ok {
			t.Fatalf("%s=%q: unknown", brokenSyncEnv, mode)
		}
		sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
			wrap := func(fs vfs.FS) vfs.FS { broken.FS = fs; return broken }
			return harness(t, Options{}, true, wrap)
		})
		return
	}
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	failLine := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	for _, mode := range []string{"file-sync-noop", "dir-sync-noop"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConformanceCatchesMissingSync$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenSyncEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite against a sink that does not sync: %v, want it to fail\n%s", err, out)
			}
			var failed []string
			for _, m := range failLine.FindAllStringSubmatch(string(out), -1) {
				failed = append(failed, m[1])
			}
			slices.Sort(failed)
			want := []string{"TestConformanceCatchesMissingSync", "TestConformanceCatchesMissingSync/Durability"}
			if !slices.Equal(failed, want) {
				t.Fatalf("failed cases %v, want %v\n%s", failed, want, out)
			}
			if !strings.Contains(string(out), "committed records missing") {
				t.Fatalf("the Durability case failed, but not for missing records:\n%s", out)
			}
		})
	}
}
