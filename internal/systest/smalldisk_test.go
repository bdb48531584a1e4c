package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/wire"
)

// TestSmallDiskStart starts the real binary, with every default (64 MiB
// preallocated per segment, a shard per CPU, the file sink in data_dir),
// on a small ext4 file system with 20 MiB free. The shards cannot reserve
// what they want; the daemon must still create every directory it needs,
// become ready, store small Durable pushes on every connection (each
// shard), answer DiskFull to pushes that no longer fit, and, once space is
// freed, deliver everything it acknowledged — which it cannot if the
// segments made after a seal take the freed space back for reservations
// the sink then lacks. Needs root and the loop-device tools
// (testenv.LoopExt4).
func TestSmallDiskStart(t *testing.T) {
	mnt := testenv.LoopExt4(t, 64<<20)
	testenv.FillTo(t, mnt, 20<<20)
	dataDir := filepath.Join(mnt, "data")
	d := &daemon{t: t, dir: dataDir, socket: filepath.Join(dataDir, "weir.sock"), metricsPort: freePort(t), httpPort: freePort(t)}
	d.args = []string{"serve", "--data-dir", dataDir, "--metrics-port", strconv.Itoa(d.metricsPort),
		"--http-listen", "127.0.0.1:" + strconv.Itoa(d.httpPort)}
	d.start()
	t.Cleanup(func() {
		if t.Failed() {
			// What holds the space: the sink's files, the segments and
			// their reservations (ls -s counts allocated blocks).
			du, _ := exec.Command("sh", "-c", "df -B1 "+mnt+"; ls -lsR "+mnt).CombinedOutput()
			t.Logf("--- disk ---\n%s\n--- daemon log (tail) ---\n%s", du, tail(d.log.String(), 6000))
		}
	})

	ctx := ctxTimeout(t, 2*time.Minute)
	want := map[string]bool{}
	push := func(c *client.Client, p []byte) error {
		err := c.Push(ctx, p, client.Durable)
		if err == nil {
			want[string(p)] = true
		}
		return err
	}
	// Connections are pinned to shards round-robin: four reach each
	// shard of a two-CPU machine at least once.
	var conns []*client.Client
	for i := range 4 {
		c, err := client.Dial(ctx, d.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		conns = append(conns, c)
		for j := range 20 {
			if err := push(c, fmt.Appendf(nil, "small-%d-%02d", i, j)); err != nil {
				t.Fatalf("connection %d: a small Durable push with 20 MiB free: %v", i, err)
			}
		}
	}
	// Pushes of 1 MiB until the disk refuses one: DiskFull, never a
	// failed shard, and small pushes are still stored afterwards.
	big := strings.Repeat("b", 1<<20)
	var full *client.NackError
	for i := 0; i < 64 && full == nil; i++ {
		err := push(conns[0], fmt.Appendf(nil, "big-%02d-%s", i, big))
		if err != nil && !errors.As(err, &full) {
			t.Fatalf("big push %d: %v", i, err)
		}
	}
	if full == nil || full.Code != wire.CodeDiskFull {
		t.Fatalf("64 pushes of 1 MiB on a 64 MiB disk: got %v, want a DiskFull refusal", full)
	}
	t.Logf("%d records acked before DiskFull", len(want))
	// Free the space: everything acknowledged reaches the sink, and the
	// daemon takes big pushes again.
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, d, want, 90*time.Second)
	if err := push(conns[1], []byte("after-"+big)); err != nil {
		t.Fatalf("a big push once space is back: %v", err)
	}
	waitDelivered(t, d, want, 60*time.Second)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
