package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// ErrRejectedAtGate is returned (wrapped) by SinkGate.Write when the sink
// refused records and there is no quarantine to keep them: the source
// must not move past a record that is nowhere.
var ErrRejectedAtGate = errors.New("engine: the sink refused records at the gate and there is no quarantine")

// SinkGateObserver sees every commit a SinkGate makes, for metrics (the
// drain's Commit has the same shape), and the records it quarantines.
type SinkGateObserver interface {
	Commit(records, rejected int, d time.Duration, err error)
	// Fresh is called after a commit that succeeded, with its records and
	// the time it returned (weir_freshness_seconds of the raw sink).
	Fresh(recs []sink.Record, at time.Time)
	GateObserver
}

// SinkGateOptions configure NewSinkGate.
type SinkGateOptions struct {
	// Name labels the gate's quarantined records ("raw").
	Name string
	// Quarantine keeps records the sink refused; Write returns only after
	// it has stored them. Nil makes a refusal fail Write.
	Quarantine lane.Lane
	// Observer sees every commit; nil discards.
	Observer SinkGateObserver
	// Tap is shown the records of every Write before they are committed,
	// QuarantineTap those the quarantine took (weir tap; nil: none).
	Tap, QuarantineTap *tap.Point
}

// SinkGate is the gate of a pipeline without a write-ahead buffer
// (gate = "raw"): Write commits the records straight to the sink — primary
// raw, or the fan-out in front of it — and returns nil only after the
// sink's durable ack, so a source commits its position only once its
// records are in the system of record. Records the sink refuses are
// stored in the quarantine (with the sink's reason and reason code, stage
// gate, one attempt: a failed commit is not retried here but returned, and
// the source writes again) before Write returns, as are the records the
// source could not decode (source.Record.Undecodable; code decode),
// before the rest is committed;
// a quarantine that cannot take them fails Write, and the source stops
// short of them.
//
// Commits are serialised: one batch at a time reaches the sink, as from
// the drain. A record's Received is when Write was called (or the
// source's own Received), its EventTime the source record's Time.
type SinkGate struct {
	snk  sink.Sink
	opts SinkGateOptions
	mu   sync.Mutex
}

var _ source.Gate = (*SinkGate)(nil)

// NewSinkGate returns a gate writing to snk.
func NewSinkGate(snk sink.Sink, opts SinkGateOptions) *SinkGate {
	if opts.Name == "" {
		opts.Name = snk.Name()
	}
	return &SinkGate{snk: snk, opts: opts}
}

// Write implements source.Gate.
func (g *SinkGate) Write(ctx context.Context, recs []source.Record) error {
	recs, err := g.refuseUndecodable(ctx, recs)
	if err != nil || len(recs) == 0 {
		return err
	}
	now := time.Now()
	records := make([]sink.Record, len(recs))
	for i := range recs {
		records[i] = SinkRecord(&recs[i], now)
	}
	if g.opts.Tap.Active() {
		g.opts.Tap.Offer(len(records), func(i int) tap.Record { return tap.FromSink(&records[i]) })
	}
	step := g.snk.MaxBatchSize()
	if step <= 0 {
		step = len(records)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for lo := 0; lo < len(records); lo += step {
		if err := g.commit(ctx, records[lo:min(lo+step, len(records))]); err != nil {
			return err
		}
	}
	return nil
}

// refuseUndecodable stores the records of recs their source could not
// decode (source.Record.Undecodable) in the quarantine — reason code
// decode, stage gate — and returns the others, those to commit.
func (g *SinkGate) refuseUndecodable(ctx context.Context, recs []source.Record) ([]source.Record, error) {
	var refused []gateRefusal
	for i := range recs {
		if o, ok := refusal(&recs[i], i); ok {
			refused = append(refused, o)
		}
	}
	if len(refused) == 0 {
		return recs, nil
	}
	if g.opts.Quarantine == nil {
		o := refused[0]
		return nil, fmt.Errorf("engine: gate: record %d of %q: %w: %s", o.index, recs[o.index].Source, ErrUndecodable, o.why)
	}
	if err := rejectAtGate(ctx, g.opts.Quarantine, g.opts.Name, g.opts.Observer, g.opts.QuarantineTap, recs, refused, "undecodable"); err != nil {
		return nil, err
	}
	keep := make([]source.Record, 0, len(recs)-len(refused))
	for i := range recs {
		if recs[i].Undecodable == "" {
			keep = append(keep, recs[i])
		}
	}
	return keep, nil
}

func (g *SinkGate) commit(ctx context.Context, records []sink.Record) error {
	start := time.Now()
	res, err := g.snk.Commit(ctx, sink.NewBatch(records))
	if o := g.opts.Observer; o != nil {
		done := time.Now()
		o.Commit(len(records), len(res.Rejected), done.Sub(start), err)
		if err == nil {
			o.Fresh(records, done)
		}
	}
	if err != nil {
		return fmt.Errorf("engine: gate: commit to %s: %w", g.snk.Name(), err)
	}
	if len(res.Rejected) == 0 {
		return nil
	}
	if g.opts.Quarantine == nil {
		return fmt.Errorf("%w: %s refused %d records (first: %s)", ErrRejectedAtGate, g.snk.Name(), len(res.Rejected), res.Rejected[0].Reason)
	}
	qs, bad := quarantined(res.Rejected, len(records), func(i int) (sink.Record, uint64) { return records[i], 0 },
		lane.Rejected{Sink: g.opts.Name, Reject: record.Rejection{
			Stage: record.StageGate, Component: g.snk.Name(), Attempts: 1, FirstSeen: time.Now().UnixNano()}})
	if bad > 0 {
		return fmt.Errorf("engine: gate: %s rejected %d indexes outside a batch of %d", g.snk.Name(), bad, len(records))
	}
	if err := g.opts.Quarantine.Reject(ctx, qs); err != nil {
		return fmt.Errorf("engine: gate: quarantine %d records %s refused: %w", len(qs), g.snk.Name(), err)
	}
	if g.opts.Observer != nil {
		lane.CountByCode(qs, g.opts.Observer.GateQuarantined)
	}
	if g.opts.QuarantineTap.Active() {
		offerQuarantined(g.opts.QuarantineTap, qs)
	}
	return nil
}

// SinkRecord is the record a sink receives for a source record that
// bypasses the write-ahead buffer (the raw gate; a source that is its own
// raw): the same fields the drain gives a buffered one (drain.SinkRecord) —
// id, source, key, headers, event time = r.Time — received at r.Received,
// or at received when the source left it zero. It aliases r's bytes.
func SinkRecord(r *source.Record, received time.Time) sink.Record {
	out := sink.Record{
		ID: r.ID, Payload: r.Payload, Source: r.Source, Durability: sink.Durable, Received: r.Received,
		Key: r.Key, Headers: r.Headers, EventTime: r.Time,
	}
	if out.Received.IsZero() {
		out.Received = received
	}
	return out
}
