package systest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
)

// arrowWritersDir is the fixture that writes Arrow IPC files with writers
// that are not weir's (package.json, its lockfile and write.mjs).
const arrowWritersDir = "../source/arrowipcsrc/testdata/writers"

// arrowManifestEntry is one file the writers wrote: ids [From, From+Count).
type arrowManifestEntry struct {
	File  string `json:"file"`
	From  int64  `json:"from"`
	Count int64  `json:"count"`
}

// writeForeignArrow installs the fixture's npm packages from its lockfile
// (npm ci, into a cache directory keyed by the lockfile) and runs it to
// write files into dir. Without node and npm the test is Unavailable.
func writeForeignArrow(t *testing.T, dir string, perFile, perBatch int) []arrowManifestEntry {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("%s is not installed: the Arrow IPC files of Arrow JS and Flechette cannot be written", tool))
		}
	}
	lock, err := os.ReadFile(filepath.Join(arrowWritersDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	work := filepath.Join(cache, "weir-arrow-writers", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", "write.mjs"} {
		b, err := os.ReadFile(filepath.Join(arrowWritersDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "node_modules", ".package-lock.json")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("npm ci of the Arrow writers' fixture failed: %v\n%s", err, out))
		}
	}
	cmd := exec.Command("node", "write.mjs", dir, fmt.Sprint(perFile), fmt.Sprint(perBatch))
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node write.mjs: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m []arrowManifestEntry
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// arrowRow is a payload of the fixture's rows.
type arrowRow struct {
	ID    int64    `json:"id"`
	Name  string   `json:"name"`
	Score *float64 `json:"score"`
}

// TestArrowIPCSourceForeignWriters: Arrow IPC files and streams written
// by Arrow JS and Flechette are read by a real `weir serve` (an arrow_ipc
// [[source]]) into the file sink; weir is killed with SIGKILL in the
// middle of the directory and started again. Every row the writers wrote
// is in the sink with the values they wrote, under one id per row: the
// cursor resumed, nothing is missing, and what was read twice came again
// under the same id (distinct ids = rows).
func TestArrowIPCSourceForeignWriters(t *testing.T) {
	in := t.TempDir()
	manifest := writeForeignArrow(t, in, 20000, 2000)
	var rows int64
	for _, m := range manifest {
		rows += m.Count
	}
	cfg := writeConfig(t, fmt.Sprintf(`
[[source]]
name = "arrows"
type = "arrow_ipc"
[source.arrow_ipc]
glob = %q
poll_interval = "50ms"
max_batch_records = 200
key_column = "name"
`, filepath.Join(in, "*.arrow*")))
	d := newDaemon(t, "--config", cfg)
	d.start()

	// Kill -9 once the source has read a quarter of the rows (its own
	// counter: the sink may trail it by any amount on a loaded machine):
	// it is then in the middle of the directory — 200 rows a durable
	// write, 80000 rows.
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := d.tryScrape()
		if err == nil && m[`weir_arrow_ipc_rows_total{source="arrows"}`] >= float64(rows/4) {
			t.Logf("killed with %v of %d rows read", m[`weir_arrow_ipc_rows_total{source="arrows"}`], rows)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source has not read a quarter of the rows after 60s\n%s", tail(d.log.String(), 4000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.kill()
	d.start()

	// Every row, then the check.
	ids := map[string]arrowRow{}
	deadline = time.Now().Add(120 * time.Second)
	for {
		lines, err := readSinkLines(d.outDir())
		if err != nil {
			t.Fatal(err)
		}
		ids = map[string]arrowRow{}
		for _, l := range lines {
			var r arrowRow
			if err := json.Unmarshal(l.Payload, &r); err != nil {
				t.Fatalf("sink payload %q: %v", l.Payload, err)
			}
			if prev, ok := ids[l.ID.String()]; ok && prev.ID != r.ID {
				t.Fatalf("id %s names rows %d and %d", l.ID, prev.ID, r.ID)
			}
			if string(l.Key) != r.Name || l.Source != "arrows" {
				t.Fatalf("row %d: key %q source %q, want the name column as key and source arrows", r.ID, l.Key, l.Source)
			}
			ids[l.ID.String()] = r
		}
		if int64(len(ids)) >= rows || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen := map[int64]int{}
	for _, r := range ids {
		seen[r.ID]++
		if r.Name != fmt.Sprintf("row-%d", r.ID) {
			t.Fatalf("row %d: name %q", r.ID, r.Name)
		}
		if (r.ID%3 == 0) != (r.Score == nil) || (r.Score != nil && *r.Score != float64(r.ID)/4) {
			t.Fatalf("row %d: score %v, want null every third row, else id/4", r.ID, r.Score)
		}
	}
	for _, m := range manifest {
		for id := m.From; id < m.From+m.Count; id++ {
			if seen[id] != 1 {
				t.Fatalf("%s row %d is in the sink under %d ids, want 1 (distinct ids %d, rows %d)", m.File, id, seen[id], len(ids), rows)
			}
		}
	}
	if int64(len(ids)) != rows {
		t.Fatalf("%d distinct ids for %d rows", len(ids), rows)
	}
	m := d.scrape()
	for _, name := range []string{"files", "batches", "rows", "bytes", "undecodable"} {
		if _, ok := m[`weir_arrow_ipc_`+name+`_total{source="arrows"}`]; !ok {
			t.Errorf("weir_arrow_ipc_%s_total{source=\"arrows\"} is not exported", name)
		}
	}
	if got := m[`weir_arrow_ipc_undecodable_total{source="arrows"}`]; got != 0 {
		t.Errorf("%v undecodable batches in the writers' files", got)
	}
	// The second run resumed in the middle: it finished files, and read
	// fewer rows than there are.
	files2, rows2 := m[`weir_arrow_ipc_files_total{source="arrows"}`], m[`weir_arrow_ipc_rows_total{source="arrows"}`]
	t.Logf("after the kill: %v files finished, %v rows read of %d", files2, rows2, rows)
	if files2 < 1 || rows2 >= float64(rows) {
		t.Errorf("after the restart the source finished %v files and read %v rows of %d: want it to resume inside the directory", files2, rows2, rows)
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
}
