package engine_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// probeSink records, at each Commit, its records and what the budget
// holds then; it fails every Commit while fail is set.
type probeSink struct {
	budget *flow.Budget
	fail   error

	mu      sync.Mutex
	commits [][]sink.Record
	inUse   []int64
}

func (p *probeSink) Name() string                       { return "probe" }
func (p *probeSink) MaxBatchSize() int                  { return 0 }
func (p *probeSink) Close() error                       { return nil }
func (p *probeSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }

func (p *probeSink) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse = append(p.inUse, p.budget.Stats().InUse)
	if p.fail != nil {
		return sink.CommitResult{}, sink.Transient(p.fail)
	}
	p.commits = append(p.commits, b.Records)
	return sink.CommitResult{}, nil
}

// sized is n records of the source "s" with payloads of the given sizes
// (size[i] or, beyond them, the last size).
func sized(n int, sizes ...int) []source.Record {
	out := enginetest.Records("s", 0, n)
	for i := range out {
		sz := sizes[min(i, len(sizes)-1)]
		out[i].Payload = bytes.Repeat([]byte{byte('a' + i%26)}, sz)
		out[i].OriginPos = "t/0@" + string(rune('0'+i%10))
	}
	return out
}

// dataSize is the sum of the records' Size.
func dataSize(recs []source.Record) int64 {
	d, _ := source.Sizes(recs)
	return d
}

// TestAdmission: a Write reserves its batch's estimate while the inner
// gate writes and releases exactly that when it returns, whatever the
// outcome; a batch larger than what is grantable is written in parts that
// each fit; a record whose own estimate exceeds what is grantable — here
// during warm-up, below the budget itself — goes to the gate's lane with
// code oversize while the records around it are written, or fails the
// Write when the gate has no lane.
func TestAdmission(t *testing.T) {
	const floor = 16 // the estimator's ratio is the cold one, 4
	for _, tc := range []struct {
		name      string
		limit     int64
		warmup    float64 // 0: none
		recs      []source.Record
		noLane    bool
		sinkFails bool

		wantParts   []int // records per commit
		wantOver    []int // indexes quarantined
		wantErr     error
		wantReserve []int64 // in use during each commit (nil: the whole batch's estimate)
	}{
		{name: "one part", limit: 1 << 20, recs: sized(10, 100), wantParts: []int{10}},
		{name: "small records reserve the floor", limit: 1 << 20, recs: sized(10, 1), wantParts: []int{10},
			wantReserve: []int64{10 * floor}},
		// 4 KiB grantable: 10 records of 400 bytes estimate 1600 each.
		{name: "parts that fit", limit: 4 << 10, recs: sized(10, 400), wantParts: []int{2, 2, 2, 2, 2},
			wantReserve: []int64{3200, 3200, 3200, 3200, 3200}},
		// 1 MiB budget warming up from 1%: ~10 KiB grantable, so a 5 KiB
		// record (20 KiB estimated) is oversize though the budget holds it.
		{name: "oversize during warm-up", limit: 1 << 20, warmup: 0.01, recs: sized(6, 100, 100, 5<<10, 100),
			wantParts: []int{5}, wantOver: []int{2}},
		{name: "every record oversize", limit: 1 << 20, warmup: 0.01, recs: sized(3, 5<<10), wantOver: []int{0, 1, 2}},
		{name: "oversize without a lane", limit: 1 << 20, warmup: 0.01, recs: sized(4, 100, 5<<10), noLane: true,
			wantErr: flow.ErrOversize},
		{name: "sink fails", limit: 1 << 20, recs: sized(10, 100), sinkFails: true, wantErr: errMemDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bo := flow.BudgetOptions{Limit: tc.limit, WarmupFraction: 1}
			if tc.warmup > 0 {
				bo.WarmupFraction, bo.WarmupTimeout = tc.warmup, time.Hour
			}
			budget := flow.NewBudget(bo)
			defer budget.Close()
			est := flow.NewEstimator(floor)
			probe := &probeSink{budget: budget}
			if tc.sinkFails {
				probe.fail = errMemDown
			}
			lane := &laneRecorder{}
			opts := engine.SinkGateOptions{Name: "raw", Quarantine: lane}
			if tc.noLane {
				opts.Quarantine = nil
			}
			var oversize int
			g := engine.NewSinkGate(probe, opts).WithAdmission(engine.Admission{Budget: budget, Estimator: est,
				OnOversize: func(n int) { oversize += n }})

			err := g.Write(context.Background(), tc.recs)
			if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
				t.Fatalf("after Write: %d bytes still held, %d waiting", st.InUse, st.Waiting)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Write = %v, want %v", err, tc.wantErr)
				}
				if tc.wantErr == flow.ErrOversize && (len(probe.commits) != 0 || !errors.Is(err, engine.ErrGate)) {
					t.Fatalf("Write = %v after %d commits, want ErrGate and nothing written", err, len(probe.commits))
				}
				return
			}
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			over := map[int]bool{}
			for _, i := range tc.wantOver {
				over[i] = true
			}
			var wantWritten []source.Record
			for i := range tc.recs {
				if !over[i] {
					wantWritten = append(wantWritten, tc.recs[i])
				}
			}
			var parts []int
			var written []sink.Record
			for _, c := range probe.commits {
				parts = append(parts, len(c))
				written = append(written, c...)
			}
			if !slices.Equal(parts, tc.wantParts) {
				t.Fatalf("commits of %v records, want %v", parts, tc.wantParts)
			}
			for i := range written {
				if written[i].ID != wantWritten[i].ID {
					t.Fatalf("record %d written is %s, want %s", i, written[i].Payload, wantWritten[i].Payload)
				}
			}
			want := tc.wantReserve
			if want == nil && len(wantWritten) > 0 {
				want = []int64{est.EstimateBatch(len(wantWritten), dataSize(wantWritten))}
			}
			if !slices.Equal(probe.inUse, want) {
				t.Fatalf("held %v during the commits, want %v", probe.inUse, want)
			}
			grantable := budget.Stats().Grantable
			for _, n := range probe.inUse {
				if n > grantable {
					t.Fatalf("held %d, more than the %d grantable", n, grantable)
				}
			}
			if len(lane.recs) != len(tc.wantOver) || oversize != len(tc.wantOver) {
				t.Fatalf("lane holds %d, %d counted oversize; want %d", len(lane.recs), oversize, len(tc.wantOver))
			}
			for k, q := range lane.recs {
				r := tc.recs[tc.wantOver[k]]
				rj := q.Reject
				if q.Record.ID != r.ID || q.Sink != "raw" || q.OriginPos != r.OriginPos || rj.Code != record.CodeOversize ||
					rj.Stage != record.StageGate || rj.Component != "raw" || rj.Attempts != 1 ||
					!strings.Contains(rj.Error, "more than the") || !strings.Contains(rj.Error, "memory budget can grant now") {
					t.Errorf("lane record %d: %+v", k, q)
				}
			}
		})
	}
}

// TestAdmissionWABGate: through the write-ahead buffer's gate an
// oversize record lands in the buffer's lane — the one over-max_frame_bytes
// records take — counted by the gate's observer, and the records after it
// are in the buffer.
func TestAdmissionWABGate(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	lane, counts := &laneRecorder{}, gateCounts{}
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{Quarantine: lane, Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 10, WarmupFraction: 1})
	defer budget.Close()
	ag := g.WithAdmission(engine.Admission{Budget: budget, Estimator: flow.NewEstimator(16)})
	batch := sized(5, 100, 20<<10, 100) // 80 KiB estimated: more than the whole budget
	if err := ag.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	stored := w.Records(t)
	if len(stored) != 4 || stored[0].ID != batch[0].ID || stored[1].ID != batch[2].ID {
		t.Fatalf("buffer holds %d records", len(stored))
	}
	if len(lane.recs) != 1 || lane.recs[0].Record.ID != batch[1].ID || lane.recs[0].Sink != "buffer" ||
		lane.recs[0].Reject.Code != record.CodeOversize || counts[record.CodeOversize] != 1 {
		t.Fatalf("lane holds %+v, counted %v", lane.recs, counts)
	}
	if st := budget.Stats(); st.InUse != 0 {
		t.Fatalf("%d bytes held after the Write", st.InUse)
	}
}

// TestAdmissionWaitsAndGivesUp: a Write waits while the budget is held
// elsewhere, writes once it is released, and gives up — holding nothing —
// when its context ends first.
func TestAdmissionWaitsAndGivesUp(t *testing.T) {
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 10, WarmupFraction: 1})
	defer budget.Close()
	probe := &probeSink{budget: budget}
	g := engine.NewSinkGate(probe, engine.SinkGateOptions{}).WithAdmission(engine.Admission{Budget: budget, Estimator: flow.NewEstimator(16)})
	if ok, _ := budget.TryAcquire(60 << 10); !ok {
		t.Fatal("could not fill the budget")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := g.Write(ctx, sized(10, 1000)) // 40 KiB estimated
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, engine.ErrGate) {
		t.Fatalf("Write = %v, want ErrGate and the context's error", err)
	}
	if st := budget.Stats(); st.InUse != 60<<10 || st.Waiting != 0 || len(probe.commits) != 0 {
		t.Fatalf("after giving up: %d held, %d waiting, %d commits", st.InUse, st.Waiting, len(probe.commits))
	}

	done := make(chan error, 1)
	go func() { done <- g.Write(context.Background(), sized(10, 1000)) }()
	for deadline := time.Now().Add(5 * time.Second); budget.Stats().Waiting == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Write does not wait for the budget")
		}
	}
	budget.Release(60 << 10)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Write did not proceed once the budget was released")
	}
	if st := budget.Stats(); st.InUse != 0 || len(probe.commits) != 1 {
		t.Fatalf("after the Write: %d held, %d commits", st.InUse, len(probe.commits))
	}
}

// TestAdmissionHold: a source that is its own raw holds its batch's
// estimate — at most what is grantable, since nothing can be refused
// there — until it releases it.
func TestAdmissionHold(t *testing.T) {
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 10, WarmupFraction: 1})
	defer budget.Close()
	a := engine.Admission{Budget: budget, Estimator: flow.NewEstimator(16)}
	for _, tc := range []struct {
		recs []source.Record
		want int64
	}{
		{sized(10, 100), a.Estimator.EstimateBatch(10, 10*100)},
		{sized(2, 20<<10), 64 << 10}, // 160 KiB estimated: capped
	} {
		release, err := a.Hold(context.Background(), tc.recs)
		if err != nil {
			t.Fatal(err)
		}
		if got := budget.Stats().InUse; got != tc.want {
			t.Fatalf("holding %d, want %d", got, tc.want)
		}
		release()
		if got := budget.Stats().InUse; got != 0 {
			t.Fatalf("%d held after release", got)
		}
	}
}

// nopSink takes every commit at once.
type nopSink struct{}

func (nopSink) Name() string                       { return "nop" }
func (nopSink) MaxBatchSize() int                  { return 0 }
func (nopSink) Close() error                       { return nil }
func (nopSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (nopSink) Commit(context.Context, sink.Batch) (sink.CommitResult, error) {
	return sink.CommitResult{}, nil
}

// BenchmarkAdmission is what admission adds to a gate write of 1000
// records of 200 bytes: one reservation and its release, and an estimate
// of the largest record and of the batch.
func BenchmarkAdmission(b *testing.B) {
	batch := sized(1000, 200)
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 20, WarmupFraction: 1})
	defer budget.Close()
	for _, tc := range []struct {
		name string
		on   bool
	}{{"off", false}, {"on", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var g source.Gate = engine.NewSinkGate(nopSink{}, engine.SinkGateOptions{})
			if tc.on {
				g = engine.NewSinkGate(nopSink{}, engine.SinkGateOptions{}).WithAdmission(engine.Admission{Budget: budget, Estimator: flow.NewEstimator(256)})
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := g.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
