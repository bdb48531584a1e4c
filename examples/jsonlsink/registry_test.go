package jsonlsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/examples/jsonlsink"
	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/daemon"
	"github.com/weir-io/weir/internal/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// registry is the built-in list with this kind added: what
// internal/components/all.go becomes when jsonlsink.Component() is added
// to it (docs/extending.md). Nothing else in weir changes.
func registry(t *testing.T) *component.Registry {
	t.Helper()
	r, err := components.Registry().Extend(component.List{Sinks: []component.SinkDef{jsonlsink.Component()}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// warnings collects the warnings logged while loading.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.Level == slog.LevelWarn {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "key" {
				w.got = append(w.got, a.Value.String())
			}
			return true
		})
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfiguredThroughTheRegistry: once registered, the kind has its
// [sink.jsonl] flags and variables, its [secondary.jsonl] table with the
// same validation as every setting, and a row in `weir kinds`.
func TestConfiguredThroughTheRegistry(t *testing.T) {
	reg := registry(t)
	dir := t.TempDir()
	cfg, err := config.LoadWith(reg, []string{"--data-dir", dir, "--sink-type=jsonl", "--sink-jsonl-batch-records=10"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Sink.Settings().(*jsonlsink.Config); c.BatchRecords != 10 || c.Dir != filepath.Join(dir, "jsonl") || cfg.SinkDir(cfg.Sink) != c.Dir {
		t.Errorf("[sink.jsonl]: %+v", c)
	}

	w := &warnings{}
	_, err = config.LoadWith(reg, []string{"--config", writeConfig(t, dir, `
[[secondary]]
name = "j"
type = "jsonl"
[secondary.jsonl]
batch_records = 0
colour = "red"
`), "--data-dir", dir}, nil, slog.New(w))
	want := `[[secondary]] "j": jsonl.batch_records = 0: must be between 1 and 65536`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
	if strings.Join(w.got, ",") != "secondary.jsonl.colour" {
		t.Errorf("warnings %q, want the unknown key secondary.jsonl.colour", w.got)
	}
	var b strings.Builder
	if err := reg.SinkTable().Text(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "example: JSON lines") {
		t.Errorf("weir kinds lacks the kind:\n%s", b.String())
	}
}

// TestDaemonDelivers runs the daemon in process with a file source and a
// jsonl secondary: every line reaches the secondary.
func TestDaemonDelivers(t *testing.T) {
	dir, err := os.MkdirTemp("", "weir-j-") // short: the socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var body []byte
	for i := range n {
		body = fmt.Appendf(body, "line-%d\n", i)
	}
	if err := os.WriteFile(filepath.Join(logs, "a.log"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(registry(t), []string{"--config", writeConfig(t, dir, fmt.Sprintf(`
[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"

[[secondary]]
name = "j"
type = "jsonl"
`, filepath.Join(logs, "*.log"))), "--data-dir", dir, "--metrics-port", "0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	out := cfg.SinkDir(cfg.Secondaries[0].Sink)
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _ := jsonlsink.Read(vfs.OS, out)
		ids := map[string]bool{}
		for _, r := range recs {
			ids[r.ID.String()] = true
		}
		if len(ids) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("secondary holds %d of %d records", len(ids), n)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
