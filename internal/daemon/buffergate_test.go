package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
)

// With the write-ahead buffer, a [[source]] record larger than
// max_frame_bytes lands in <data_dir>/quarantine/buffer (code oversize,
// stage gate) and the lines around it reach the sink: the source is not
// stuck retrying it.
func TestBufferGateQuarantinesOversize(t *testing.T) {
	dir, logs := shortDataDir(t)
	big := strings.Repeat("x", 2000)
	if err := os.WriteFile(filepath.Join(logs, "a.log"), []byte("small-1\n"+big+"\nsmall-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, dir, fmt.Sprintf(`
max_frame_bytes = "1KiB"

[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"
`, filepath.Join(logs, "*.log")), "--segment-max-age", "50ms")
	stop := runInProcess(t, cfg)
	var lines []filesink.Line
	got := waitQuarantined(t, filepath.Join(dir, config.DefaultQuarantineDirName, bufferGateQuarantine), func() bool {
		lines, _ = filesink.ReadDirFS(vfs.OS, cfg.SinkDir(cfg.Sink), true)
		return len(lines) >= 2
	})
	stop()
	e := got[0]
	if e.Record.Payload != big || e.ReasonCode != "oversize" || e.Stage != "gate" || e.Component != bufferGateQuarantine ||
		e.Sink != bufferGateQuarantine || e.Attempts != 1 || e.FirstSeen == "" || !strings.Contains(e.Error, "limit 1024") {
		t.Fatalf("quarantined %d: %+v", len(got), e)
	}
	if len(lines) != 2 || string(lines[0].Payload) != "small-1" || string(lines[1].Payload) != "small-2" {
		t.Fatalf("sink holds %d lines: %+v", len(lines), lines)
	}
}

// loadConfig writes toml to dir/weir.toml and loads it with data_dir dir,
// no metrics port and args.
func loadConfig(t *testing.T, dir, toml string, args ...string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(append([]string{"--config", path, "--data-dir", dir, "--metrics-port", "0", "--http-listen", "127.0.0.1:0"}, args...), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitQuarantined waits until the quarantine directory qdir holds a record
// and done (if not nil) holds too, and returns what qdir holds.
func waitQuarantined(t *testing.T, qdir string, done func() bool) []quarantine.Entry {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _ := quarantine.ReadDir(vfs.OS, qdir)
		if len(got) > 0 && (done == nil || done()) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d quarantined in %s", len(got), qdir)
		}
	}
}
