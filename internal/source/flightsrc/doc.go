// Package flightsrc is the Flight source ([[source]] type = "flight"):
// weir runs an Arrow Flight server, clients DoPut record batches to it,
// and each row of a batch becomes one record (the mapping of
// internal/arrowrec), written through the gate — the write-ahead buffer,
// or the primary raw with gate = "raw".
//
// # Protocol
//
// A client calls DoPut. The first FlightData message carries the
// descriptor and the schema, as every Flight client sends them:
//
//   - The descriptor is a PATH of one or two elements: the stream (one of
//     the source's streams; another name is NOT_FOUND), then, optionally,
//     the producer id (1 – 128 bytes): a name the producer keeps across
//     reconnects and restarts.
//   - Each batch's app_metadata is its sequence number: 8 bytes, an
//     unsigned integer, big endian. A producer with an id must send it
//     (else INVALID_ARGUMENT); without an id, a batch without one is
//     numbered by its place in the call (0, 1, …).
//
// For each batch, in the order sent, the server sends a PutResult whose
// app_metadata is the batch's sequence number, in the same 8 bytes — only
// once every row of the batch is durable at the gate (Gate.Write returned
// nil: the buffer's fdatasync, or raw's commit). A batch that cannot be
// made durable ends the call with UNAVAILABLE and no further PutResult;
// so does a stop of the source, once the batches it read are
// acknowledged (it reads no further one). The producer keeps every batch it has no
// PutResult for and sends them again, on a new call with the same
// producer id and sequence numbers: the source is producer-managed
// (source.ProducerManaged) and keeps no position of its own.
//
// A batch whose schema the mapping refuses (a union, say) or whose values
// it cannot write ends the call with INVALID_ARGUMENT before anything of
// it is written.
//
// # Record ids
//
// A row's id is source.TimedID(t, "weir-flight", source name, stream,
// producer id, sequence number, row index), laid out by time at t: the
// event-time column's value (event_time_column); without that column, ms
// 0 for a named producer (a resend must find the first copy's id) and the
// receive time for a call without a producer id, whose rows get fresh ids
// (its random producer id is never sent twice). So a resend by the same
// producer is the same records to every sink and deduplicates by id;
// another producer id or sequence number is another record. A sequence
// number names a batch: a producer never sends other rows under one it
// used before, or sinks take them for resends and keep the first.
//
// # Authentication and TLS
//
// With token_file, every call carries "authorization: Bearer <token>"
// (gRPC metadata) of a token with the push scope, in the format of the
// HTTP door's token file (httpin.Tokens; it may be the same file),
// re-read on SIGHUP; without one UNAUTHENTICATED, with a token that may
// not push PERMISSION_DENIED. tls_cert_file and tls_key_file serve TLS;
// tls_client_ca_file asks for client certificates (mutual TLS),
// optionally restricted to tls_allowed_identities. A listen address
// beyond loopback without a token file or client certificates is refused
// at validation unless allow_unauthenticated is set.
//
// # Flow control
//
// The batches all calls have read but not yet acknowledged are held in
// a budget of max_inflight_bytes (by default the source's prefetch share
// of memory_budget), a flow.Hold per call: a call whose next batch does
// not fit reads nothing further — gRPC's flow control then holds its
// client — until PutResults free room. While flow control is Critical
// the source is paused: a new DoPut is answered RESOURCE_EXHAUSTED with a
// google.rpc.RetryInfo detail of retry_after (the standard gRPC retry
// hint), and calls in progress read no further batch until it ends.
//
// # Streams
//
// ListFlights lists the configured streams; GetFlightInfo describes one:
// the schema of its latest DoPut (none before the first) and the rows and
// bytes received since the source started. DoGet is not served: the
// records are read from the sinks.
//
// Files: flightsrc.go (the source and its server), put.go (DoPut: a
// call's loop), read.go (reading a call's batches), ack.go (PutResults),
// ids.go (sequence numbers and record ids), size.go (a batch's bytes),
// info.go (ListFlights, GetFlightInfo), auth.go (bearer tokens),
// component.go (the registration and its settings), metrics.go.
package flightsrc
