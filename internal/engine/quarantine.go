package engine

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/tap"
)

// quarantineBatch bounds the records of one write to a quarantine lane;
// quarantineLogEvery spaces the log lines about shed records.
const (
	quarantineBatch    = 256
	quarantineLogEvery = time.Second
)

// A secondary's rejected records, and the records a gate refuses, go to a
// rejection lane (lane.Lane) as lane.Rejected. For a secondary the lane is
// a convenience view for inspection, not the system of record (raw keeps
// every record): it runs on its own goroutine and buffer and can slow only
// itself. For a gate (SinkGate, WABGate) it is where the refused records
// live, since raw never got them: Write calls it before it returns, and a
// nil answer must mean the records are durable.

// offerQuarantined shows quarantined records at p, with their reason.
func offerQuarantined(p *tap.Point, qs []lane.Rejected) {
	p.Offer(len(qs), func(i int) tap.Record {
		q := &qs[i]
		r := tap.FromSink(&q.Record)
		r.Code, r.Rule, r.Error = q.Reject.Code.String(), q.Reject.Rule, q.Reject.Error
		return r
	})
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
func (s *secondary) enqueueQuarantine(q lane.Rejected) bool {
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
		var first lane.Rejected
		select {
		case <-ctx.Done():
			return
		case first = <-s.quar:
		}
		recs := []lane.Rejected{first}
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
func (s *secondary) writeQuarantine(ctx context.Context, q lane.Lane, recs []lane.Rejected) {
	if q == nil {
		for _, r := range recs {
			s.f.log.Warn("record rejected by secondary (no quarantine lane configured)", "sink", s.name,
				"pos", r.Pos, "id", r.Record.ID.String(), "code", r.Reject.Code.String(), "reason", r.Reject.Error, "recovery", r.Recovery)
		}
		return
	}
	if err := q.Reject(ctx, recs); err != nil && ctx.Err() == nil {
		s.shedQuarantine(len(recs), "quarantine write failed: "+err.Error())
	}
}
