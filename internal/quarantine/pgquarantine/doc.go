// Package pgquarantine keeps quarantined records in a PostgreSQL table: a
// destination of a secondary's quarantine lane (lane.Lane), beside
// package quarantine's NDJSON directories, holding the same facts in
// columns an operator can query.
//
// # Table
//
//	column          type         meaning
//	sink            text         the lane: the secondary's (or gate's) name
//	reason_code     text         a record.Code's name: decode, contract, dq,
//	                             retry-exhausted, sink-refused, oversize, unknown
//	stage           text         a record.Stage: ingest, gate, drain, secondary, check
//	component       text         what refused it: the sink, or for stage check the
//	                             contract ("orders@3")
//	rule            text         for stage check the part of the contract that
//	                             failed (decode, schema or a rule's name); '' otherwise
//	error           text         the refusal's text
//	payload         bytea        the record's original bytes
//	record_id       uuid         the record's 16-byte id, verbatim
//	source          text         where the record came from ("socket", "kafka:…")
//	origin_pos      text         where the source read it ("topic/partition@offset");
//	                             NULL when unknown
//	raw_position    bigint       the record's raw position (0 at a gate: the record
//	                             never reached raw)
//	record_key      bytea        the record's key; NULL: none, '' an empty key
//	headers         jsonb        the record's headers in order, NULL when none:
//	                             [{"key":…,"value":…,"value_encoding":"utf8"|"base64"}]
//	                             (package recjson's form: a value that is not UTF-8
//	                             text without NUL is in base64)
//	event_time      timestamptz  the record's own time; NULL when none
//	first_seen      timestamptz  when it was first refused; NULL when unknown
//	attempts        int          the commits made before the refusal
//	found_by        text         'live' or 'recovery'
//	quarantined_at  timestamptz  DEFAULT now()
//
//	PRIMARY KEY (sink, record_id, reason_code, rule)
//
// Open creates the table when it is missing (an existing table is used as
// it is). Text columns cannot hold a NUL byte or invalid UTF-8; such bytes
// in an error text, a source or a name become U+FFFD rather than have the
// row refused (the payload, key and headers keep every byte).
//
// # Writes
//
// Each Quarantine call is one statement, and so one transaction:
//
//	INSERT INTO t (…) SELECT * FROM unnest($1::text[], …, $7::bytea[], $8::uuid[], …)
//	ON CONFLICT (sink, record_id, reason_code, rule) DO NOTHING
//
// its columns sent as binary array parameters of a cached prepared
// statement, in one round trip. A record written again — a retried batch,
// a recovery that rehydrates a window already quarantined, one record
// twice in a batch — is skipped by the primary key, so a retry never adds
// a row. The connections keep synchronous_commit on: a nil return means
// the rows are on the server's disk, which a gate's quarantine requires.
//
// Why not COPY into a temporary table and INSERT … SELECT … ON CONFLICT
// from it: on the quarantine lane's batches (at most 256 records) it is
// no faster, and slower on small ones — it takes four round trips (BEGIN,
// COPY, INSERT, COMMIT) where unnest takes one, and writes every row
// twice — and it keeps a temporary table in the session, which a pooler
// in transaction mode does not. Measured (BenchmarkQuarantine, local
// PostgreSQL 15, 2 cores, ~310-byte payloads, synchronous commit):
//
//	batch  unnest             COPY + staging table
//	16     13,300–14,500 r/s  7,800–9,400 r/s
//	256    37,900–39,700 r/s  34,700–39,700 r/s
//
//	go test ./internal/quarantine/pgquarantine -run '^$' -bench BenchmarkQuarantine -benchtime 3s -count 2
//
// A call respects its context: the statement runs under ctx, bounded
// further by Options.Timeout, and a server that stops answering mid-write
// releases the caller when ctx ends (the connection is then dropped and a
// new one made for the next call). An error does not say that nothing was
// stored: a statement already sent may still commit after the caller gave
// up, so a failed batch's rows may be in the table or not, and writing
// them again adds no duplicate. The fan-out sheds what a failed call held;
// raw keeps those records.
package pgquarantine
