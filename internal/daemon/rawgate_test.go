package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/config"
)

// With gate = "raw", a record primary raw refuses lands in
// <data_dir>/quarantine/raw with its rejection: here a line larger than the
// Parquet sink's max_payload_bytes, which the sink refuses as oversize.
func TestRawGateQuarantinesWithReasonCode(t *testing.T) {
	dir := t.TempDir() // no socket with gate = raw: any length will do
	big := strings.Repeat("x", 2000)
	if err := os.WriteFile(filepath.Join(dir, "a.log"), []byte("small-1\n"+big+"\nsmall-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, dir, fmt.Sprintf(`
gate = "raw"
[sink]
type = "parquet"
[sink.parquet]
max_payload_bytes = "1KiB"

[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"
`, filepath.Join(dir, "*.log")))
	stop := runInProcess(t, cfg)
	got := waitQuarantined(t, filepath.Join(dir, config.DefaultQuarantineDirName, rawGateQuarantine), nil)
	stop()
	e := got[0]
	if len(got) != 1 || e.Record.Payload != big || e.ReasonCode != "oversize" || e.Stage != "gate" ||
		e.Component != "parquet" || e.Attempts != 1 || e.FirstSeen == "" || e.Sink != rawGateQuarantine ||
		!strings.Contains(e.Error, "max_payload_bytes") {
		t.Fatalf("quarantined %d: %+v", len(got), e)
	}
}
