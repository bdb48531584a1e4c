package systest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

// pushSerial pushes records "<name>-<i>" one at a time, waiting for each
// answer, and returns the acked ones and the first Nack code seen after the
// first failure along with every later code.
func pushSerial(t *testing.T, socket, name string, n int, tier client.Durability) (acked []string, codes []wire.Code) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := client.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for i := 0; i < n; i++ {
		p := fmt.Sprintf("%s-%05d", name, i)
		err := c.Push(ctx, []byte(p), tier)
		var ne *client.NackError
		switch {
		case err == nil:
			acked = append(acked, p)
		case errors.As(err, &ne):
			codes = append(codes, ne.Code)
		default:
			t.Fatalf("push %s: %v", p, err)
		}
	}
	return acked, codes
}

// TestFdatasyncEIO injects EIO into the 6th fdatasync of the open segment:
// that batch is not acked, fdatasync is never called on the file again, the
// shard answers ShardFailed until restart, and after a restart without the
// fault every acked record is delivered.
func TestFdatasyncEIO(t *testing.T) {
	d := newDaemon(t, "--shards", "1", "--segment-max-age", "1h")
	d.env = []string{"WEIR_FAULTS=sync:*/shard-000/*.wab:after=5:once:EIO"}
	d.start()
	acked, codes := pushSerial(t, d.socket, "eio", 40, client.Durable)
	t.Logf("acked %d, then %d nacks (first %v)", len(acked), len(codes), codes[0])
	// The segment's creation syncs once (header), then one sync per record:
	// records 0..3 are acked, the 5th record's sync fails.
	if len(acked) == 0 || len(acked) >= 40 {
		t.Fatalf("acked %d of 40; want some acked before the fault and none after", len(acked))
	}
	if len(codes) != 40-len(acked) {
		t.Fatalf("%d nacks for %d unacked records", len(codes), 40-len(acked))
	}
	for i, c := range codes {
		if c != wire.CodeShardFailed {
			t.Fatalf("nack %d: %v, want ShardFailed for the failed batch and every later push", i, c)
		}
	}
	for i, p := range acked {
		if p != fmt.Sprintf("eio-%05d", i) {
			t.Fatalf("acked records are not a prefix: %v", acked)
		}
	}
	log := d.log.String()
	if !strings.Contains(log, "fault injected") {
		t.Fatalf("the fault was never injected:\n%s", tail(log, 3000))
	}
	if strings.Contains(log, "fdatasync retried after failure") {
		t.Fatalf("weir called fdatasync again on a file whose fdatasync failed:\n%s", tail(log, 3000))
	}
	d.kill()

	d.env = nil
	d.start()
	want := map[string]bool{}
	for _, p := range acked {
		want[p] = true
	}
	waitDelivered(t, d, want, 30*time.Second)
	// The shard serves again after the restart.
	after, codes := pushSerial(t, d.socket, "after-eio", 10, client.Durable)
	if len(after) != 10 {
		t.Fatalf("after restart: acked %d of 10, nacks %v", len(after), codes)
	}
}

// TestENOSPC makes every write to the open segment fail with ENOSPC after
// the 8th, and also tears those writes (half the batch reaches the file):
// the first refused push gets DiskFull or — since a torn write fails the
// shard for good — ShardFailed, and nothing previously acked is lost across
// a restart. A clean ENOSPC (nothing written) leaves the shard serving; see
// TestENOSPCClean.
func TestENOSPC(t *testing.T) {
	d := newDaemon(t, "--shards", "1", "--segment-max-age", "1h")
	d.env = []string{"WEIR_FAULTS=write:*/shard-000/*.wab:after=8:ENOSPC:torn"}
	d.start()
	acked, codes := pushSerial(t, d.socket, "nospc", 30, client.Buffered)
	t.Logf("acked %d, then %d nacks %v", len(acked), len(codes), codes)
	if len(acked) == 0 || len(acked) >= 30 {
		t.Fatalf("acked %d of 30; want a prefix acked, the rest refused", len(acked))
	}
	for _, c := range codes {
		if c != wire.CodeDiskFull && c != wire.CodeShardFailed {
			t.Fatalf("nack %v, want DiskFull or ShardFailed", c)
		}
	}
	d.kill()
	d.env = nil
	d.start()
	want := map[string]bool{}
	for _, p := range acked {
		want[p] = true
	}
	got := waitDelivered(t, d, want, 30*time.Second)
	for i := len(acked); i < 30; i++ {
		if p := fmt.Sprintf("nospc-%05d", i); got[p] != 0 {
			t.Errorf("refused record %s was delivered (a torn record must be cut at recovery)", p)
		}
	}
}

// TestENOSPCClean: ENOSPC with nothing written fails only that batch with
// DiskFull; the shard keeps serving, and once space is back (the rule fires
// once) the next pushes are acked again.
func TestENOSPCClean(t *testing.T) {
	d := newDaemon(t, "--shards", "1", "--segment-max-age", "1h")
	d.env = []string{"WEIR_FAULTS=write:*/shard-000/*.wab:after=5:once:ENOSPC"}
	d.start()
	acked, codes := pushSerial(t, d.socket, "clean", 10, client.Durable)
	t.Logf("acked %d, nacks %v", len(acked), codes)
	if len(codes) != 1 || len(acked) != 9 {
		t.Fatalf("acked %d, nacked %v; want exactly the one push that hit ENOSPC refused", len(acked), codes)
	}
	for _, c := range codes {
		if c != wire.CodeDiskFull {
			t.Fatalf("nack %v, want DiskFull (the shard must not fail on a clean ENOSPC)", c)
		}
	}
	d.kill()
	d.env = nil
	d.start()
	want := map[string]bool{}
	for _, p := range acked {
		want[p] = true
	}
	waitDelivered(t, d, want, 30*time.Second)
}
