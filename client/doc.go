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
// # Errors
//
// A refusal from the daemon is a *NackError with the Nack code and message;
// errors.Is matches it against the sentinel of its code (ErrQueueTimeout,
// ErrDiskFull, ...). A Nack is final for its request: the client never
// resends it. Retryable tells whether pushing the same records again later
// (or elsewhere) can succeed; doing so is up to the caller.
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
// second time. Downstream, weir gives every record a deterministic id so
// sinks can absorb such duplicates, but a producer that cannot tolerate
// them must make its records idempotent (for example, carry its own unique
// key in the payload). The same holds for a caller that retries after a
// Nack or after its ctx ended while waiting.
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
