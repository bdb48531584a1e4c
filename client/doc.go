// Package client is the producer library for weir.
//
// A Client holds one connection to a weir daemon and pushes records over it
// with the wire protocol (package wire; the format is in
// docs/wire_protocol.md). It can be used without the daemon's packages.
//
//	c, err := client.Dial(ctx, "unix:///run/weir/weir.sock")
//	if err != nil { ... }
//	defer c.Close(ctx)
//	if err := c.Push(ctx, record, client.Durable); err != nil { ... }
//
// # Durability
//
// Every push names a tier. With Durable, an Ack means the records are on
// stable storage and survive a power loss. With Buffered, an Ack means the
// records are in the daemon's write-ahead buffer and survive a crash of the
// daemon process, but not a power loss or a kernel crash.
//
// # Pushing
//
// Push sends one record and waits for its answer; PushBatch sends many
// records as one frame answered by one response (all acknowledged or all
// refused). PushAsync does the same as PushBatch without waiting: it
// returns as soon as the records are queued and reports the outcome to a
// callback. Requests are pipelined: the client writes them as they come,
// without waiting for earlier answers, up to an in-flight window counted in
// records (WithWindow, default 1024). A push blocks while the window is
// full, and gives up with ctx's error when ctx ends first. One goroutine
// writes each connection and one reads it, matching every response to its
// request by request id.
//
// # Idempotent producers and record metadata
//
// The client speaks wire protocol version 2: every connection opens with
// a Hello naming the client's Producer — 16 random bytes chosen once per
// Client (or shared by several Clients through WithProducer) and kept
// across every reconnect. Each record is numbered from the Producer's
// counter and stamped with the time of its push when it is first pushed;
// a resend carries the same number and stamp, so the daemon stores it
// under the same record id and idempotent sinks absorb the copy. Against
// a daemon that speaks only version 1 the client falls back to it (no
// producer id: a resent record is a new record); WithProtocolVersion(1)
// does so always.
//
// PushRecords and PushRecordsAsync push Records, which may carry a key,
// ordered headers, their own event time and — for weir deadletter replay,
// on the Unix socket only — a Replay identity that the daemon keeps
// instead of deriving an id.
//
// # Errors
//
// A refusal from the daemon is a *NackError with the Nack code and message;
// errors.Is matches it against the sentinel of its code (ErrQueueTimeout,
// ErrDiskFull, ...). A Nack is final for its request: the client never
// resends it (Overloaded aside, below). Retryable tells whether pushing the
// same records again later (or elsewhere) can succeed; doing so is up to
// the caller.
//
// What a push's error says about its records, and what to do:
//
//   - nil: acknowledged at the tier asked for.
//   - Not stored — push them again if you want them: ErrOverloaded (the
//     *NackError; only with WithOverloadRetries, and only for a request no
//     copy of which can have been taken: every time it was written the
//     daemon answered, each time Overloaded, which it answers before
//     taking anything); ctx's error alone (the request was taken back
//     before it was ever written); ErrClosed alone (Close gave up on a
//     request never written, or the push came after Close); and the local
//     refusals (ErrEmptyBatch, ErrFrameTooLarge, ErrBadDurability,
//     ErrBadMeta, ErrUnsupported, ErrNotPermitted) returned before the
//     request was queued.
//   - Refused for good: a *NackError of a code that is not Retryable.
//     The same records will be refused the same way; fix them.
//   - Not acknowledged: a *NackError of another retryable code
//     (QueueTimeout, ShuttingDown, ShardFailed, DiskFull) to a request
//     whose every copy was answered. The daemon did not acknowledge the
//     records, but a shard that failed part-way may have kept some (see
//     docs/wire_protocol.md); pushing them again is at least once, as a
//     resend after a reconnect is.
//   - Outcome unknown: an *OutcomeUnknownError (errors.Is(err,
//     ErrOutcomeUnknown)). A copy of the request was written on a
//     connection that broke before its answer came, or is on the wire
//     now, and the client gave up before a definitive answer — the
//     push's ctx ended, Close gave up, or the resent copy was refused
//     with a retryable code, which says nothing of the earlier one. The
//     daemon may have stored the records. To push them again without
//     making a second record, use Client.Repush, which sends them under
//     the same producer id and sequence numbers, so a stored copy and the
//     new one share their record ids; pushing the payloads again as new
//     records stores them under new ids. errors.Is also matches the
//     error's Cause (the ctx error, ErrClosed, the Nack's sentinel), never
//     ErrOverloaded, and Retryable reports false for it.
//
// Check ErrOutcomeUnknown before anything else: an outcome-unknown error
// also matches context.DeadlineExceeded or ErrClosed.
//
// # Overload
//
// A daemon that holds as much in memory as its budget allows, or whose
// flow control is throttling producers, refuses a request with Overloaded
// before it takes any of its records, and names a pause in the Nack
// (retry_after_ms, see docs/wire_protocol.md). The client does not hand
// that refusal to the caller: it keeps the request, writes nothing on the
// connection for the pause — the daemon's hint, doubled for each further
// Overloaded answer to the same request, plus up to half again of random
// jitter, at most WithOverloadMaxDelay — and then sends it again,
// unchanged, before anything pushed meanwhile. Callers see only latency;
// the request keeps its place in the window, so pushes block as the window
// fills. Requests already on their way when the refusal came may be
// acknowledged before the resent one, so its records can be stored after
// records pushed later. WithOverloadRetries bounds the resends (then the
// caller gets the *NackError, ErrOverloaded, with its RetryAfter);
// OverloadRetried counts them.
//
// WithOverloadRetries bounds only requests no copy of which can have been
// stored. A request resent after a reconnect (below) may have been stored
// by the connection that broke: an Overloaded answer to the resent copy
// says only that this copy was not taken. Handing it to the caller as
// ErrOverloaded would be a lie that a caller pushing the records again
// turns into duplicates under new ids, so the client keeps retrying such a
// request, pausing as the daemon asks, however many refusals
// WithOverloadRetries allows, until another answer settles it (an Ack; a
// permanent Nack, as itself; a retryable one, as an *OutcomeUnknownError),
// or until the ctx of its push ends (an *OutcomeUnknownError) or Close
// gives up on it (the same, wrapping ErrClosed).
//
// # Reconnecting and at-least-once delivery
//
// When the connection breaks, the client keeps every request that has not
// been answered, redials with capped exponential backoff (WithBackoff), and
// sends those requests again on the new connection in their original
// order, before anything pushed later. Callers see nothing of this except
// latency: their callbacks run once, with the answer from whichever
// connection gave it.
//
// Delivery is therefore at least once, not exactly once. A request that
// was cut off may have been made durable by the daemon before the break
// with its Ack lost on the way back; resending it stores its records a
// second time — under the same record ids (version 2), which idempotent
// sinks (Postgres, MySQL) absorb and readers of the file sink can drop.
// With a version-1 daemon the copies get new ids, and a producer that
// cannot tolerate them must make its records idempotent itself (for
// example, carry its own unique key in the payload). A caller that pushes
// records again after a Nack or after an *OutcomeUnknownError makes new
// records (new sequence numbers), in either version; Client.Repush is the
// way to push the latter again as the same records.
//
// The client redials until Close. A push blocked on an unreachable daemon
// waits as long as its ctx allows; the request stays queued meanwhile.
//
// # Closing
//
// Close stops new pushes, waits up to its ctx for the requests in flight to
// be answered, fails any that remain with ErrClosed, and returns after the
// connection is closed and every goroutine of the client has exited.
package client
