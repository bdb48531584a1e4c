package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

type gateCommits struct {
	mu                sync.Mutex
	batches, rejected int
	errs              int
	fresh             int // records of commits that succeeded
	quarantined       map[record.Code]int
}

func (o *gateCommits) Fresh(recs []sink.Record, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range recs {
		if at.Before(r.Received) {
			panic("a commit observed as returning before its records were received")
		}
	}
	o.fresh += len(recs)
}

func (o *gateCommits) GateQuarantined(code record.Code, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.quarantined == nil {
		o.quarantined = map[record.Code]int{}
	}
	o.quarantined[code] += n
}

func (o *gateCommits) Commit(records, rejected int, _ time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	o.rejected += rejected
	if err != nil {
		o.errs++
	}
}

func sourceRecords(n int) []source.Record {
	out := make([]source.Record, n)
	for i := range out {
		p := []byte(fmt.Sprintf("g-%05d", i))
		out[i] = source.Record{ID: source.ID([]byte("gate"), p), Payload: p, Source: "test", Time: time.Unix(1, 0)}
	}
	return out
}

func TestSinkGate(t *testing.T) {
	ctx := context.Background()
	recs := sourceRecords(2500)
	for _, tc := range []struct {
		name       string
		poison     []int
		down       bool
		quarantine bool
		quarFails  bool
		wantErr    error // nil: Write succeeds
		wantQuar   int
	}{
		{name: "commits in sink-sized batches"},
		{name: "refused records quarantined", poison: []int{3, 1500, 2499}, quarantine: true, wantQuar: 3},
		{name: "refused without a quarantine", poison: []int{7}, wantErr: engine.ErrRejectedAtGate},
		{name: "quarantine fails", poison: []int{7}, quarantine: true, quarFails: true, wantErr: errQuarFull},
		{name: "sink down", down: true, wantErr: errMemDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemSink("raw")
			for _, i := range tc.poison {
				m.poison[recs[i].ID] = true
			}
			m.down.Store(tc.down)
			var quarantined []lane.Rejected
			obs := &gateCommits{}
			opts := engine.SinkGateOptions{Observer: obs}
			if tc.quarantine {
				opts.Quarantine = lane.Func(func(_ context.Context, qs []lane.Rejected) error {
					if tc.quarFails {
						return errQuarFull
					}
					quarantined = append(quarantined, qs...)
					return nil
				})
			}
			err := engine.NewSinkGate(m, opts).Write(ctx, recs)
			if tc.wantErr != nil {
				if tc.wantErr == errMemDown {
					if err == nil || !sink.IsTransient(err) {
						t.Fatalf("Write with the sink down: %v, want a transient error", err)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Write: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if obs.batches != 3 || m.calls.Load() != 3 {
				t.Errorf("%d commits observed, %d made; want 3 of at most MaxBatchSize", obs.batches, m.calls.Load())
			}
			if obs.fresh != len(recs) {
				t.Errorf("freshness observed for %d records, want all %d committed", obs.fresh, len(recs))
			}
			if got := m.count(); got != len(recs)-len(tc.poison) {
				t.Errorf("sink holds %d records, want %d", got, len(recs)-len(tc.poison))
			}
			if len(quarantined) != tc.wantQuar || obs.rejected != tc.wantQuar {
				t.Fatalf("quarantined %d (observed %d), want %d", len(quarantined), obs.rejected, tc.wantQuar)
			}
			for k, q := range quarantined {
				rj := q.Reject
				if q.Record.ID != recs[tc.poison[k]].ID || rj.Error != "poison" || q.Sink != "raw" || rj.Code != record.CodeSinkRefused ||
					rj.Stage != record.StageGate || rj.Component != "raw" || rj.Attempts != 1 || rj.FirstSeen == 0 {
					t.Errorf("quarantined %d: %+v", k, q)
				}
			}
			if tc.wantQuar > 0 && obs.quarantined[record.CodeSinkRefused] != tc.wantQuar {
				t.Errorf("observed quarantined by code %v, want %d sink-refused", obs.quarantined, tc.wantQuar)
			}
		})
	}
}

var (
	errQuarFull = errors.New("quarantine full")
	errMemDown  = errors.New("memsink: down")
)
