// Package dqaudit is weir's data-quality audit trail: what the contract
// checks did with each record of each stream, batch by batch, and which
// raw windows recovery delivered without rebuilding their quarantine rows.
// It is written to its own durable destination — an NDJSON directory or a
// PostgreSQL table — so that it survives quarantine shedding: the
// quarantine lane may drop rejected records when it is full (raw keeps
// them), the trail still counts them.
//
// # What the trail promises
//
// Every record outcome is in the trail, durably, before the progress that
// covers the record is recorded: a secondary's coverage, or the drain's
// progress through the write-ahead buffer. The checks (internal/check)
// call Append with a judged batch's outcomes and let the sink's Commit
// succeed only once Append has returned nil; coverage and progress move
// only after a Commit that succeeded. So a crash at any instant leaves the
// outcome of every record the restarted node will not deliver again in
// the trail, and the records it will deliver again are judged again:
//
//   - per record and sink, the trail holds the outcome at least once;
//   - a record judged more than once (its batch re-read after a crash,
//     or recovered again) appears once per judgement, under its record
//     id; its latest judgement is the one whose delivery stands;
//   - exact counts are had by counting each (sink, record id) once, by
//     its latest outcome in the order the trail was written —
//     Summarise, and `weir dq`, do this (StreamSummary.Outcomes), and
//     report every judgement apart (Judged, Rejudged).
//
// The latest outcome of a record can differ from an earlier one only
// through content dedup: a claim that expired or was lost (a memory
// store across a restart) lets a record that was a duplicate pass. Its
// latest outcome is still the one the sink saw last.
//
// # Trail
//
// Append writes a batch's outcomes — one entry per (stream, sink,
// contract), filed under the window of Options.Window (1m) of wall-clock
// time that holds the moment of judging, aligned to multiples of it so
// that two nodes' entries carry the same bounds — in one Writer.Write:
// one fdatasync, or one transaction, per batch, never one per record. A
// failed write fails the Append and keeps nothing: the caller's Commit
// fails as transient, its progress waits, and the batch is sent again
// with the verdicts it was given. While the trail cannot be written the
// checked sinks therefore stall (a secondary lags and is recovered from
// raw later; the drain keeps the records in the buffer) rather than move
// past outcomes the trail lacks.
//
// Recovered notes a raw window [lo, hi) recovered into a sink, joined with
// the previous one of the same sink and mode when they touch or overlap.
// Recovery entries are aggregated in memory: a goroutine closes the
// window once it has passed and writes them with the Writer; a failed
// write keeps them pending (at most MaxPending, then the oldest are
// dropped, counted and logged at Error) and tries again on the next tick.
// They are noted after the window's coverage is recorded, so a crash may
// lose the last of them (at most one window's worth): they say where the
// quarantine view is incomplete, not what the checks decided.
//
// # Entries
//
// Each entry is one Entry, as JSON one line of an NDJSON file:
//
//	field                JSON type         kind      meaning
//	kind                 string            both      "outcomes" or "recovery"
//	stream               string            outcomes  the stream (source) judged
//	sink                 string            both      the sink the records go to
//	contract             string            outcomes  "<stream>@<version>"
//	from, to             RFC 3339 string   both      the window [from, to): for outcomes
//	                                                 the one holding the moment of
//	                                                 judging; a recovery window closed
//	                                                 early by Close ends then
//	outcomes             {outcome: count}  outcomes  pass, warn, reject, duplicate
//	codes                {code: count}     outcomes  rejected records by reason code
//	                                                 (decode, contract, dq)
//	rules                {rule: count}     outcomes  rejections by rule (decode, schema
//	                                                 or a rule's name) and warnings by
//	                                                 warn rule
//	sample_rejected_ids  [string]          outcomes  the first Options.Sample (16)
//	                                                 rejected record ids, 32 hex digits
//	records              [group]           outcomes  every record counted, by verdict:
//	                                                 {outcome, code, rule, warned, ids}
//	                                                 with ids the records' 16-byte ids
//	                                                 concatenated, in standard padded
//	                                                 base64
//	lo, hi               number            recovery  raw positions [lo, hi)
//	mode                 string            recovery  "rehydrate" or "skip-quarantine"
//
// Empty maps and lists are left out. A "skip-quarantine" recovery entry
// says that the quarantine view of that sink lacks the rejects of raw
// positions [lo, hi): they were recovered without being quarantined.
//
// # Directory (DirWriter)
//
// Files are named a-<unix nanos>.ndjson, in name order oldest first, and
// rolled once a file holds FileMaxBytes (16 MiB). Every Write appends its
// entries and fdatasyncs the file before it returns; a new file's
// directory entry is synced when it is created. A failed write or
// fdatasync stops the writer for good (an fdatasync is never retried):
// later Writes return an error wrapping the first (ErrStopped). The file
// is first cut back to its last acknowledged byte, so that no line of the
// refused batch is read back while the system runs (after a failed
// fdatasync the cut itself is not synced: a crash then may leave that
// batch's lines, which the Trail also writes again). ReadDir skips a torn
// last line — an unacknowledged write cut by a crash. A stopped writer
// fails every Append, so the checked sinks stall until the node is
// restarted (with a new file): the trail never moves on past outcomes it
// could not make durable.
//
// # PostgreSQL table (PGWriter)
//
//	column               type         kind      meaning
//	kind                 text         both      as in the NDJSON field
//	stream               text         outcomes  NULL for recovery
//	sink                 text         both
//	contract             text         outcomes  NULL for recovery
//	window_from          timestamptz  both      from (to the microsecond)
//	window_to            timestamptz  both      to; indexed, for reads since a time
//	outcomes             jsonb        outcomes  {outcome: count}; NULL when none
//	codes                jsonb        outcomes  {code: count}; NULL when none
//	rules                jsonb        outcomes  {rule: count}; NULL when none
//	sample_rejected_ids  text[]       outcomes  NULL when none
//	lo, hi               bigint       recovery  NULL for outcomes
//	mode                 text         recovery  NULL for outcomes
//	records              jsonb        outcomes  the records field; NULL when none
//	written_at           timestamptz  both      DEFAULT now()
//
// OpenPostgres creates the table (and the index on window_to) when they
// are missing, and adds the records column to a table of an older
// version. Each Write is one transaction: BEGIN, a pipelined batch of
// one INSERT per entry, COMMIT; the connection keeps synchronous_commit on,
// so a Write that returned is durable on the server.
//
// # Reading
//
// ReadDir and ReadPostgres read the entries back, in the order they were
// written (files in name order; rows by window, then written_at).
// Summarise folds them per (stream, contract) — totals per outcome, code
// and sink counting each (sink, record id) once by its latest outcome,
// every judgement apart, the top rules, a few sample ids, the first and
// last window — and lists, per sink, the raw position ranges recovered in
// skip-quarantine mode. Entries without records (written by an older
// version) are counted by their counts, at least once. Summarise holds one
// id per record read: narrow what it reads (`weir dq --since`) for a long
// trail. `weir dq` prints it.
package dqaudit
