package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

var (
	_ server.Observer      = (*Metrics)(nil)
	_ wab.Observer         = (*Metrics)(nil)
	_ wab.PreallocObserver = (*Metrics)(nil)
	_ wab.RecoveryObserver = (*Metrics)(nil)
	_ drain.Observer       = (*Metrics)(nil)

	_ engine.SinkGateObserver = (*Metrics)(nil)
)

// ---- server.Observer ----

// ConnOpened implements server.Observer.
func (m *Metrics) ConnOpened() {
	m.connTotal.Inc()
	m.connOpen.Inc()
}

// ConnClosed implements server.Observer.
func (m *Metrics) ConnClosed() { m.connOpen.Dec() }

// ConnRejected implements server.Observer.
func (m *Metrics) ConnRejected(reason string) {
	for i, r := range rejectReasons {
		if r == reason {
			m.connRejectedR[i].Inc()
			return
		}
	}
	m.connRejected.WithLabelValues(reason).Inc()
}

// Received implements server.Observer.
func (m *Metrics) Received(d wire.Durability, _, records, bytes int) {
	if int(d) < len(m.recvRecordsD) {
		m.recvRecordsD[d].Add(float64(records))
		m.recvBytesD[d].Add(float64(bytes))
		return
	}
	l := durabilityLabel(int(d))
	m.recvRecords.WithLabelValues(l).Add(float64(records))
	m.recvBytes.WithLabelValues(l).Add(float64(bytes))
}

// Acked implements server.Observer.
func (m *Metrics) Acked(d wire.Durability, _, records, bytes int) {
	if int(d) < len(m.ackRecordsD) {
		m.ackRecordsD[d].Add(float64(records))
		m.ackBytesD[d].Add(float64(bytes))
		return
	}
	l := durabilityLabel(int(d))
	m.ackRecords.WithLabelValues(l).Add(float64(records))
	m.ackBytes.WithLabelValues(l).Add(float64(bytes))
}

// Nacked implements server.Observer.
func (m *Metrics) Nacked(d wire.Durability, code wire.Code, records int) {
	if int(d) < len(m.nackedDC) && int(code) < maxCode {
		if c := m.nackedDC[d][code]; c != nil {
			c.Add(float64(records))
			return
		}
	}
	m.nacked.WithLabelValues(durabilityLabel(int(d)), code.String()).Add(float64(records))
}

// ---- wab.Observer ----

// Batch implements wab.Observer.
func (m *Metrics) Batch(shard int, records, bytes int, sync time.Duration) {
	m.batchRecords.Observe(float64(records))
	m.writtenBytes.Add(float64(bytes))
	if sync > 0 {
		m.fdatasync.Observe(sync.Seconds())
	}
}

// QueueDepth implements wab.Observer.
func (m *Metrics) QueueDepth(shard int, n int) {
	if shard >= 0 && shard < len(m.queueDepthS) {
		m.queueDepthS[shard].Set(float64(n))
		return
	}
	m.queueDepth.WithLabelValues(shardLabel(shard)).Set(float64(n))
}

// Sealed implements wab.Observer.
func (m *Metrics) Sealed(ref wab.SegmentRef, records uint64, bytes int64) {
	m.sealedSegs.Inc()
	m.sealedBytes.Add(float64(bytes))
	m.addSegment(segKey{ref.Shard, ref.Seq}, bytes, time.Now())
}

// Preallocation implements wab.PreallocObserver.
func (m *Metrics) Preallocation(shard int, want, chunk int64) {
	reduced := 0.0
	if chunk < want {
		reduced = 1
		m.preallocFallbacks.Inc()
	}
	m.preallocReduced.WithLabelValues(shardLabel(shard)).Set(reduced)
}

// TailCut implements wab.RecoveryObserver.
func (m *Metrics) TailCut(_ int, _ int, validAfter int) {
	m.tailCuts.Inc()
	m.tailCutDropped.Add(float64(validAfter))
}

func (m *Metrics) addSegment(k segKey, bytes int64, sealed time.Time) {
	m.segMu.Lock()
	defer m.segMu.Unlock()
	m.sealedAt[k] = sealed
	if old, ok := m.segs[k]; ok {
		m.segBytes -= old
	}
	m.segs[k] = bytes
	m.segBytes += bytes
	m.wabSegments.Set(float64(len(m.segs)))
	m.wabBytes.Set(float64(m.segBytes))
}

// oldestSealed is the seal time of the oldest sealed segment on disk, in
// Unix seconds; 0 when there is none.
func (m *Metrics) oldestSealed() float64 {
	m.segMu.Lock()
	defer m.segMu.Unlock()
	var oldest time.Time
	for _, at := range m.sealedAt {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return float64(oldest.UnixNano()) / 1e9
}

// removeSegment forgets a delivered segment and returns its size (0 if it
// was not known).
func (m *Metrics) removeSegment(k segKey) int64 {
	m.segMu.Lock()
	defer m.segMu.Unlock()
	bytes, ok := m.segs[k]
	if !ok {
		return 0
	}
	delete(m.segs, k)
	delete(m.sealedAt, k)
	m.segBytes -= bytes
	m.wabSegments.Set(float64(len(m.segs)))
	m.wabBytes.Set(float64(m.segBytes))
	return bytes
}

// WAB is the write-ahead buffer as WatchWAB needs it. *wab.Log satisfies it.
type WAB interface {
	ShardErrs
	Dir() string
}

// WatchWAB derives weir_wab_segments and weir_wab_bytes from the sealed
// segments on disk and makes weir_shard_failed read l's shards at every
// scrape. Call it after wab.Open and before the drain starts: from then
// on Sealed and SegmentDelivered keep the two gauges current.
func (m *Metrics) WatchWAB(fsys vfs.FS, l WAB) error {
	var src ShardErrs = l
	m.shardFailed.src.Store(&src)
	if fsys == nil {
		fsys = vfs.OS
	}
	refs, err := wab.ListSealed(fsys, l.Dir())
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	for _, ref := range refs {
		fi, err := fsys.Stat(ref.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // delivered meanwhile
		}
		if err != nil {
			return fmt.Errorf("metrics: size of sealed segment: %w", err)
		}
		m.addSegment(segKey{ref.Shard, ref.Seq}, fi.Size(), fi.ModTime())
	}
	return nil
}

// ---- drain.Observer ----

// DeadLetterLane is the drain as WatchDrain needs it. *drain.Drain
// satisfies it.
type DeadLetterLane interface {
	DeadLetterTotals() (files int, bytes int64)
}

// WatchDrain sets the dead-letter gauges from the lane's totals, which
// drain.New derived from disk, so that they are right before the drain's
// first pass.
func (m *Metrics) WatchDrain(d DeadLetterLane) {
	m.DeadLetterTotals(d.DeadLetterTotals())
}

// State implements drain.Observer.
func (m *Metrics) State(s drain.State) { m.state.Store(int32(s)) }

// Commit implements drain.Observer.
func (m *Metrics) Commit(records, rejected int, d time.Duration, err error) {
	r := resultOK
	switch {
	case err == nil:
	case sink.IsTransient(err):
		r = resultTransient
	default:
		r = resultPermanent
	}
	m.commitRecords[r].Add(float64(records))
	m.commitDuration[r].Observe(d.Seconds())
	if rejected > 0 {
		m.rejectedRecords.Add(float64(rejected))
	}
}

// Fresh implements drain.Observer: weir_freshness_seconds of the drain's
// sink.
func (m *Metrics) Fresh(recs []sink.Record, at time.Time) { observeFreshness(m.freshDrain, recs, at) }

// observeFreshness observes, once per distinct receive time (the records of
// one request or frame share it; a batch holds them in order), how long
// before at the records of recs were received.
func observeFreshness(o prometheus.Observer, recs []sink.Record, at time.Time) {
	var last time.Time
	for i := range recs {
		r := recs[i].Received
		if r.IsZero() || r.Equal(last) {
			continue
		}
		last = r
		o.Observe(max(0, at.Sub(r).Seconds()))
	}
}

// Retry implements drain.Observer.
func (m *Metrics) Retry(attempt int, delay time.Duration, err error) { m.retries.Inc() }

// DeadLettered implements drain.Observer.
func (m *Metrics) DeadLettered(code sink.Code, records int) {
	codeCounter(m.dlRecordsC, m.dlRecords, code).Add(float64(records))
	m.Rejected(code, records)
}

// Rejected counts records handed to any rejection lane, by code
// (weir_quarantined_records_total).
func (m *Metrics) Rejected(code sink.Code, records int) {
	codeCounter(m.rejectedC, m.rejected, code).Add(float64(records))
}

// GateQuarantined implements engine.GateObserver (and so
// engine.SinkGateObserver).
func (m *Metrics) GateQuarantined(code sink.Code, records int) {
	codeCounter(m.gateQuarC, m.gateQuar, code).Add(float64(records))
	m.Rejected(code, records)
}

// DeadLetterTotals implements drain.Observer.
func (m *Metrics) DeadLetterTotals(files int, bytes int64) {
	m.dlFiles.Set(float64(files))
	m.dlBytes.Set(float64(bytes))
}

// DeadLetterFull implements drain.Observer.
func (m *Metrics) DeadLetterFull() { m.dlFull.Inc() }

// SinkHealth implements drain.Observer.
func (m *Metrics) SinkHealth(h sink.Health) { m.health.Store(int32(h.State)) }

// SegmentDelivered implements drain.Observer.
func (m *Metrics) SegmentDelivered(ref wab.SegmentRef, records uint64) {
	m.segDelivered.Inc()
	m.recsDelivered.Add(float64(records))
	m.deliveredBytes.Add(float64(m.removeSegment(segKey{ref.Shard, ref.Seq})))
}

// SegmentDeferred implements drain.Observer.
func (m *Metrics) SegmentDeferred(ref wab.SegmentRef, err error) { m.segDeferred.Inc() }

// SegmentsDamaged implements drain.Observer.
func (m *Metrics) SegmentsDamaged(n int) { m.segDamaged.Set(float64(n)) }
