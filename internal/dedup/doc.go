// Package dedup drops a stream's upstream duplicates — a producer's retry
// that published the same logical record again at a new offset, so that
// its record id differs — on the way from raw to the secondaries. It is
// opt-in per stream, and only for a stream whose contract declares a
// natural key or uniqueness: two distinct events may carry identical bytes,
// and dropping the second would be data loss caused by dedup. The key
// material is the declared fields (KeyOf hashes it with the stream's name),
// never the whole payload unless the contract says the payload is unique.
//
// # Best-effort by construction
//
// The seen-set is exact, with eviction: a Store maps a key to the record id
// that claimed it, for a window (minutes: the scale of a producer's retry),
// bounded by bytes in process. It never holds a probabilistic structure: a
// Bloom or cuckoo filter's "probably seen" is a false positive, and a false
// positive drops a legitimate record. Every error here runs the other way,
// a false negative — a duplicate that passes: a key evicted (by bytes) or
// expired (by window) reads as unseen, and so does every key while the
// store is down. Batching brings two races, and both fall on that side:
//
//   - two records of one batch with the same key would both read unseen
//     at lookup; they are resolved locally before the one store call (the
//     first claims; a later one with another id is a duplicate), so this
//     race costs nothing;
//   - two daemons judging the same key at once: on Redis each claim is one
//     atomic SET NX, so one wins and the other is told its id; where the
//     server lost the key (a restart without persistence, a failover to a
//     replica the write had not reached, its maxmemory eviction) both
//     pass. With Memory, daemons never see each other's claims at all.
//
// None of them can drop a record whose key no other record id claimed.
// Nothing downstream may depend on dedup: sinks stay idempotent on record
// id, and raw keeps every record, so a record dropped here is recoverable
// from raw.
//
// # Why key → record id
//
// A claim stores the record id with the key, not a bare "seen". The check
// stage claims before the secondary commits, so a crash between the two
// leaves the key claimed by a record that was never delivered; on restart
// that same record is redelivered (same offset, same record id) and must
// not be dropped as a duplicate of itself, or it would reach no secondary.
// A claim that finds its own id answers Redelivery, which passes; only
// another id is a Duplicate. Recovery replays are the same: they carry the
// records' own ids.
//
// # Stores
//
// Memory is in-process: exact LRU and TTL, bounded by MaxBytes at
// MemoryEntryBytes a key (measured; about 3.4 million keys in 256 MiB). It
// cannot see a retry consumed by another daemon. Redis is shared by every
// daemon pointed at it — a retry may land on any partition, so the set
// worth having is the shared one — and costs one pipelined round trip per
// batch (SET NX GET PX, Redis ≥ 7.0). Its memory is the server's, bounded
// by the window and the server's own maxmemory.
//
// Redis speaks the protocol itself (RESP2, resp.go) rather than through a
// general client: a batch's commands are written by hand into one reused
// buffer and sent in one write, and the replies parsed in place — a null
// is Claimed, a bulk string equal to the id Redelivery, any other bulk
// Duplicate, an error reply fails the call — so a claim allocates nothing
// (a general client built a command object, its arguments and its reply
// per key: six allocations a record). Connections are pooled; a new one
// sends AUTH and SELECT from the URL (parsed by go-redis's ParseURL, so it
// means what it means to any go-redis client, rediss:// included). The
// store's Timeout is a deadline on the connection for the whole call,
// dialling included. A connection that fails is closed, never reused; one
// found broken when taken from the pool (a server restart) is replaced
// and the batch sent once more within the same Timeout — safe, as a claim
// sent twice finds its own id. A reply out of step with the protocol drops
// the connection too; an error reply (OOM, WRONGTYPE, NOAUTH) does not,
// the rest of the batch's replies being read first.
//
// # Degrade, never stop
//
// A Deduper whose store fails passes every record of the batch, logs the
// failure once (slog Warn), reports Degraded to its Observer and its
// Health, and skips the store for RetryAfter before trying again, so an
// unreachable server costs one timeout per RetryAfter rather than one per
// batch. The first success logs the recovery and reports it. NewRedis does
// not fail when the server is down at start.
package dedup
