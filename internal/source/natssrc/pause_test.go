package natssrc_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/source/natssrc"
)

// pulls watches the consumer's pull requests on their API subject, as
// the server receives them: how many, and the last one's body.
type pulls struct {
	n    atomic.Int64
	mu   sync.Mutex
	last struct {
		Batch    int `json:"batch"`
		MaxBytes int `json:"max_bytes"`
	}
}

func (e *env) watchPulls() *pulls {
	e.t.Helper()
	p := &pulls{}
	sub, err := e.nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT."+e.stream+".weir", func(m *nats.Msg) {
		p.n.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.Unmarshal(m.Data, &p.last)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return p
}

// consumerInfo is the consumer's state on the server.
func (e *env) consumerInfo() *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := e.js.Consumer(ctx, e.stream, "weir")
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// TestPauseStopsPulling: a paused source sends no pull request and
// writes nothing — the messages wait on the server, none delivered
// unacked — and once resumed it reads them all.
func TestPauseStopsPulling(t *testing.T) {
	e := newEnv(t)
	p := e.watchPulls()
	e.publish("a", 50)
	g := &enginetest.CountGate{Inner: e.check}
	s := e.source(nil)
	r := start(context.Background(), s, g)
	e.settled()

	s.Pause()
	s.Pause()
	// The pull in flight when it paused ends within FetchMaxWait (200ms).
	last, since := p.n.Load(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Since(since) < 600*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("pulls never stopped")
		}
		if v := p.n.Load(); v != last {
			last, since = v, time.Now()
		}
	}
	written := g.N.Load()
	e.publish("b", 50)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if p.n.Load() != last || g.N.Load() != written {
			t.Fatalf("while paused: %d more pulls, %d more records written", p.n.Load()-last, g.N.Load()-written)
		}
	}
	info := e.consumerInfo()
	if info.NumPending != 50 || info.NumAckPending != 0 {
		t.Fatalf("while paused the consumer has %d pending, %d delivered unacked; want 50 and 0", info.NumPending, info.NumAckPending)
	}

	s.Resume()
	s.Resume()
	e.settled()
	r.Stop(t)
	if len(enginetest.Summary(t, e.wab.Records(t))) != 100 {
		t.Fatal("records missing")
	}
}

// TestStagedPull: pull limits derived from a prefetch bound only ever
// lower the configured ones, and never below what one message may take.
func TestStagedPull(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	base := natssrc.PullLimits{FetchBatch: 256, MaxAckPending: 1024}
	for _, tc := range []struct {
		name       string
		base       natssrc.PullLimits
		prefetch   int64
		ratio      float64
		recordSize int64
		want       natssrc.PullLimits
	}{
		{"default budget, cold ratio", base, 128 * mib, flow.DefaultColdRatio, 256,
			natssrc.PullLimits{FetchBatch: 256, MaxAckPending: 1024, MaxBytes: 32 * mib}},
		{"uncompressed", base, 128 * mib, 1, 256, natssrc.PullLimits{FetchBatch: 256, MaxAckPending: 1024, MaxBytes: 128 * mib}},
		{"a ratio below 1 counts as 1", base, 8 * mib, 0.5, 256, natssrc.PullLimits{FetchBatch: 256, MaxAckPending: 1024, MaxBytes: 8 * mib}},
		{"small budget: ack pending lowered", base, 64 * kib, flow.DefaultColdRatio, 256,
			natssrc.PullLimits{FetchBatch: 256, MaxAckPending: 256, MaxBytes: mib + 4*kib}},
		{"large records: fetch batch lowered with it", base, 64 * kib, 2, 1 * kib,
			natssrc.PullLimits{FetchBatch: 64, MaxAckPending: 64, MaxBytes: mib + 4*kib}},
		{"an explicit smaller MaxBytes stays", natssrc.PullLimits{FetchBatch: 10, MaxAckPending: 40, MaxBytes: 100 * kib}, 128 * mib, 1, 256,
			natssrc.PullLimits{FetchBatch: 10, MaxAckPending: 40, MaxBytes: 100 * kib}},
		{"at least one", base, 1, 1, 1 * mib, natssrc.PullLimits{FetchBatch: 1, MaxAckPending: 1, MaxBytes: mib + 4*kib}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := natssrc.StagedPull(tc.base, tc.prefetch, tc.ratio, tc.recordSize, mib); got != tc.want {
				t.Fatalf("StagedPull = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPrefetchLimitsApplied: given a prefetch bound, the consumer is
// created with the lowered MaxAckPending and each pull carries the
// derived MaxBytes and batch; every message still arrives.
func TestPrefetchLimitsApplied(t *testing.T) {
	e := newEnv(t)
	p := e.watchPulls()
	e.publish("a", 200)
	const prefetch = 16 << 10
	est := flow.NewEstimator(256) // prefetch ÷ 256 = 64 records
	s := e.source(func(o *natssrc.Options) { o.Prefetch, o.Estimator, o.FetchBatch = prefetch, est, 100 })
	r := start(context.Background(), s, e.check)
	e.settled()
	r.Stop(t)
	info := e.consumerInfo()
	want := natssrc.StagedPull(natssrc.PullLimits{FetchBatch: 100, MaxAckPending: 400}, prefetch, flow.DefaultColdRatio, 256, e.nc.MaxPayload())
	if want.MaxAckPending != 64 || info.Config.MaxAckPending != want.MaxAckPending {
		t.Fatalf("consumer MaxAckPending %d, want %d", info.Config.MaxAckPending, want.MaxAckPending)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.Batch != want.FetchBatch || p.last.MaxBytes != want.MaxBytes {
		t.Fatalf("pull asked for %d messages, %d bytes; want %d, %d", p.last.Batch, p.last.MaxBytes, want.FetchBatch, want.MaxBytes)
	}
	if len(enginetest.Summary(t, e.wab.Records(t))) != 200 {
		t.Fatal("records missing")
	}
}
