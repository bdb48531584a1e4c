package drain

// Delivering one segment: reading it in sub-batches at its progress,
// committing them with retries, dead-lettering what the sink refuses.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// drainSegment delivers one segment: the records past its confirmed count,
// sub-batch by sub-batch, then removes it.
func (d *Drain) drainSegment(ctx context.Context, ref wab.SegmentRef) error {
	r, idx, err := d.openAtProgress(ref)
	if err != nil {
		return err
	}
	defer r.Close()
	if idx, err = d.deliverFrom(ctx, ref, r, idx); err != nil {
		return err
	}
	if f, ok := r.Footer(); ok && f.Records != idx {
		return fmt.Errorf("segment %s: footer counts %d records, read %d", ref.Path, f.Records, idx)
	}
	if err := r.Close(); err != nil {
		return fmt.Errorf("close segment %s: %w", ref.Path, err)
	}
	if err := wab.RemoveSegment(d.fs, ref.Path); err != nil {
		return fmt.Errorf("remove delivered segment %s: %w", ref.Path, err)
	}
	d.log.Debug("segment delivered", "segment", ref.Path, "shard", ref.Shard, "seq", ref.Seq, "records", idx)
	d.obs.SegmentDelivered(ref, idx)
	return nil
}

// deliverFrom delivers the records r holds from record idx on (where r
// is positioned), sub-batch by sub-batch, confirming each, to the end of
// what r reads (a sealed segment's footer, an open one's readable tail).
// It returns the index after the last record confirmed.
func (d *Drain) deliverFrom(ctx context.Context, ref wab.SegmentRef, r *wab.Reader, idx uint64) (uint64, error) {
	h := r.Header()
	sr := &segReader{r: r}
	for {
		b, readErr := readBatch(ctx, sr, d.batchLimit(), &d.adm)
		n, err := d.account(ctx, ref, h, sr, idx, &b)
		if err != nil {
			return idx, err
		}
		idx += n
		if readErr == nil {
			continue
		}
		if ctx.Err() != nil {
			return idx, ctx.Err()
		}
		if !errors.Is(readErr, io.EOF) {
			return idx, fmt.Errorf("read segment %s after record %d: %w", ref.Path, idx, readErr)
		}
		return idx, nil
	}
}

// batchLimit is the size of the next sub-batch: the sink's MaxBatchSize,
// scaled by flow control (asked at every sub-batch).
func (d *Drain) batchLimit() int {
	limit := d.sink.MaxBatchSize()
	if d.pacer != nil {
		limit = d.pacer.Scale(limit)
	}
	return max(limit, 1)
}

// account delivers the sub-batch b, records idx.. of the segment — or
// dead-letters the oversize record that stands in its place — and
// confirms it. It returns how many records it confirmed. Whatever happens,
// b's reservation is released when it returns: after the sink's Commit has
// returned and the sub-batch is confirmed, or once it is abandoned.
func (d *Drain) account(ctx context.Context, ref wab.SegmentRef, h wab.Header, sr *segReader, idx uint64, b *subBatch) (uint64, error) {
	defer d.adm.release(&b.rv)
	var n uint64
	switch {
	case b.overErr != nil:
		if err := d.deadLetterOversize(ctx, ref, h, idx, b.over, b.overErr); err != nil {
			return 0, err
		}
		n = 1
	case len(b.recs) > 0:
		if err := d.deliver(ctx, ref, h, idx, b.recs); err != nil {
			return 0, err
		}
		n = uint64(len(b.recs))
	default:
		return 0, nil
	}
	if err := wab.NoteProgress(d.fs, ref.Path, wab.Progress{Records: idx + n, Offset: sr.offset()}); err != nil {
		return 0, fmt.Errorf("confirm %d records of %s: %w", idx+n, ref.Path, err)
	}
	return n, nil
}

// openAtProgress opens a segment positioned at its first record not yet
// confirmed, and returns that record's index. A sidecar that records the
// record's offset is trusted (its CRC guards it) and the reader seeks there;
// a count-only sidecar (written by an older version), or an offset that
// does not point at a frame, makes it read and check the confirmed records
// from the start instead.
func (d *Drain) openAtProgress(ref wab.SegmentRef) (*wab.Reader, uint64, error) {
	p, err := d.readProgress(ref.Path)
	if err != nil {
		return nil, 0, err
	}
	r, err := wab.OpenSegment(d.fs, ref.Path)
	if err != nil {
		return nil, 0, fmt.Errorf("open segment %s: %w", ref.Path, err)
	}
	return d.skipConfirmed(ref, r, p)
}

// readProgress reads a segment's sidecar. A torn or damaged one — what a
// power loss may leave of a sidecar written without fdatasync
// (wab.NoteProgress) — counts as nothing delivered: the segment is
// delivered again from its first record, with the same ids.
func (d *Drain) readProgress(segPath string) (wab.Progress, error) {
	p, err := wab.ReadProgress(d.fs, segPath)
	if ce := (*wab.CorruptionError)(nil); errors.As(err, &ce) {
		d.log.Warn("progress sidecar unreadable (a power loss tears one written since the last fdatasync); delivering the segment again from its first record",
			"segment", segPath, "err", err)
		return wab.Progress{}, nil
	}
	if err != nil {
		return wab.Progress{}, fmt.Errorf("read confirmed count of %s: %w", segPath, err)
	}
	return p, nil
}

// skipConfirmed positions r, just opened, after the p.Records records its
// sidecar says were delivered, and returns that index.
//
// A sealed segment that holds fewer records than its sidecar counts was
// cut by a power loss after the drain had delivered its readable tail:
// the records past its end were Buffered ones (a Durable record is read
// only once fdatasynced), delivered and then lost from the buffer, as the
// Buffered tier allows. The segment is then delivered whole: r is left at
// its end.
func (d *Drain) skipConfirmed(ref wab.SegmentRef, r *wab.Reader, p wab.Progress) (*wab.Reader, uint64, error) {
	if p.Offset > 0 {
		err := r.SkipTo(p.Records, p.Offset)
		if err == nil {
			return r, p.Records, nil
		}
		d.log.Warn("sidecar offset unusable; reading the confirmed records from the start",
			"segment", ref.Path, "confirmed", p.Records, "offset", p.Offset, "err", err)
	}
	for idx := uint64(0); idx < p.Records; idx++ {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				if _, sealed := r.Footer(); sealed {
					d.log.Warn("sidecar counts more records than the segment holds: the records past its end were delivered from its open tail, then lost from the buffer by a power loss (Buffered tier); the segment is delivered whole",
						"segment", ref.Path, "confirmed", p.Records, "records", idx)
					return r, idx, nil
				}
				r.Close()
				return nil, 0, fmt.Errorf("segment %s: confirmed count %d is past its %d records", ref.Path, p.Records, idx)
			}
			r.Close()
			return nil, 0, fmt.Errorf("skip confirmed records of %s: %w", ref.Path, err)
		}
	}
	return r, p.Records, nil
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// errRetriesExhausted wraps the last transient error once MaxRetries
// retries have failed.
var errRetriesExhausted = errors.New("retries exhausted")

// deliver commits one sub-batch — records start.. of the segment — and
// returns once it is fully accounted for: committed, and its rejected
// records durably dead-lettered. It returns an error, and the sub-batch
// must not be confirmed, if ctx ended, retries were exhausted or the dead
// letter could not be written.
func (d *Drain) deliver(ctx context.Context, ref wab.SegmentRef, h wab.Header, start uint64, recs []wab.Record) error {
	srecs := d.sinkRecords(ref, h, start, recs)
	d.adm.observe(recs, srecs)
	batch := sink.NewBatch(srecs)
	retries, attempts := 0, 0
	for {
		attempts++
		rejected, err := d.commitOnce(ctx, ref, start, batch)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if retries >= d.maxRetries {
				return fmt.Errorf("commit records %d..%d: %w after %d retries: %w",
					start, start+uint64(len(recs))-1, errRetriesExhausted, retries, err)
			}
			retries++
			if err := d.retryAfter(ctx, ref, retries, err); err != nil {
				return err
			}
			continue
		}
		if len(rejected) == 0 {
			d.setState(Draining)
			return nil
		}
		dlRecs := d.deadLetterRecords(h, start, srecs, recs, rejected, attempts)
		need := d.dl.size(dlRecs)
		if !d.dl.hasRoom(need) {
			if err := d.blockUntilRoom(ctx, ref, need); err != nil {
				return err
			}
			// Send the same sub-batch again: its outcome decides what is
			// dead-lettered now, exactly as a restart would.
			retries = 0
			d.setState(Draining)
			continue
		}
		return d.writeDeadLetters(ref, h, dlRecs)
	}
}

// sinkRecords turns a sub-batch into the records the sink receives.
func (d *Drain) sinkRecords(ref wab.SegmentRef, h wab.Header, start uint64, recs []wab.Record) []sink.Record {
	srecs := make([]sink.Record, len(recs))
	for i, rec := range recs {
		var err error
		srecs[i], err = SinkRecord(h, start+uint64(i), rec)
		if err != nil {
			d.log.Error("undecodable record metadata; delivering under its position's id", "segment", ref.Path, "err", err)
		}
	}
	return srecs
}

// commitOnce makes one Sink.Commit of batch. It returns the records to
// dead-letter (none when all were committed) once the sink has accounted
// for the batch, and an error — transient, or the context's — when the
// batch must be sent again or abandoned.
func (d *Drain) commitOnce(ctx context.Context, ref wab.SegmentRef, start uint64, batch sink.Batch) ([]sink.Rejection, error) {
	n := len(batch.Records)
	t0 := d.now()
	d.markIdle()
	res, err := d.sink.Commit(ctx, batch)
	d.markBusy()
	done := d.now()
	elapsed := done.Sub(t0)
	d.wrote(ctx, err)
	switch {
	case ctx.Err() != nil:
		// Whatever the sink said, a cancelled commit proves nothing:
		// leave the sub-batch unconfirmed for the next run.
		d.obs.Commit(n, 0, elapsed, err)
		return nil, ctx.Err()
	case err == nil:
		rejected := d.checkRejections(res.Rejected, n)
		d.obs.Commit(n, len(rejected), elapsed, nil)
		d.obs.Fresh(batch.Records, done)
		return rejected, nil
	case sink.IsTransient(err):
		d.obs.Commit(n, 0, elapsed, err)
		return nil, err
	default:
		d.obs.Commit(n, n, elapsed, err)
		d.log.Warn("permanent sink error, dead-lettering sub-batch", "segment", ref.Path,
			"first_record", start, "records", n, "err", err)
		rejected := make([]sink.Rejection, n)
		for i := range rejected {
			rejected[i] = sink.Rejection{Index: i, Reason: err.Error(), Code: sink.CodeSinkRefused}
		}
		return rejected, nil
	}
}

// wrote tells flow control how a Commit went; one cut short by the end of
// ctx says nothing about the sink.
func (d *Drain) wrote(ctx context.Context, err error) {
	switch {
	case d.pacer == nil || ctx.Err() != nil:
	case err == nil:
		d.pacer.WriteSucceeded()
	default:
		d.pacer.WriteFailed()
	}
}

// retryAfter waits before the retries-th retry of a sub-batch that failed
// with the transient error err; it returns ctx's error if ctx ends first.
func (d *Drain) retryAfter(ctx context.Context, ref wab.SegmentRef, retries int, err error) error {
	delay := d.backoff(retries)
	d.setState(RetryingTransient)
	d.obs.Retry(retries, delay, err)
	d.log.Warn("transient sink error, retrying", "segment", ref.Path,
		"attempt", retries, "max_retries", d.maxRetries, "backoff", delay, "err", err)
	return d.wait(ctx, delay)
}

// deadLetterRecords builds the lane records of a sub-batch's rejections:
// each keeps its record as the sink saw it (srecs), its own metadata as it
// sat in the buffer (recs' Meta) and gains its rejection — record.FromSink's
// mapping at stage drain with the sink's name as component, the attempts
// made, the time and its place in the buffer.
func (d *Drain) deadLetterRecords(h wab.Header, start uint64, srecs []sink.Record, recs []wab.Record, rejected []sink.Rejection, attempts int) []lane.Rejected {
	now := d.now().UnixNano()
	name := d.sink.Name()
	out := make([]lane.Rejected, len(rejected))
	for i, rj := range rejected {
		rej := record.FromSink(rj, record.StageDrain, name)
		rej.Attempts, rej.FirstSeen = attempts, now
		rej.Shard, rej.Seq, rej.Index, rej.HasLocation = h.Shard, h.Seq, start+uint64(rj.Index), true
		out[i] = lane.Rejected{Sink: name, Record: srecs[rj.Index], Reject: rej, Meta: recs[rj.Index].Meta}
	}
	return out
}

// writeDeadLetters writes one sub-batch's dead-letter file durably and
// reports it.
func (d *Drain) writeDeadLetters(ref wab.SegmentRef, h wab.Header, rejected []lane.Rejected) error {
	path, size, err := d.dl.reject(h.Instance, rejected)
	if err != nil {
		// A failed write may still have left a file: recount.
		if rerr := d.dl.rescan(); rerr != nil {
			d.log.Error("rescanning dead-letter lane", "dir", d.dl.dir, "err", rerr)
		}
		return fmt.Errorf("dead-letter %d records of %s: %w", len(rejected), ref.Path, err)
	}
	d.log.Warn("records dead-lettered", "segment", ref.Path, "file", path, "records", len(rejected), "bytes", size,
		"first_code", rejected[0].Reject.Code.String(), "first_reason", rejected[0].Reject.Error)
	lane.CountByCode(rejected, d.obs.DeadLettered)
	files, bytes := d.dl.totals()
	d.obs.DeadLetterTotals(files, bytes)
	d.setState(Draining)
	return nil
}

// checkRejections validates a sink's rejections: indexes out of range are
// logged and ignored (they name no record), duplicates keep the first
// reason. The result is in batch order.
func (d *Drain) checkRejections(rs []sink.Rejection, n int) []sink.Rejection {
	if len(rs) == 0 {
		return nil
	}
	seen := make(map[int]bool, len(rs))
	out := make([]sink.Rejection, 0, len(rs))
	for _, r := range rs {
		if r.Index < 0 || r.Index >= n {
			d.log.Error("sink rejected a record index outside the batch; ignored",
				"index", r.Index, "batch_records", n, "reason", r.Reason)
			continue
		}
		if seen[r.Index] {
			continue
		}
		seen[r.Index] = true
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// blockUntilRoom holds the drain in BlockedDeadLetterFull until the lane,
// rescanned every DeadLetterCheckInterval, has room for need bytes, or ctx
// ends (its error is returned).
func (d *Drain) blockUntilRoom(ctx context.Context, ref wab.SegmentRef, need int64) error {
	d.setState(BlockedDeadLetterFull)
	d.obs.DeadLetterFull()
	files, bytes := d.dl.totals()
	d.log.Error("dead-letter lane full, drain blocked; remove files from it to resume",
		"dir", d.dl.dir, "files", files, "bytes", bytes, "max_bytes", d.dl.maxBytes,
		"needed_bytes", need, "segment", ref.Path)
	for {
		if err := d.wait(ctx, d.dlCheck); err != nil {
			return err
		}
		if err := d.dl.rescan(); err != nil {
			d.log.Error("rescanning dead-letter lane", "dir", d.dl.dir, "err", err)
			continue
		}
		files, bytes := d.dl.totals()
		d.obs.DeadLetterTotals(files, bytes)
		if d.dl.hasRoom(need) {
			d.log.Info("dead-letter lane has room again, drain resuming",
				"files", files, "bytes", bytes, "max_bytes", d.dl.maxBytes)
			return nil
		}
	}
}

// backoff is the pause before the retry-th retry (1 for the first).
func (d *Drain) backoff(retry int) time.Duration {
	return backoff.Policy{Min: d.retryBase, Max: d.retryMax}.Delay(retry - 1)
}
