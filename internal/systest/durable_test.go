package systest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
)

// TestSecondaryNotDurable: a file secondary with durable = false runs next
// to a durable one: both receive everything, weir_secondary_durable tells
// them apart from the first scrape, and weir status marks the one that is
// not durable.
func TestSecondaryNotDurable(t *testing.T) {
	cfg := writeConfig(t, `
[[secondary]]
name = "fast"
type = "file"
durable = false

[[secondary]]
name = "safe"
type = "file"
`)
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()
	m := d.scrape()
	if _, ok := m[`weir_secondary_durable{sink="fast"}`]; !ok {
		t.Fatal("weir_secondary_durable{sink=\"fast\"} is not exported")
	}
	if m[`weir_secondary_durable{sink="fast"}`] != 0 || m[`weir_secondary_durable{sink="safe"}`] != 1 {
		t.Fatalf("weir_secondary_durable at start: fast %v, safe %v", m[`weir_secondary_durable{sink="fast"}`], m[`weir_secondary_durable{sink="safe"}`])
	}
	ctx := ctxTimeout(t, 30*time.Second)
	l := newLedger()
	produce(ctx, t, d.socket, "nd", 300, 10, client.Durable, l, 10*time.Second)
	want := l.snapshot()
	for _, name := range []string{"fast", "safe"} {
		dir := filepath.Join(d.dir, "secondary", name)
		deadline := time.Now().Add(30 * time.Second)
		for {
			lines, _ := filesink.ReadDirFS(vfs.OS, dir, true)
			got := map[string]bool{}
			for _, ln := range lines {
				got[string(ln.Payload)] = true
			}
			missing := 0
			for p := range want {
				if !got[p] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("secondary %s lacks %d of %d records\n%s", name, missing, len(want), tail(d.log.String(), 3000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !strings.Contains(d.log.String(), "secondary is not durable") {
		t.Error("no warning about the secondary that is not durable in the log")
	}
	out, errOut, code := weirCmd(t, nil, "status", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", d.metricsPort))
	if code != 0 {
		t.Fatalf("weir status: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, w := range []string{"secondary fast: NOT durable", "secondary safe: durable"} {
		if !strings.Contains(out, w) {
			t.Errorf("weir status lacks %q:\n%s", w, out)
		}
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
