package quarantine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

// TestOnDemand: each batch is written and synced into a new file and
// nothing stays open; the lane's bound holds across batches; a failed
// fdatasync fails only its batch (never retried on that file), and the
// next batch goes to a new file.
func TestOnDemand(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	lane := quarantine.NewOnDemand(quarantine.Options{FS: efs, Dir: dir, MaxBytes: 8 << 10})
	ctx := context.Background()
	if err := lane.Reject(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if names, _ := vfs.OS.ReadDir(dir); len(names) != 0 {
		t.Fatalf("an empty batch created %v", names)
	}
	want := append(recs("buffer", 0, 2, false), recs("buffer", 2, 1, false)...)
	want[1].OriginPos = "orders/3@1234"
	for _, b := range [][]int{{0, 2}, {2, 3}} {
		if err := lane.Reject(ctx, want[b[0]:b[1]]); err != nil {
			t.Fatal(err)
		}
	}
	if n := efs.Calls(errorfs.OpSync); n != 2 {
		t.Fatalf("%d fdatasyncs for two batches", n)
	}
	names, err := vfs.OS.ReadDir(dir)
	if err != nil || len(names) != 2 {
		t.Fatalf("files %v (%v), want one per batch", names, err)
	}
	got, err := quarantine.ReadDir(vfs.OS, dir)
	if err != nil || len(got) != len(want) {
		t.Fatalf("read %d (%v), want %d", len(got), err, len(want))
	}
	for i := range got {
		checkRejection(t, got[i], want[i])
		if got[i].OriginPos != want[i].OriginPos {
			t.Errorf("entry %d: origin_pos %q, want %q", i, got[i].OriginPos, want[i].OriginPos)
		}
	}

	efs.Add(errorfs.Rule{Op: errorfs.OpSync, Once: true})
	syncs := efs.Calls(errorfs.OpSync)
	if err := lane.Reject(ctx, recs("buffer", 3, 1, false)); !errors.Is(err, quarantine.ErrStopped) {
		t.Fatalf("batch with a failing fdatasync: %v, want ErrStopped", err)
	}
	if err := lane.Reject(ctx, recs("buffer", 4, 1, false)); err != nil {
		t.Fatalf("the batch after: %v", err)
	}
	if n := efs.Calls(errorfs.OpSync) - syncs; n != 2 {
		t.Fatalf("%d fdatasyncs for the failed batch and the next, want 2 (no retry)", n)
	}

	// The bound counts what every earlier batch left in the directory.
	if err := lane.Reject(ctx, recs("buffer", 10, 20, false)); !errors.Is(err, quarantine.ErrFull) {
		t.Fatalf("batch past max_bytes: %v, want ErrFull", err)
	}
}
