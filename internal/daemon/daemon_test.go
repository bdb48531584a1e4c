package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunWithSourceAndSecondary runs the daemon in process with a file
// source and a file secondary: lines reach raw and the secondary, and a
// clean stop leaves no goroutine behind.
func TestRunWithSourceAndSecondary(t *testing.T) {
	dir, err := os.MkdirTemp("", "weir-d-") // short: the socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
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
	cfg, err := config.Load([]string{"--config", toml, "--data-dir", dir, "--metrics-port", "0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()

	count := func(d string) int {
		lines, err := filesink.ReadDirFS(vfs.OS, d, true)
		if err != nil {
			return 0
		}
		return len(lines)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(cfg.Sink.File.Dir) < n || count(cfg.Secondaries[0].Sink.File.Dir) < n {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("raw %d, secondary %d of %d lines", count(cfg.Sink.File.Dir), count(cfg.Secondaries[0].Sink.File.Dir), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(cfg.Sink.File.Dir, "weir-offsets")); err != nil {
		t.Errorf("offset store: %v", err)
	}
}
