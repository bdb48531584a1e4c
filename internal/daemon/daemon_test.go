package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runInProcess runs the daemon on cfg until stop (or the test's end);
// stop waits for Run to return and fails the test on its error.
func runInProcess(t *testing.T, cfg *config.Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRunWithSourceAndSecondary runs the daemon in process with a file
// source and a file secondary: lines reach raw and the secondary, and a
// clean stop leaves no goroutine behind.
func TestRunWithSourceAndSecondary(t *testing.T) {
	dir, logs := shortDataDir(t)
	const n = 500
	var body []byte
	for i := range n {
		body = fmt.Appendf(body, "line-%d\n", i)
	}
	if err := os.WriteFile(filepath.Join(logs, "a.log"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(toml, fmt.Appendf(nil, `
[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"

[[secondary]]
name = "copy"
type = "file"
`, filepath.Join(logs, "*.log")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", toml, "--data-dir", dir, "--metrics-port", "0", "--http-listen", "127.0.0.1:0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInProcess(t, cfg)

	count := func(d string) int {
		lines, err := filesink.ReadDirFS(vfs.OS, d, true)
		if err != nil {
			return 0
		}
		return len(lines)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(cfg.SinkDir(cfg.Sink)) < n || count(cfg.SinkDir(cfg.Secondaries[0].Sink)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("raw %d, secondary %d of %d lines", count(cfg.SinkDir(cfg.Sink)), count(cfg.SinkDir(cfg.Secondaries[0].Sink)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if _, err := os.Stat(filepath.Join(cfg.SinkDir(cfg.Sink), "weir-offsets")); err != nil {
		t.Errorf("offset store: %v", err)
	}
}

// TestRunRecoveryNode runs a recovery-only node in process on a raw
// directory written by "another process" (a raw file sink and the offset
// store, driven here as the ingest node drives them): it fills a file
// secondary from raw, follows raw as it grows, writes nothing in raw's
// directory but the offset store, opens no write-ahead buffer, and stops
// cleanly.
func TestRunRecoveryNode(t *testing.T) {
	dir := t.TempDir()
	rawDir := filepath.Join(dir, "ingest", "out")
	ctx := context.Background()
	raw, err := filesink.New(ctx, filesink.Options{Dir: rawDir, Positions: true, MaxBytes: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	store, err := engine.OpenOffsetStore(ctx, vfs.OS, rawDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []sink.RecordID
	write := func(n int) { // as the ingest node: commit, then note the acknowledged end
		t.Helper()
		recs := make([]sink.Record, n)
		for i := range recs {
			var id sink.RecordID
			binary.BigEndian.PutUint64(id[8:], uint64(len(ids)+i+1))
			recs[i] = sink.Record{ID: id, Payload: fmt.Appendf(nil, "rec-%d", len(ids)+i), Received: time.Now()}
		}
		res, first, err := raw.CommitRaw(ctx, sink.NewBatch(recs))
		if err != nil || len(res.Rejected) > 0 {
			t.Fatal(err, res.Rejected)
		}
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		store.NoteRawEnd(first + uint64(n))
		if err := store.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(300)

	recDir := filepath.Join(dir, "recovery")
	toml := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(toml, []byte(`
role = "recovery"
[[secondary]]
name = "copy"
type = "file"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", toml, "--data-dir", recDir, "--sink-file-dir", rawDir,
		"--metrics-port", "0", "--http-listen", "127.0.0.1:0", "--coverage-flush-interval", "20ms", "--recovery-window-records", "64"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInProcess(t, cfg)

	waitCopy := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			lines, _ := filesink.ReadDirFS(vfs.OS, cfg.SinkDir(cfg.Secondaries[0].Sink), true)
			got := map[sink.RecordID]bool{}
			for _, l := range lines {
				got[l.ID] = true
			}
			missing := 0
			for _, id := range ids[:want] {
				if !got[id] {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("secondary misses %d of %d records", missing, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCopy(300)
	write(500) // raw grows under the running node
	waitCopy(800)
	stop()
	if _, err := os.Stat(cfg.WABDir); !os.IsNotExist(err) {
		t.Errorf("recovery node created its write-ahead buffer directory: %v", err)
	}
	ents, err := os.ReadDir(rawDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if n := e.Name(); !strings.HasPrefix(n, "raw-") && !strings.HasPrefix(n, engine.DefaultOffsetFile) {
			t.Errorf("unexpected file in raw's directory: %s", n)
		}
	}
	if err := store.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if cov := store.Coverage("copy"); cov.Prefix() != 800 {
		t.Errorf("shared offset store: copy covered up to %d, want 800", cov.Prefix())
	}
}

// shortDataDir is a data directory with a logs directory in it, under the
// system temporary directory rather than t.TempDir: the socket path inside
// it must stay short.
func shortDataDir(t *testing.T) (dir, logs string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "weir-d-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs = filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, logs
}
