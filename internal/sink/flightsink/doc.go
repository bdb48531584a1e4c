// Package flightsink is the Arrow Flight sink (type = "flight"): each
// commit is sent to a Flight server as Arrow record batches in one DoPut
// stream, and Commit returns only once the server has answered every
// record batch with a PutResult.
//
// # The acknowledgement protocol
//
// A commit is one DoPut: the first message carries the flight descriptor
// (a PATH descriptor, the sink's path) and the schema; then come the
// record batches — as many as keep each Arrow message under
// max_message_bytes — and the client half-closes. The server must send
// one PutResult per record batch, in order, and only once that batch is
// durable in its own sense (fsynced, committed, replicated); its
// app_metadata is not read. The sink counts them: Commit returns nil when
// there is one per batch sent, and the stream ends with an OK status. A
// PutResult is never presumed from a send: a batch that was written to the
// socket but not acknowledged is not committed, and the commit fails
// transient so the drain sends it again.
//
// A server that ends the stream cleanly with fewer PutResults than batches
// does not keep this protocol, and the commit fails permanently (the
// batch is dead-lettered with that reason): retrying cannot change the
// server.
//
// # Errors
//
// gRPC status codes are classified at the seam (classify): Unavailable,
// DeadlineExceeded, ResourceExhausted, Aborted, Canceled, Internal (a
// reset stream) and Unknown (a handler's unexplained failure) are
// transient; Unauthenticated, PermissionDenied, NotFound,
// FailedPrecondition, Unimplemented and the rest are permanent.
// InvalidArgument is the server refusing the data: the rows at fault are
// isolated by bounded bisection (sinkcore.Bisect), each probe a DoPut of
// its own, and rejected one by one (CodeSinkRefused); the probes that
// pass are committed. A record too large for one Arrow message is
// rejected before anything is sent (CodeOversize).
//
// # Replays and the id column
//
// Delivery is at least once: after a transient failure the same records
// are sent again, some of which the server may already have made durable
// (its PutResult was lost with the connection). Every row carries
// weir_record_id, the record's deterministic id, so a server that
// deduplicates on that column (a primary key, an upsert, a merge) makes
// replays idempotent. That is the server's duty, as the primary key is a
// SQL table's; a server that does not keeps the copies, and readers
// deduplicate on the column.
//
// # The generic schema
//
// By default (columns = "generic") every batch is in GenericSchema:
// arrowrec.GenericSchema — the one definition of a record as Arrow —
// followed by what weir knows of a record besides:
//
//	weir_record_id  fixed_size_binary(16)       not null
//	event_time      timestamp(ns, UTC)          null: none
//	key             binary                      null: no key; empty: an empty key
//	headers         list<struct<key: utf8, value: binary>> (empty: none)
//	payload         binary
//	source          utf8
//	durability      utf8 ("durable"|"buffered")
//	received_at     timestamp(ns, UTC)
//
// # Typed columns
//
// With columns = "arrow", the rows of an Arrow source (records carrying
// arrowrec.HeaderSchema) are sent in typed columns: weir_record_id, then
// the columns of the stream's own Arrow schema, rebuilt from the JSON
// payload by arrowrec.Builder (arrowrec's table, read backwards). A
// commit is then one DoPut per schema, in the order the schemas first
// appear, and records without an Arrow schema are sent generic in a DoPut
// of their own. Only the first row of each source batch carries the
// schema itself (arrowrec.HeaderSchemaIPC); the sink keeps every schema
// it learns, fdatasynced, under <data_dir>/flight-schemas/<name> before
// the commit that sends rows of it returns, so a row whose schema row was
// delivered before a restart is still sent typed. A row whose schema the
// sink never saw, or whose payload does not fit its schema (edited by a
// transform, say), is rejected with CodeDecode; a schema that already has
// a weir_record_id column is refused the same way.
//
// With columns = "json_schema", every record's payload is sent in typed
// columns derived from a JSON Schema (ArrowFromJSONSchema has the
// mapping), after weir_record_id, in one DoPut; a payload that does not
// fit them is rejected with CodeDecode.
//
// # Connections
//
// The sink holds one gRPC client connection for its life, made lazily
// and remade by gRPC when it breaks (reconnection backoff capped at 5 s,
// and skipped by Health); each commit is a new DoPut stream on it. A
// stream per commit, rather than one long-lived DoPut, keeps the
// mapping from PutResults to batches trivially right across failures —
// a broken stream fails exactly the commit it carried, and the retry
// starts from a clean stream with its own descriptor and schema — for the
// cost of one HTTP/2 stream and one schema message per commit, which the
// benchmark (BenchmarkSinkVsBareClient) measures against a bare client on
// one long stream.
package flightsink
