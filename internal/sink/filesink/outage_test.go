package filesink

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
)

// TestLongOutageKeepsFilesBounded retries one batch many times while the
// disk fails, as the drain does through a long outage, and expects the
// directory to stay small whatever fails: an abandoned file holding no
// committed record is removed, at most MaxFailedFiles .failed files are
// kept, and files that cannot be removed stop the sink from starting new
// ones. When the outage ends the batch commits, and after a restart every
// committed record is readable.
func TestLongOutageKeepsFilesBounded(t *testing.T) {
	const retries = 60
	onOpen := errorfs.Rule{Op: errorfs.OpAny, Path: "*" + SuffixOpen}
	rule := func(op errorfs.Op, r errorfs.Rule) errorfs.Rule { r.Op = op; return r }
	once := func(r errorfs.Rule) errorfs.Rule { r.Once = true; return r }
	for _, tc := range []struct {
		name      string
		committed bool           // a batch is committed before the outage
		outage    []errorfs.Rule // in force through the outage
		perRetry  []errorfs.Rule // added before each retry
		maxFiles  int
	}{
		{name: "every write fails", outage: []errorfs.Rule{rule(errorfs.OpWrite, onOpen)}, maxFiles: 0},
		{name: "every fdatasync fails", outage: []errorfs.Rule{rule(errorfs.OpSync, onOpen)}, maxFiles: 0},
		{name: "torn writes", outage: []errorfs.Rule{{Op: errorfs.OpWrite, Path: "*" + SuffixOpen, Torn: true}}, maxFiles: 0},
		// The committed file cannot be copied either: it stays .open for
		// the next start, and nothing else accumulates.
		{name: "every write fails after a commit", committed: true, outage: []errorfs.Rule{rule(errorfs.OpWrite, onOpen)}, maxFiles: 1},
		// Each retry abandons a file holding committed records, which is
		// copied and renamed .failed.
		{name: "the batch's write fails, the copy works", committed: true, perRetry: []errorfs.Rule{once(rule(errorfs.OpWrite, onOpen))}, maxFiles: 1 + MaxFailedFiles},
		{name: "the batch's fdatasync fails, the copy works", committed: true, perRetry: []errorfs.Rule{once(rule(errorfs.OpSync, onOpen))}, maxFiles: 1 + MaxFailedFiles},
		// Abandoned files cannot be removed: the sink stops creating.
		{name: "writes and removes fail", outage: []errorfs.Rule{rule(errorfs.OpWrite, onOpen), {Op: errorfs.OpRemove}}, maxFiles: maxLitter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := memfs.New()
			fs := errorfs.New(m)
			s := open(t, Options{FS: fs, Dir: "/out"})
			defer s.Close()
			var want []sink.Record
			if tc.committed {
				b0 := batch(0, 5, 20)
				commit(t, s, b0)
				want = append(want, b0.Records...)
			}
			for _, r := range tc.outage {
				fs.Add(r)
			}
			b := batch(100, 5, 20)
			most, mostNames := 0, []string(nil)
			for i := range retries {
				for _, r := range tc.perRetry {
					fs.Add(r)
				}
				if _, err := s.Commit(context.Background(), b); !sink.IsTransient(err) {
					t.Fatalf("retry %d: Commit: %v, want a transient error", i, err)
				}
				names, err := m.ReadDir("/out")
				if err != nil {
					t.Fatal(err)
				}
				if len(names) > most {
					most, mostNames = len(names), names
				}
			}
			if most > tc.maxFiles {
				t.Fatalf("after %d failed retries the directory held up to %d files, want at most %d: %s",
					retries, most, tc.maxFiles, strings.Join(mostNames, " "))
			}
			t.Logf("at most %d files through %d failed retries", most, retries)
			fs.Clear() // the outage ends
			commit(t, s, b)
			want = append(want, b.Records...)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			open(t, Options{FS: m, Dir: "/out"}).Close() // recovery finishes what was left .open
			got, err := ReadDirFS(m, "/out", false)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[sink.RecordID]bool{}
			for _, l := range got {
				seen[l.ID] = true
			}
			for _, r := range want {
				if !seen[r.ID] {
					t.Errorf("committed record %s lost", r.ID)
				}
			}
			names, _ := m.ReadDir("/out")
			if n := slices.IndexFunc(names, func(n string) bool { return !strings.HasSuffix(n, SuffixDone) && !strings.HasSuffix(n, SuffixFailed) }); n >= 0 {
				t.Errorf("after the restart: %s left", names[n])
			}
		})
	}
}

// TestFailedFilesPrunedAcrossRestarts: the .failed files a previous run
// left count toward MaxFailedFiles, and the oldest go first.
func TestFailedFilesPrunedAcrossRestarts(t *testing.T) {
	m := memfs.New()
	fs := errorfs.New(m)
	failOnce := errorfs.Rule{Op: errorfs.OpWrite, Path: "*" + SuffixOpen, Once: true}
	var all []string
	for run := range 2 {
		s := open(t, Options{FS: fs, Dir: "/out"})
		commit(t, s, batch(run*100, 3, 10))
		for range 3 {
			fs.Add(failOnce)
			if _, err := s.Commit(context.Background(), batch(run*100+50, 3, 10)); !sink.IsTransient(err) {
				t.Fatalf("Commit: %v, want a transient error", err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		all = append(all, failedFiles(t, m)...)
		all = slices.Compact(all)
	}
	if got, want := failedFiles(t, m), all[len(all)-MaxFailedFiles:]; !slices.Equal(got, want) {
		t.Fatalf(".failed files %v, want the newest %d of %v", got, MaxFailedFiles, all)
	}
}

func failedFiles(t *testing.T, m *memfs.FS) []string {
	t.Helper()
	names, err := m.ReadDir("/out")
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, SuffixFailed) })
}
