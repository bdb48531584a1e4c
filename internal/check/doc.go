// Package check runs the data contracts of weir's streams — decode, JSON
// Schema, quality rules (internal/contract) and, where a contract allows
// it, content dedup (internal/dedup) — on the way to a sink, and sends
// what they refuse to the sink's rejection lane with a reason code.
//
// # Where checks run
//
// Checks never stand between a source and its acknowledgement. With
// primary raw and secondaries, raw keeps every record, rejects and
// duplicates included (it is the system of record), and each secondary
// is wrapped (Checks.Wrap): its live batches and its recovery windows are
// judged before they reach it. Rejected records go to the secondary's
// quarantine lane, which sheds rather than slow the clean path (package
// engine); a dropped duplicate is simply not delivered — raw still has it.
// With a single sink and no raw (the drain delivers straight from the
// write-ahead buffer), the sink is wrapped in the same way and a rejected
// record goes to the drain's dead-letter lane, written durably before the
// buffer lets go of it: a reject never exists nowhere. Content dedup is
// refused there by configuration, since nothing would keep a record it
// dropped.
//
// # A batch's verdicts
//
// Commit routes every record to its stream's contract by record source
// (a [[source]]'s name, or "socket" for producers, narrowed by a header
// when the contract says so); a record no contract claims passes
// unchecked. Each record gets one outcome: pass, warn (only warn rules
// failed: it goes on), reject (code decode, contract or dq: it is
// returned in CommitResult.Rejected with its contract and rule) or
// duplicate (content dedup: it is left out of the inner commit and
// counted, not rejected). The clean records are committed to the inner
// sink as one batch; a permanent inner error becomes a sink-refused
// rejection of each clean record, so the check's own codes survive it.
//
// The batch's outcomes go to the dq-audit trail (Audit.Append, one
// durable append per batch) while the clean records are committed, and
// Commit succeeds only once both have: the engine and the drain record
// the progress that covers a batch only after its Commit succeeded, so no
// record is covered whose outcome the trail lacks. A trail that fails
// fails the Commit as transient (package dqaudit says what the trail
// promises).
//
// The sink retry protocol has the engine retry a batch unchanged after a
// transient error; the verdicts of the last batch are kept by its
// token, so a retry is neither judged nor appended to the trail twice
// once the trail holds it. A batch judged
// again for any other reason (a recovery window re-read after a crash) is
// judged afresh: contract outcomes are deterministic, and dedup stores
// key → record id, so a record's own redelivery is never its duplicate.
//
// # Health, thresholds and the breaker
//
// Each stream counts its outcomes over a sliding window. A fail ratio
// above the stream's threshold makes the wrapped sinks report Degraded
// (and the observer's gauge shows it); a ratio above the breaker's
// trips it: the stream's source is paused through the OnTrip hook,
// loudly, until the breaker's cool-down ends — a contract broken
// wholesale stops its stream instead of quietly filling quarantine.
package check
