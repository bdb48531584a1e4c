// Package flow keeps weir's memory bounded under any overload. It has
// three parts, each covering a failure the others do not
// (docs/flow_control.md):
//
//   - Admission (Budget, Estimator): one semaphore counted in bytes over
//     every record held in memory anywhere in the daemon. A stage reserves
//     a record's estimated in-memory size before it holds the record and
//     releases it once the next stage has it durably. Estimates use the
//     95th percentile of recent expansion ratios. The budget warms up from
//     a fraction of its limit; a record larger than what is grantable is
//     refused at once (ErrOversize) so the caller can dead-letter it
//     instead of stalling everything behind it.
//
//   - Backpressure (Machine, Controller): a four-state machine — Normal,
//     Degraded, Critical, Recovery — over the live heap, the fullest
//     bounded queue and consecutive sink failures. It scales batch sizes
//     (100/50/25/75 %) and, in Critical, pauses every source (Pausable)
//     and makes the socket answer producers with a retryable Overloaded.
//     Recovery is a state with its own dwell time, so the pipeline does
//     not return to full speed the moment pressure clears (the sawtooth).
//
//   - Staged subscription: each transport's prefetch is derived from the
//     budget (Kafka fetch sizes, JetStream MaxAckPending and MaxBytes,
//     the file source's read-ahead; Prefetch), so a broker cannot push more than
//     the budget allows before admission sees it.
//
// A separate stuck detector (Stuck) watches for memory held, every queue
// empty and no progress at all, sustained: it warns, then fails /live,
// then exits the process with ExitStuck. A slow or failing sink makes
// progress (its calls return) and is never stuck.
package flow
