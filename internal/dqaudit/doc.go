// Package dqaudit is weir's data-quality audit trail: what the contract
// checks did with the records of each stream, window by window, and which
// raw windows recovery delivered without rebuilding their quarantine rows.
// It is written to its own durable destination — an NDJSON directory or a
// PostgreSQL table — so that it survives quarantine shedding: the
// quarantine lane may drop rejected records when it is full (raw keeps
// them), the trail still counts them.
//
// # Trail
//
// A Trail aggregates in memory. Add counts a batch's outcomes per
// (stream, sink, contract) in the current window; Recovered notes a raw
// window [lo, hi) recovered into a sink, joined with the previous one of
// the same sink and mode when they touch or overlap. Windows are aligned
// to multiples of Options.Window (1m) of wall-clock time, so two nodes'
// entries for one window carry the same bounds. A goroutine closes the
// window once it has passed and writes its entries with the Writer; a
// failed write keeps them pending (at most MaxPending, then the oldest are
// dropped, counted and logged at Error) and tries again on the next tick.
// Add and Recovered take one mutex and never wait for the Writer.
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
//	from, to             RFC 3339 string   both      the window [from, to); a window
//	                                                 closed early by Close ends then
//	outcomes             {outcome: count}  outcomes  pass, warn, reject, duplicate
//	codes                {code: count}     outcomes  rejected records by reason code
//	                                                 (decode, contract, dq)
//	rules                {rule: count}     outcomes  rejections by rule (decode, schema
//	                                                 or a rule's name) and warnings by
//	                                                 warn rule
//	sample_rejected_ids  [string]          outcomes  the first Options.Sample (16)
//	                                                 rejected record ids, 32 hex digits
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
// last line — an unacknowledged write cut by a crash.
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
//	written_at           timestamptz  both      DEFAULT now()
//
// OpenPostgres creates the table (and the index on window_to) when they
// are missing. Each Write is one transaction: BEGIN, a pipelined batch of
// one INSERT per entry, COMMIT; the connection keeps synchronous_commit on,
// so a Write that returned is durable on the server.
//
// # Reading
//
// ReadDir and ReadPostgres read the entries back; Summarise folds them per
// (stream, contract) — totals per outcome, code and sink, the top rules, a
// few sample ids, the first and last window — and lists, per sink, the raw
// position ranges recovered in skip-quarantine mode. `weir dq` prints it.
package dqaudit
