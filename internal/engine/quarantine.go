package engine

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// quarantineBatch bounds the records of one write to a quarantine lane;
// quarantineLogEvery spaces the log lines about shed records.
const (
	quarantineBatch    = 256
	quarantineLogEvery = time.Second
)

// QuarantinedRecord is a record a secondary refused permanently — or, at
// a gate, one primary raw refused (SinkGate) or the buffer cannot hold
// (WABGate) — with why.
type QuarantinedRecord struct {
	// Sink names the quarantine lane: the secondary's name, or the gate's.
	Sink string
	// Pos is the record's raw position (0 at the gate: not in raw).
	Pos uint64
	// OriginPos is where the source read the record
	// ("topic/partition@offset"), when known; the buffer gate sets it.
	OriginPos string
	Record    sink.Record
	// Reject is the rejection: code, stage, component (the sink that
	// refused), error text (the sink's reason), attempts, first-seen time.
	Reject   record.Rejection
	Recovery bool // found by recovery rather than live delivery
}

// Quarantine receives rejected records. For a secondary it is a
// convenience view for inspection, not the system of record (raw keeps
// every record): it runs on its own goroutine and buffer and can slow only
// itself. For a gate (SinkGate, WABGate) it is where the refused records
// live, since raw never got them: Write calls it before it returns, and a
// nil answer must mean the records are durable.
type Quarantine interface {
	Quarantine(ctx context.Context, recs []QuarantinedRecord) error
}

// offerQuarantined shows quarantined records at p, with their reason.
func offerQuarantined(p *tap.Point, qs []QuarantinedRecord) {
	p.Offer(len(qs), func(i int) tap.Record {
		q := &qs[i]
		r := tap.FromSink(&q.Record)
		r.Code, r.Rule, r.Error = q.Reject.Code.String(), q.Reject.Rule, q.Reject.Error
		return r
	})
}

// QuarantineFunc adapts a function to Quarantine.
type QuarantineFunc func(ctx context.Context, recs []QuarantinedRecord) error

// Quarantine implements Quarantine.
func (f QuarantineFunc) Quarantine(ctx context.Context, recs []QuarantinedRecord) error {
	return f(ctx, recs)
}

func (s *secondary) shedQuarantine(n int, why string) {
	s.shed.Add(int64(n))
	s.f.obs.QuarantineShed(s.name, n)
	now := time.Now().UnixNano()
	if last := s.lastShed.Load(); now-last >= int64(quarantineLogEvery) && s.lastShed.CompareAndSwap(last, now) {
		s.f.log.Warn("quarantine records shed; they remain in raw", "sink", s.name, "records", n,
			"shed_total", s.shed.Load(), "reason", why)
	}
}

// enqueueQuarantine hands q to the lane without waiting, unless the lane
// is full in records or in bytes (QuarantineBytes; an empty lane takes
// any one record).
func (s *secondary) enqueueQuarantine(q QuarantinedRecord) bool {
	size := q.Record.MemSize()
	if held := s.quarMem.Add(size); held > s.cfg.QuarantineBytes && held != size {
		s.quarMem.Add(-size)
		return false
	}
	select {
	case s.quar <- q:
		return true
	default:
		s.quarMem.Add(-size)
		return false
	}
}

// runQuarantine writes the sink's quarantine lane.
func (s *secondary) runQuarantine(ctx context.Context) {
	defer s.f.wg.Done()
	q := s.cfg.Quarantine
	for {
		var first QuarantinedRecord
		select {
		case <-ctx.Done():
			return
		case first = <-s.quar:
		}
		recs := []QuarantinedRecord{first}
	fill:
		for len(recs) < quarantineBatch {
			select {
			case r := <-s.quar:
				recs = append(recs, r)
			default:
				break fill
			}
		}
		var size int64
		for i := range recs {
			size += recs[i].Record.MemSize()
		}
		s.writeQuarantine(ctx, q, recs)
		s.quarMem.Add(-size)
		if ctx.Err() != nil {
			return
		}
	}
}

// writeQuarantine writes one batch of the lane, or logs it when the
// secondary has no quarantine destination; a failed write sheds it.
func (s *secondary) writeQuarantine(ctx context.Context, q Quarantine, recs []QuarantinedRecord) {
	if q == nil {
		for _, r := range recs {
			s.f.log.Warn("record rejected by secondary (no quarantine lane configured)", "sink", s.name,
				"pos", r.Pos, "id", r.Record.ID.String(), "code", r.Reject.Code.String(), "reason", r.Reject.Error, "recovery", r.Recovery)
		}
		return
	}
	if err := q.Quarantine(ctx, recs); err != nil && ctx.Err() == nil {
		s.shedQuarantine(len(recs), "quarantine write failed: "+err.Error())
	}
}
