package leases

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/sink"
)

func TestEpochKey(t *testing.T) {
	if k := epochKey("/weir/recovery/windows/"); k != "/weir/recovery/epoch" {
		t.Fatalf("epochKey: %s", k)
	}
}

// oldCluster claims windows pg/0 … pg/(n-1) in a cluster whose revisions
// went far (many writes), and enters them in the offset store in dir:
// the fences a lost coordination store leaves behind. It returns the
// old holder's fences.
func oldCluster(t *testing.T, dir string, windows int) []engine.Fence {
	t.Helper()
	ctx := context.Background()
	srv := etcdtest.Start(t)
	cli := newClient(t, srv)
	for i := range 2000 {
		if _, err := cli.Put(ctx, "/churn", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := engine.OpenOffsetStore(ctx, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newClaims(t, cli, "old", 10*time.Second)
	if err := a.RaiseAbove(ctx, st.MaxFence()); err != nil {
		t.Fatal(err)
	}
	var out []engine.Fence
	for k := range windows {
		w := engine.WindowKey("pg", uint64(k))
		cl, ok := take(t, a, w)
		if !ok {
			t.Fatalf("old cluster: %s not claimed", w)
		}
		f := engine.Fence{Window: w, Token: cl.Token()}
		if err := st.Enter(ctx, f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// Issue #25: a coordination store lost without a backup stalled claimed
// recovery for good — the new cluster's tokens (revisions) started below
// the fences in the offset store, and Enter refused them ("claim token 3,
// store holds 2033"). The claims' epoch, raised above the store's highest
// fence before the first claim, puts every new token above them: a fresh
// etcd recovers every position, and the old cluster's holder is refused.
func TestFreshStoreRecoversAboveOldFences(t *testing.T) {
	dir := t.TempDir()
	const n = 4000
	raw := rawOf(t, dir, n)
	old := oldCluster(t, dir, n/1000)

	srv := etcdtest.Start(t) // the new cluster: no history
	st, err := engine.OpenOffsetStore(context.Background(), nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	snk := &setSink{ids: map[sink.RecordID]bool{}}
	logs := &enginetest.Logs{}
	start := time.Now()
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: st, Role: engine.RoleRecovery, Claims: newClaims(t, newClient(t, srv), "new", time.Second),
		ClaimPositions: 1000, WindowRecords: 100, FlushInterval: 20 * time.Millisecond, RecoveryInterval: 20 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Logger: logs.Logger(),
		Secondaries: []engine.SecondaryConfig{{Sink: snk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for snk.count() < n || f.Stats().Sinks[0].CoveredPrefix < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the secondary holds %d of %d records, covered to %d: recovery stalled on the old fences",
				snk.count(), n, f.Stats().Sinks[0].CoveredPrefix)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("a fresh claims store recovered %d positions over the old fences in %v", n, time.Since(start).Round(time.Millisecond))
	byNew := claimed(logs)
	for _, fo := range old {
		if tok := uint64(byNew[fo.Window]); tok <= fo.Token {
			t.Errorf("window %s: the old cluster's token %d, the new one's %d", fo.Window, fo.Token, tok)
		}
		// The old cluster's holder, still working, is refused.
		if err := st.CoverFenced(context.Background(), "pg", 0, 10, fo); !errors.Is(err, engine.ErrFenced) {
			t.Errorf("the old cluster's holder of %s recorded coverage: %v", fo.Window, err)
		}
	}
}
