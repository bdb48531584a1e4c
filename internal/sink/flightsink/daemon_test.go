package flightsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/daemon"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
)

// TestDaemonDelivers runs the daemon in process with a file source, the
// file sink as primary raw and a flight [[secondary]] configured through
// the registry: every line reaches the Flight server, under the
// configured descriptor path.
func TestDaemonDelivers(t *testing.T) {
	dir, err := os.MkdirTemp("", "weir-f-") // short: the socket path is limited
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
	srv := flighttest.Start(t, flighttest.Options{})
	conf := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"

[[secondary]]
name = "lake"
type = "flight"
[secondary.flight]
endpoint = %q
path = ["weir", "logs"]
batch_records = 128
`, filepath.Join(logs, "*.log"), srv.Endpoint()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(components.Registry(), []string{"--config", conf, "--data-dir", dir, "--metrics-port", "0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := readBack(t, vfs.OS, srv.Dir())(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, r := range got {
			ids[r.ID.String()] = true
		}
		if len(ids) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the Flight server holds %d of %d records", len(ids), n)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if srv.Batches("weir/logs") == 0 {
		t.Error("nothing acknowledged on the configured descriptor path weir/logs")
	}
}
