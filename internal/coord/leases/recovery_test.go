package leases

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/sink"
)

// setSink is a secondary that keeps the ids it committed, slowly.
type setSink struct {
	mu  sync.Mutex
	ids map[sink.RecordID]bool
}

func (s *setSink) Name() string                       { return "pg" }
func (s *setSink) MaxBatchSize() int                  { return 100 }
func (s *setSink) Close() error                       { return nil }
func (s *setSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }

func (s *setSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return sink.CommitResult{}, sink.Transient(ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		s.ids[r.ID] = true
	}
	return sink.CommitResult{}, nil
}

func (s *setSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// claimed returns window → the highest token logs shows it claimed with.
func claimed(logs *enginetest.Logs) map[string]float64 {
	out := map[string]float64{}
	for _, r := range logs.Records("recovery window claimed") {
		w, _ := r["window"].(string)
		tok, _ := r["token"].(float64)
		out[w] = max(out[w], tok)
	}
	return out
}

// rawOf n records in dir, its end noted in the offset store there.
func rawOf(t *testing.T, dir string, n int) *filesink.Sink {
	t.Helper()
	ctx := context.Background()
	raw, err := filesink.New(ctx, filesink.Options{Dir: dir, Positions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	recs := make([]sink.Record, n)
	for i := range recs {
		recs[i] = sink.Record{ID: sink.RecordID{byte(i), byte(i >> 8), 0x77}, Payload: fmt.Appendf(nil, `{"i":%d}`, i), Received: time.Now()}
	}
	if _, _, err := raw.CommitRaw(ctx, sink.NewBatch(recs)); err != nil {
		t.Fatal(err)
	}
	st, err := engine.OpenOffsetStore(ctx, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	st.NoteRawEnd(uint64(n))
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return raw
}

// Two recovery nodes share one raw through etcd claims; one stops
// renewing its lease while it holds a window (its client closed). The
// other claims that window, with a larger token, once the lease has
// expired in etcd, and every position reaches the secondary.
func TestClaimedRecoveryOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	const n = 4000
	raw := rawOf(t, dir, n)
	snk := &setSink{ids: map[sink.RecordID]bool{}}
	cliA := newClient(t, srv)
	var nodes []*engine.Fanout
	logs := []*enginetest.Logs{{}, {}}
	for i, c := range []*Claims{newClaims(t, cliA, "a", time.Second), newClaims(t, newClient(t, srv), "b", time.Second)} {
		st, err := engine.OpenOffsetStore(context.Background(), nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
			Reader: raw, Store: st, Role: engine.RoleRecovery, Claims: c, ClaimPositions: 1000,
			WindowRecords: 100, FlushInterval: 20 * time.Millisecond, RecoveryInterval: 20 * time.Millisecond,
			RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, Logger: logs[i].Logger(),
			Secondaries: []engine.SecondaryConfig{{Sink: snk}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		nodes = append(nodes, f)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(claimed(logs[0])) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	heldByA := claimed(logs[0])
	cliA.Close() // node a stops renewing, holding a window
	deadline = time.Now().Add(30 * time.Second)
	for snk.count() < n || nodes[1].Stats().Sinks[0].CoveredPrefix < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the secondary holds %d of %d records; node b: %+v", snk.count(), n, nodes[1].Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	byB := claimed(logs[1])
	for w, tok := range heldByA {
		if byB[w] <= tok {
			t.Errorf("window %s: a held it with token %v; b's claim: %v", w, tok, byB[w])
		}
	}
	if len(heldByA) == 0 {
		t.Fatal("node a never claimed a window")
	}
}
