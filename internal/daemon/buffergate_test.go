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
	dir, err := os.MkdirTemp("", "weir-g-") // short: the socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 2000)
	if err := os.WriteFile(filepath.Join(logs, "a.log"), []byte("small-1\n"+big+"\nsmall-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(toml, fmt.Appendf(nil, `
max_frame_bytes = "1KiB"

[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"
`, filepath.Join(logs, "*.log")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", toml, "--data-dir", dir, "--metrics-port", "0", "--segment-max-age", "50ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInProcess(t, cfg)
	qdir := filepath.Join(dir, config.DefaultQuarantineDirName, bufferGateQuarantine)
	var got []quarantine.Entry
	var lines []filesink.Line
	for deadline := time.Now().Add(30 * time.Second); len(got) == 0 || len(lines) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d quarantined, %d lines in the sink", len(got), len(lines))
		}
		time.Sleep(20 * time.Millisecond)
		got, _ = quarantine.ReadDir(vfs.OS, qdir)
		lines, _ = filesink.ReadDirFS(vfs.OS, cfg.Sink.File.Dir, true)
	}
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
