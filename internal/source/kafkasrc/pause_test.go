package kafkasrc_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/source/kafkasrc"
)

// watch counts, on the broker, the JoinGroup requests (each rebalance
// needs them) and the Fetch requests that ask for any partition, and
// keeps the MaxBytes of each such fetch.
type watch struct {
	joins, fetches atomic.Int64

	mu       sync.Mutex
	maxBytes []int32
}

func (e *env) watch() *watch {
	w := &watch{}
	e.c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		w.joins.Add(1)
		return nil, nil, false // observe only
	})
	e.c.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		for _, t := range req.Topics {
			if len(t.Partitions) > 0 {
				w.fetches.Add(1)
				w.mu.Lock()
				w.maxBytes = append(w.maxBytes, req.MaxBytes)
				w.mu.Unlock()
				break
			}
		}
		return nil, nil, false
	})
	return w
}

// quiet waits until n stops changing for a while (the fetch in flight
// when the source paused has returned), bounded.
func quiet(t *testing.T, what string, n *atomic.Int64) {
	t.Helper()
	last, since := n.Load(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Since(since) < 500*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never stopped changing", what)
		}
		if v := n.Load(); v != last {
			last, since = v, time.Now()
		}
	}
}

// stays checks that cond holds for d (a paused source must not do
// something, and can only be watched not doing it).
func stays(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !cond() {
			t.Fatalf("while paused: %s", what)
		}
	}
}

// TestPauseKeepsTheGroup: a paused source sends no fetch for its
// partitions and writes nothing more, while it stays in the group — no
// JoinGroup, so no rebalance, however long it is paused — and once
// resumed it reads on from where it was, every commit checked against
// what is durable.
func TestPauseKeepsTheGroup(t *testing.T) {
	e := newEnv(t, 2)
	w := e.watch()
	e.produce("a", 100)
	g := &enginetest.CountGate{Inner: e.check}
	s := e.source("kafka", nil)
	r := start(s, g)
	e.waitAllCommitted()
	joins := w.joins.Load()

	s.Pause()
	s.Pause() // idempotent
	quiet(t, "fetching", &w.fetches)
	written, fetches := g.N.Load(), w.fetches.Load()
	e.produce("b", 100)
	// Several fetch waits (100ms) and heartbeats (100ms) long.
	stays(t, "records reached the gate or a fetch was sent", 1500*time.Millisecond, func() bool {
		return g.N.Load() == written && w.fetches.Load() == fetches
	})

	s.Resume()
	s.Resume()
	e.waitAllCommitted()
	r.Stop(t)
	if n := w.joins.Load(); n != joins {
		t.Fatalf("%d JoinGroup requests while paused and after: the group rebalanced", n-joins)
	}
	if len(enginetest.Summary(t, e.wab.Records(t))) != 200 {
		t.Fatal("records missing")
	}
}

// TestPartitionsAssignedWhilePausedStayPaused: A starts paused (Pause
// before Run) and B reads beside it; when B leaves, B's partitions move
// to A and stay paused too — nothing is fetched or written — until A is
// resumed, which then reads everything B did not commit.
func TestPartitionsAssignedWhilePausedStayPaused(t *testing.T) {
	const partitions = 4
	e := newEnv(t, partitions)
	w := e.watch()
	var mu sync.Mutex
	assignedA := map[int32]bool{}
	var lastAssign time.Time
	ga, gb := &enginetest.CountGate{Inner: e.check}, &enginetest.CountGate{Inner: e.check}
	a := e.source("kafka", func(o *kafkasrc.Options) {
		o.ClientOptions = append(o.ClientOptions, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[e.topic] {
				assignedA[p] = true
			}
			lastAssign = time.Now()
		}))
	})
	a.Pause()
	ra := start(a, ga)
	rb := start(e.source("kafka", nil), gb)
	e.produce("a", 200)
	waitFor(t, "B to write", 30*time.Second, func() bool { return gb.N.Load() > 0 })
	leaving := time.Now()
	rb.Stop(t)
	waitFor(t, "B's partitions to move to A", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(assignedA) == partitions && lastAssign.After(leaving)
	})
	quiet(t, "fetching", &w.fetches)
	fetches := w.fetches.Load()
	e.produce("b", 200)
	stays(t, "A fetched or wrote", 1500*time.Millisecond, func() bool {
		return ga.N.Load() == 0 && w.fetches.Load() == fetches
	})

	a.Resume()
	e.waitAllCommitted()
	ra.Stop(t)
	if ga.N.Load() == 0 {
		t.Fatal("A wrote nothing after Resume")
	}
	if len(enginetest.Summary(t, e.wab.Records(t))) != 400 {
		t.Fatal("records missing")
	}
}

// TestStagedFetch: the fetch limits derived from a prefetch bound and an
// expansion ratio.
func TestStagedFetch(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name     string
		prefetch int64
		ratio    float64
		want     kafkasrc.FetchSizes
	}{
		{"default budget, cold ratio", 128 * mib, flow.DefaultColdRatio, kafkasrc.FetchSizes{MaxBytes: 8 * mib, MaxPartitionBytes: mib, MaxConcurrentFetches: 4}},
		{"uncompressed", 128 * mib, 1, kafkasrc.FetchSizes{MaxBytes: 32 * mib, MaxPartitionBytes: mib, MaxConcurrentFetches: 4}},
		{"two fetches' worth", 8 * mib, 4, kafkasrc.FetchSizes{MaxBytes: mib, MaxPartitionBytes: mib, MaxConcurrentFetches: 2}},
		{"less than a partition's default", mib, 4, kafkasrc.FetchSizes{MaxBytes: mib / 4, MaxPartitionBytes: mib / 4, MaxConcurrentFetches: 1}},
		{"the least prefetch, well compressed", flow.MinPrefetch, 10, kafkasrc.FetchSizes{MaxBytes: 6553, MaxPartitionBytes: 6553, MaxConcurrentFetches: 1}},
		{"a ratio below 1 counts as 1", 2 * mib, 0.5, kafkasrc.FetchSizes{MaxBytes: mib, MaxPartitionBytes: mib, MaxConcurrentFetches: 2}},
		{"never above the client's defaults", 256 << 30, 1, kafkasrc.FetchSizes{MaxBytes: 50 * mib, MaxPartitionBytes: mib, MaxConcurrentFetches: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := kafkasrc.StagedFetch(tc.prefetch, tc.ratio)
			if got != tc.want {
				t.Fatalf("StagedFetch(%d, %v) = %+v, want %+v", tc.prefetch, tc.ratio, got, tc.want)
			}
			wire := max(float64(tc.prefetch)/max(tc.ratio, 1), float64(flow.MinPrefetch)/max(tc.ratio, 1))
			if total := float64(got.MaxBytes) * float64(got.MaxConcurrentFetches); total > wire {
				t.Fatalf("%d fetches of %d bytes exceed the %.0f compressed bytes allowed", got.MaxConcurrentFetches, got.MaxBytes, wire)
			}
		})
	}
}

// TestFetchLimitsFollowCompression: fetch limits start from the cold
// ratio; the fetch-batch hook measures the topic's compression, and once
// it is known the client asks for fewer compressed bytes per fetch, so
// that what they decompress to stays within the prefetch bound. The
// source's estimator hears of every polled batch.
func TestFetchLimitsFollowCompression(t *testing.T) {
	e := newEnv(t, 1)
	w := e.watch()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.DefaultProduceTopic(e.topic),
		kgo.ProducerBatchCompression(kgo.GzipCompression()))
	if err != nil {
		t.Fatal(err)
	}
	const batches = 2 * flow.DefaultMinSamples
	for i := range batches { // one record, one batch each
		v := append(bytes.Repeat([]byte("z"), 4000), fmt.Sprint(i)...)
		res := cl.ProduceSync(context.Background(), &kgo.Record{Value: v})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		r := res[0].Record
		e.check.ExpectPayload(v, enginetest.Position{Source: srcName, Partition: kafkasrc.PartitionKey(r.Topic, r.Partition), Offset: r.Offset})
	}
	cl.Close()
	const prefetch = 8 << 20
	est := flow.NewEstimator(16)
	s := e.source("kafka", func(o *kafkasrc.Options) {
		o.Prefetch, o.Estimator = prefetch, est
		o.MaxPollRecords = 1 // one gate write per batch: the estimator hears of each
	})
	r := start(s, e.check)
	e.waitAllCommitted()
	r.Stop(t)

	ratio := s.CompressionRatio()
	if ratio < 20 {
		t.Fatalf("measured compression ratio %.1f; 4000 equal bytes gzip far better", ratio)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	first, last := w.maxBytes[0], w.maxBytes[len(w.maxBytes)-1]
	if cold := kafkasrc.StagedFetch(prefetch, flow.DefaultColdRatio).MaxBytes; first != cold {
		t.Fatalf("first fetch asked for %d bytes, want %d (the cold ratio's)", first, cold)
	}
	if last >= first || last > kafkasrc.StagedFetch(prefetch, ratio*0.75).MaxBytes {
		t.Fatalf("fetches asked for %d bytes, then %d: not following the measured ratio %.1f", first, last, ratio)
	}
	if got := est.Ratio(); got == flow.DefaultColdRatio || got < 1 {
		t.Fatalf("the source's estimator: ratio %v after %d batches", got, batches)
	}
}
