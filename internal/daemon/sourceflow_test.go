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

// A [[source]] record whose estimated memory exceeds what the budget can
// grant — here during warm-up: 1% of 4 MiB is ~41 KiB, and a 20000-byte
// line is estimated at 80000 bytes (the cold expansion ratio, 4) — lands in
// the gate's quarantine lane with code oversize, and the lines around it
// reach the sink; with flow.admission = false nothing is reserved, so
// nothing is refused. For the buffer node (lane quarantine/buffer) and a
// raw-gate node (lane quarantine/raw).
func TestSourceAdmissionOversize(t *testing.T) {
	big := strings.Repeat("x", 20000)
	for _, tc := range []struct {
		name      string
		gate      string // "" or "raw"
		lane      string
		admission bool
	}{
		{"buffer", "", bufferGateQuarantine, true},
		{"raw gate", "raw", rawGateQuarantine, true},
		{"buffer, admission off", "", bufferGateQuarantine, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, logs := shortDataDir(t)
			if err := os.WriteFile(filepath.Join(logs, "a.log"), []byte("small-1\n"+big+"\nsmall-2\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			gate := ""
			if tc.gate != "" {
				gate = fmt.Sprintf("gate = %q\n", tc.gate)
			}
			cfg := loadConfig(t, dir, fmt.Sprintf(`%smemory_budget = "4MiB"
max_frame_bytes = "1MiB"

[flow]
admission = %v
warmup_percent = 1
warmup_timeout = "1h"

[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"
`, gate, tc.admission, filepath.Join(logs, "*.log")), "--segment-max-age", "50ms")
			stop := runInProcess(t, cfg)
			var lines []filesink.Line
			want := 3
			if tc.admission {
				want = 2
			}
			qdir := filepath.Join(dir, config.DefaultQuarantineDirName, tc.lane)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				lines, _ = filesink.ReadDirFS(vfs.OS, cfg.SinkDir(cfg.Sink), true)
				if len(lines) >= want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 30s the sink holds %d lines, want %d", len(lines), want)
				}
			}
			stop()
			got, _ := quarantine.ReadDir(vfs.OS, qdir)
			if !tc.admission {
				if len(got) != 0 || len(lines) != 3 || string(lines[1].Payload) != big {
					t.Fatalf("admission off: %d quarantined, sink holds %d lines", len(got), len(lines))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d records in %s, want the big line", len(got), qdir)
			}
			e := got[0]
			if e.Record.Payload != big || e.ReasonCode != "oversize" || e.Stage != "gate" || e.Component != tc.lane ||
				e.Sink != tc.lane || e.Attempts != 1 || !strings.Contains(e.Error, "memory budget can grant") {
				t.Fatalf("quarantined: %+v", e)
			}
			if len(lines) != 2 || string(lines[0].Payload) != "small-1" || string(lines[1].Payload) != "small-2" {
				t.Fatalf("sink holds %d lines: %+v", len(lines), lines)
			}
		})
	}
}
