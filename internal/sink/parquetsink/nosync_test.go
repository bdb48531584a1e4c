package parquetsink

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/sink"
)

// TestNoSync: with NoSync (a secondary with durable = false) the stage is
// not fdatasynced at each Commit; the Parquet file it becomes still is.
// Raw mode refuses NoSync.
func TestNoSync(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	var mu sync.Mutex
	synced := map[string]int{} // by suffix
	efs.SetHook(func(e errorfs.Event) {
		if e.Op == errorfs.OpSync {
			mu.Lock()
			synced[filepath.Ext(strings.TrimSuffix(e.Path, ".tmp"))]++
			mu.Unlock()
		}
	})
	count := func(suffix string) int { mu.Lock(); defer mu.Unlock(); return synced[suffix] }
	s := open(t, Options{Dir: dir, FS: efs, NoSync: true})
	a, b := mkRecords("a", 20), mkRecords("b", 30)
	commit(t, s, a)
	commit(t, s, b)
	if n := count(SuffixStage); n != 0 {
		t.Errorf("the stage was fdatasynced %d times", n)
	}
	if err := s.Close(); err != nil { // writes the Parquet file
		t.Fatal(err)
	}
	if n := count(SuffixParquet); n == 0 {
		t.Error("the Parquet file was not fdatasynced")
	}
	checkAll(t, dir, append(append([]sink.Record(nil), a...), b...))
	if _, err := New(context.Background(), Options{Dir: t.TempDir(), Positions: true, NoSync: true}); err == nil {
		t.Error("raw mode accepted NoSync")
	}
}
