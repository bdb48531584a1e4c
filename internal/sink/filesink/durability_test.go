package filesink

import (
	"errors"
	"maps"
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

// brokenEnv selects, in the child process of
// TestConformanceCatchesMissingSync, how the harness is broken.
const brokenEnv = "WEIR_FILESINK_BROKEN"

// brokenHarnesses are the ways TestConformanceCatchesMissingSync breaks
// the harness, and what the Durability case must then say.
var brokenHarnesses = map[string]struct {
	fs      unsyncedFS
	noCrash bool // no Crash hook and no NoCrash reason either
	want    string
}{
	"file-sync-noop": {fs: unsyncedFS{files: true}, want: "committed records missing"},
	"dir-sync-noop":  {fs: unsyncedFS{dirs: true}, want: "committed records missing"},
	"no-crash-hook":  {noCrash: true, want: "has no Crash hook"},
}

// TestConformanceCatchesMissingSync proves the Durability case can fail:
// it runs the whole conformance suite, in a child process, against the
// file sink on memfs with file (or directory) syncs turned into no-ops,
// and expects the suite to fail in the Durability case — and only there:
// every other case reads back a destination that never crashed and
// cannot tell. A harness without a Crash hook fails there too.
func TestConformanceCatchesMissingSync(t *testing.T) {
	if mode := os.Getenv(brokenEnv); mode != "" {
		broken, ok := brokenHarnesses[mode]
		if !ok {
			t.Fatalf("%s=%q: unknown", brokenEnv, mode)
		}
		sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
			wrap := func(fs vfs.FS) vfs.FS { broken.fs.FS = fs; return broken.fs }
			h := harness(t, Options{}, true, wrap)
			if broken.noCrash {
				h.Crash = nil
			}
			return h
		})
		return
	}
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	failLine := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	for _, mode := range slices.Sorted(maps.Keys(brokenHarnesses)) {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConformanceCatchesMissingSync$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite against a broken harness: %v, want it to fail\n%s", err, out)
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
			if w := brokenHarnesses[mode].want; !strings.Contains(string(out), w) {
				t.Fatalf("the Durability case failed, but without saying %q:\n%s", w, out)
			}
		})
	}
}
