package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/testenv/wabtest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
)

// loadCursorConfig loads a node with a file source "logs" (reading
// logs/*.log under dir), the gate given and, with secondary, a file
// [[secondary]].
func loadCursorConfig(t *testing.T, dir, gate string, secondary bool) *config.Config {
	t.Helper()
	toml := fmt.Sprintf(`gate = %q
[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"
`, gate, filepath.Join(dir, "logs", "*.log"))
	if secondary {
		toml += "\n[[secondary]]\nname = \"copy\"\ntype = \"file\"\n"
	}
	path := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", path, "--data-dir", dir, "--metrics-port", "0", "--http-listen", "127.0.0.1:0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpenCursorsMigrates: openCursors picks one place per gate, whatever
// the secondaries, and takes over a cursor an earlier version left in the
// other place — the offset store of a node upgraded with a secondary
// among them — saving it in the new place before removing the old copy.
func TestOpenCursorsMigrates(t *testing.T) {
	const dataDir, offsets = "data_dir", "offset store"
	for _, tc := range []struct {
		name      string
		gate      string
		secondary bool
		inData    string // the cursor in <data_dir>/source-cursors before ("": none)
		inOffsets string // the cursor in the offset store beside the [sink] before
		want      string
		home      string // where it must be afterwards (and nowhere else)
	}{
		{"buffer, upgraded with a secondary", "buffer", true, "", "B", "B", dataDir},
		{"buffer, upgraded after the secondary re-read", "buffer", true, "A", "B", "B", dataDir},
		{"buffer, a move cut short", "buffer", true, "B", "B", "B", dataDir},
		{"buffer, already moved", "buffer", true, "B", "", "B", dataDir},
		{"buffer, no secondary", "buffer", false, "A", "", "A", dataDir},
		{"raw, secondary", "raw", true, "", "B", "B", offsets},
		{"raw, secondary, stale copy in data_dir", "raw", true, "A", "B", "B", offsets},
		{"raw, no secondary, upgraded", "raw", false, "A", "", "A", offsets},
		{"raw, no secondary, stale copy in the offset store", "raw", false, "A", "B", "A", offsets},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cfg := loadCursorConfig(t, dir, tc.gate, tc.secondary)
			k := kinds{cfg: cfg, fs: vfs.OS, metrics: prometheus.NewRegistry()}
			sinkDir := cfg.SinkDir(cfg.Sink)
			seed(t, func() (source.CursorStore, error) { return engine.OpenFileCursorStore(vfs.OS, dir, "") }, tc.inData)
			seed(t, func() (source.CursorStore, error) { return engine.OpenOffsetStore(ctx, vfs.OS, sinkDir) }, tc.inOffsets)

			var raw *engine.OffsetStore // as openDelivery opens it with secondaries
			if tc.secondary {
				var err error
				if raw, err = engine.OpenOffsetStore(ctx, vfs.OS, sinkDir); err != nil {
					t.Fatal(err)
				}
			}
			cs, err := openCursors(ctx, cfg, k, raw, []string{"logs"}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := cs.Load(ctx, "logs"); string(c) != tc.want {
				t.Fatalf("cursor %q, want %q", c, tc.want)
			}
			// What a restart reads: the cursor in its place, and only there.
			fc, err := engine.OpenFileCursorStore(vfs.OS, dir, "")
			if err != nil {
				t.Fatal(err)
			}
			oc, err := engine.OpenOffsetStore(ctx, vfs.OS, sinkDir)
			if err != nil {
				t.Fatal(err)
			}
			gotData, _ := fc.Load(ctx, "logs")
			gotOffsets, _ := oc.Load(ctx, "logs")
			wantData, wantOffsets := tc.want, ""
			if tc.home == offsets {
				wantData, wantOffsets = "", tc.want
			}
			if string(gotData) != wantData || string(gotOffsets) != wantOffsets {
				t.Errorf("after the start: data_dir holds %q, the offset store %q; want %q and %q", gotData, gotOffsets, wantData, wantOffsets)
			}
		})
	}
}

// seed saves cursor c of "logs" in the store open opens (nothing for "").
func seed(t *testing.T, open func() (source.CursorStore, error), c string) {
	t.Helper()
	if c == "" {
		return
	}
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(context.Background(), "logs", source.Cursor(c)); err != nil {
		t.Fatal(err)
	}
}

// TestRunAfterUpgradeWithSecondary runs the daemon on the state an
// earlier version leaves when a secondary was added to a node with a file
// source: the current cursor in the offset store beside raw, and an older
// one, from before the secondary, in data_dir. The restarted node keeps
// reading where the offset store's cursor says: no line reaches the
// [sink] twice.
func TestRunAfterUpgradeWithSecondary(t *testing.T) {
	dir, err := os.MkdirTemp("", "weir-c-") // short: the socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(logs, "a.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	write := func(n int) {
		for range n {
			fmt.Fprintf(f, "line-%d\n", lines)
			lines++
		}
	}
	var cfg *config.Config
	runUntilDelivered := func(secondary bool) source.Cursor {
		t.Helper()
		cfg = loadCursorConfig(t, dir, "buffer", secondary)
		stop := runInProcess(t, cfg)
		deadline := time.Now().Add(30 * time.Second)
		// Every line in the sink, and the drain done with every segment:
		// a segment (open or sealed) stopped between the sink's commit and the drain's
		// progress record is delivered again at the next start, and the
		// file sink keeps such copies (as it documents), which this test
		// would take for a re-read.
		for len(sinkLines(t, cfg)) < lines || undeliveredSegments(t, cfg) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d lines in the sink, %d segments not wholly delivered", len(sinkLines(t, cfg)), lines, undeliveredSegments(t, cfg))
			}
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		cs, err := engine.OpenFileCursorStore(vfs.OS, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := cs.Load(ctx, "logs")
		return c
	}
	write(300)
	before := runUntilDelivered(false) // the cursor from before the secondary
	write(200)
	current := runUntilDelivered(true)
	// Put the state back as the earlier version left it: the current
	// cursor in the offset store, the old one in data_dir.
	seed(t, func() (source.CursorStore, error) { return engine.OpenOffsetStore(ctx, vfs.OS, cfg.SinkDir(cfg.Sink)) }, string(current))
	seed(t, func() (source.CursorStore, error) { return engine.OpenFileCursorStore(vfs.OS, dir, "") }, string(before))

	write(100)
	runUntilDelivered(true)
	seen := map[string]int{}
	for _, p := range sinkLines(t, cfg) {
		seen[p]++
	}
	for p, n := range seen {
		if n > 1 {
			t.Fatalf("%q is in the sink %d times (of %d lines, %d distinct): the source read again from the cursor in data_dir", p, n, lines, len(seen))
		}
	}
	if len(seen) != lines {
		t.Fatalf("%d distinct lines in the sink, want %d", len(seen), lines)
	}
}

func sinkLines(t *testing.T, cfg *config.Config) []string {
	t.Helper()
	ls, err := filesink.ReadDirFS(vfs.OS, cfg.SinkDir(cfg.Sink), true)
	if err != nil {
		return nil
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l.Payload)
	}
	return out
}

// sealedSegments counts the sealed segments the drain has not removed.
func undeliveredSegments(t *testing.T, cfg *config.Config) int {
	t.Helper()
	return wabtest.Undelivered(t, cfg.WABDir)
}
