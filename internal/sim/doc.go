// Package sim is the whole-engine deterministic simulation: its tests
// (build tag dst, `go test -tags dst ./internal/sim`) run the real
// write-ahead buffer, source gate, drain, primary raw (the file sink),
// fan-out, secondaries' live delivery and recovery, the offset store with
// its fencing, quarantine lanes and the memory budget of one node on a
// simulated disk (memfs behind errorfs), under one seeded scheduler and
// simulated time (testing/synctest), against a simulated world: a broker
// whose partitions redeliver everything not committed, a producer sending
// one frame a request (written inline when its shard's flusher is parked
// idle, as the socket's lone frames are), secondary sinks
// with a fault schedule, quarantine lanes that stall, and a claims store
// for leased recovery windows.
//
// # The scheduler
//
// Every call that leaves the node — a broker fetch or position commit, a
// producer's frame, a raw or secondary Commit, a claims-store call, a
// quarantine write — and every step of the buffer's flushers first parks
// at a yield point. The harness waits until every goroutine of the
// bubble is blocked (synctest.Wait), then takes one step chosen by the
// run's PRNG: release one parked call, advance simulated time, crash the
// node, or inject a fault. So the order of everything the node does to the
// world, and every fault, is a function of the run's spec and seed; the
// trace of steps is hashed; two runs of one spec hash alike unless the
// product's loops met a select with several ready channels, which Go
// resolves at random (TestEngineSimReplays measures how often).
//
// # Invariants
//
// Checked while the run goes and on every crash image:
//
//   - the budget in use never exceeds its limit;
//   - no coverage in the offset store claims a raw position whose record
//     the secondary does not hold (or did not refuse: a refusal is
//     accounted for by its quarantine);
//   - no secondary holds a record raw does not;
//
// and after the run settles (faults off, the last incarnation left to
// finish):
//
//   - every record whose broker position was committed is in raw, once by
//     id (a position never led what the gate made durable);
//   - every secondary holds every clean record of raw, and its coverage
//     spans raw;
//   - every record a secondary refused in the last incarnation is in its
//     quarantine lane or counted as shed — also while the lane stalls,
//     which must not stop the clean records;
//   - no goroutine is left (synctest fails a bubble that leaves one).
//
// A failing spec is written under testdata/failures as JSON and replays
// with WEIR_SIM_SPEC=<file>; the pinned specs under testdata/pinned run in
// every CI run. docs/testing.md says how to run a sweep.
package sim
