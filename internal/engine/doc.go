// Package engine holds the parts of a pipeline between its sources and its
// sinks: the gate a source writes through, the raw-first fan-out that feeds
// secondary sinks from primary raw, the recovery that replays raw into a
// lagging secondary, and the offset store that records how far each of
// them got. docs/architecture.md tells the story; this comment says where
// each part lives and which file keeps each promise (internal/config's
// TestEngineInvariantMap checks that every file and name it gives exists).
//
// # Files
//
//	gate.go         WABGate: the gate with a write-ahead buffer (Durable tier, one shard per source, oversize lane)
//	sinkgate.go     SinkGate: the gate without one (gate = "raw"), and SinkRecord
//	fanout.go       Fanout: FanoutOptions, SecondaryConfig, NewFanout, Commit / Appended (raw first, then offered to the secondaries), Close
//	secondary.go    a secondary's worker: bounded live queue, run loop, deliver / commitChunk with retry, cover after the ack
//	recovery.go     recovery windows over coverage gaps, window halving, stepping over positions raw no longer keeps
//	claims.go       Claims and Claim (recovery windows shared among nodes by lease), FencedStore, WindowKey, the window grid
//	claimed.go      claimed recovery: take a window with a gap nobody holds, enter its fence, replay it, give it up
//	admission.go    flow control: live batches and recovery windows reserved from the memory budget (a window reads no more than it reserved), queue fill, batch sizes and write results for the pacer
//	quarantine.go   each secondary's quarantine lane into its lane.Lane (own goroutine and buffer; sheds when full)
//	reject.go       a sink's rejections turned into lane records (record.FromSink)
//	coverage.go     the flusher: writes coverage to the offset store and reports the gauges every FlushInterval
//	health.go       the health poller: each secondary's Health every HealthInterval, reported and logged on change
//	store.go        CoverageStore: the offset store as the fan-out uses it, with its lag/lead contract
//	offsetstore.go  OffsetStore: coverage, cursors and raw end in memory, merged into what is persisted
//	fence.go        Fence, ErrFenced, OffsetStore.Enter and CoverFenced: coverage recorded only under a window's newest claim
//	offsetfile.go   the offset file in raw's directory (OpenOffsetStore): format, lock, durable replace
//	cursorstore.go  FileCursorStore: source cursors in one durably replaced file
//	spanset.go      SpanSet: sets of raw positions (coverage, queued spans), with their encoding
//	role.go         Role (both, ingest, recovery) and RecoveryMode (rehydrate, skip-quarantine)
//	observer.go     Observer: what the fan-out reports for metrics
//	stats.go        FanoutStats and SinkStats: coverage, lag and counters per secondary
//	dst_on.go       the simulation build's deliberately broken fan-out (cover before the ack), for internal/sim's catch test; dst_off.go is the real build's
//
// Sub-packages, for tests only (the daemon never imports them; cmd/weir's
// TestDaemonBuildHasNoTestSupport checks it): enginetest gives source tests
// a real buffer, a drain to a file raw and the position invariant Checker;
// outage runs the fan-out against a Postgres secondary that is cut off and
// restored. Package internal/sim runs this package's parts, with the
// buffer and the drain, under the whole-engine deterministic simulation
// (docs/testing.md), which checks the invariants below after every step
// and on every crash image.
//
// # Invariants and where they are kept
//
// The gate's durable ack. WABGate.Write (gate.go) returns nil only once
// every request it submitted has been answered Done(nil) by the buffer's
// Durable tier: fdatasynced, in a segment whose directory entry is durable.
// SinkGate.Write (sinkgate.go) returns nil only after the sink's Commit
// returned — a durable ack by the sink contract — and after the records the
// sink refused are durable in the gate's quarantine. On any error nothing
// of the Write may be treated as durable.
//
// A record a gate rejects is never nowhere. WABGate.Write stores the
// records the buffer cannot hold (GateOptions.MaxRecordBytes,
// wab.MaxMetaBytes) in its rejection lane — code oversize, stage gate —
// before it submits the rest (WABGate.reject in gate.go), so that a source
// may commit past them; a lane that fails fails the Write. SinkGate does
// the same for what the sink refuses (sinkgate.go).
//
// Positions may lag, never lead. A source commits its position only after
// the gate's Write returned nil (the seam's contract, package source; the
// gates above are what makes nil mean durable). A store-managed cursor is
// saved only when durable (OffsetStore.Save in offsetstore.go,
// FileCursorStore.Save in cursorstore.go). A recovery-only node reads raw
// no further than the end a writer recorded after its acks
// (Fanout.startEnd in fanout.go, the flusher in coverage.go). The Checker
// in enginetest checks the rule in every source's tests.
//
// Coverage only after the secondary's durable ack. secondary.deliver
// (secondary.go), for live batches and recovery windows alike, calls
// CoverageStore.Cover for a chunk only after commitChunk saw the
// secondary's Commit return nil (each record delivered, or rejected and
// handed to the quarantine lane). Recovery covers on its own only a gap
// raw says holds nothing, or no longer keeps, and a record larger than the
// memory budget can grant, handed to the quarantine lane as oversize
// (secondary.oversize in recovery.go). The store
// persists what was covered in memory later (coverage.go; Flush in
// offsetstore.go), so what is written may lag the acks, never lead them,
// and a merge with what another writer persisted only unites coverage.
//
// No coverage under a superseded claim. With FanoutOptions.Claims a
// secondary recovers only a window it has claimed (claimed.go), enters
// the claim's token in the offset store before replaying anything
// (OffsetStore.Enter, refused when a newer claim entered), and records the
// window's coverage with OffsetStore.CoverFenced, which checks inside the
// store's locked read-merge-write that the token is still the window's
// newest (fence.go) and gives memory the span only once it is durable. A
// holder whose lease ended — and whose window another node then claimed —
// therefore records nothing, even before it hears that it lost the lease;
// what it wrote to the sink is harmless (record ids). It also stops
// recording as soon as its claim's Lost fires.
//
// Recovery from raw in bounded windows. secondary.recoverWindow
// (recovery.go) reads at most the current window of records, and at most
// the bytes it reserved (above), from the first gap in coverage — positions queued for live delivery count as covered —
// and commits them under a WindowTime deadline; a window that misses it is
// halved (down to minWindowRecords) and grows back after a window that
// fits. A gap raw no longer keeps (sink.PositionsGone) is stepped over,
// counted and logged, never asked for again.
//
// No secondary slows the source. Fanout.Commit (fanout.go) returns raw's
// result; the records are then offered to each secondary's bounded queue
// without waiting (secondary.offer in secondary.go), and a full queue —
// in batches or in bytes — drops the batch for that secondary, counted,
// for recovery to fill in. The batch's memory is reserved from the budget
// without waiting too (Fanout.offer in admission.go): a batch the budget
// cannot grant at once is dropped for every secondary.
//
// Memory held is reserved. A live batch holds its size (sink.Record.
// MemSize) from the budget from when it is offered until the last
// secondary that queued it has committed or dropped it (liveBatch.done); a
// recovery window reserves before it reads raw — the recent size per
// record × its records, at most a quarter of what the budget can grant —
// waiting in a select beside the live queue so that live batches go on
// releasing meanwhile (reserveWindow, awaitGrant in admission.go), and
// releases it once committed. What a window reads never exceeds what it
// reserved, from the first window after a restart on, whatever the
// record_size_estimate: the reservation is the read's byte bound
// (sink.RawReader.ReadFrom's maxBytes, counted by sink.ReadLimit in every
// raw reader; replayGap in recovery.go), and fitWindow cuts off whatever
// a reader returned past it. Only a window's first record may be larger:
// it is admitted alone with its whole size reserved, or, larger than the
// budget can grant, quarantined as oversize (fitWindow, then
// secondary.oversize).
//
// Quarantine never backpressures the clean path. A secondary hands its
// rejected records to its quarantine lane without blocking
// (secondary.accounted in secondary.go); the lane writes on its own
// goroutine (quarantine.go) and sheds, counted, when full or failing — raw
// still keeps every record.
package engine
