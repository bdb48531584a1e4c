package wab

// A lone request on an idle shard (SubmitInline).
//
// Queued through the flusher, a lone producer's frame crosses two
// goroutines before its ack is written — the connection's reader hands it
// to the flusher, which wakes the connection's writer — and each hand-off
// wakes a sleeping thread; on a small virtual machine those wake-ups cost
// more than the write. SubmitInline lets the caller write its own request
// when nobody else would be waiting for the shard, and the flusher never
// notices.
//
// The shard's files and batch state are guarded by own: the flusher holds
// it from taking a request off the queue to the end of that batch (and
// while it seals a segment or shuts down); it lets go only while it waits
// for work. A SubmitInline writes its request itself only if it gets own
// without waiting and finds nothing held and no hand-off on its way: the
// queue's byte count (queuedBytes) is zero — every hand-off holds at
// least one byte of it from before its send until the flusher takes it,
// under own. So a request submitted
// before it — by the same caller, which is what ordering is about — is
// already written, or is still ahead of it in the flusher's hands and
// SubmitInline queues behind it. Requests submitted while it writes queue
// for the flusher, which takes them once own is free: one of them pays
// for one fdatasync more than group commit would have made it wait for,
// which is what it would have paid had it arrived a moment earlier.
//
// The batch is the flusher's: process writes, fdatasyncs (for Durable),
// answers and then does the bookkeeping (sealing, reserving space, the
// sync mark), so every promise of the flusher holds unchanged, and an
// error fails the shard the same way. It does not yield to the goroutines
// its ack woke, as the flusher does: the caller is expected to send the
// answer itself once SubmitInline returns (the socket ingress does), and
// a yield would only wake another thread.
//
// Under the deterministic simulation (-tags dst) the scheduler runs one
// goroutine at a time and parks each flusher at the top of its loop; a
// lone request on an idle shard (nothing queued, nothing held) is then
// written inline by the submitting goroutine in the parked flusher's place
// (dstWriteInline), with the same code below (inlineBatch): the
// simulation's crash images cover inline writes as they cover the
// flusher's.

// writeInline writes req (a single request, not a batch carrier) on the
// calling goroutine if the shard is idle, and reports whether it did;
// Done has then been called.
func (s *shard) writeInline(req *Request) bool {
	if dstBuild {
		return s.dstWriteInline(req)
	}
	if s.queuedBytes.Load() != 0 || !s.own.TryLock() {
		return false
	}
	defer s.own.Unlock()
	if s.queuedBytes.Load() != 0 || s.holding() {
		return false
	}
	s.inlineBatch(req)
	return true
}

// inlineBatch writes req as a batch of its own, with the flusher's code,
// by whoever holds the shard's files (own).
func (s *shard) inlineBatch(req *Request) {
	s.busySince.Store(monoNow())
	s.batch = append(s.batch[:0], req)
	s.rotateAfter = false
	s.process(false)
	s.busySince.Store(0)
}
