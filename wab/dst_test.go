//go:build dst

package wab

// Deterministic simulation tests of the write path (docs/testing.md).
//
// A run drives a real Log on an in-memory file system that models what a
// power loss keeps (memfs), through errorfs for injected faults. The
// flushers are scheduled by the harness through the dst step hook, so that
// every FS call happens in an order fixed by the run's spec and seed. At
// each acknowledgement the harness checks that the records are already
// where the tier promises (stable storage for Durable, the kernel for
// Buffered); at the end it crashes the file system (and, if the spec says
// so, also at a chosen FS call mid-run), reopens the crash images with the
// real Open, reads them back with the real reader and checks that nothing
// acknowledged was lost.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
)

const dstDir = "/wab"

// dstScenarios are the scenarios every seed runs, in order.
var dstScenarios = []string{"fsync-eio", "torn-write", "seal-rename", "enospc-seal", "interleave"}

// dstFault is one injected fault: an errorfs rule in its spec grammar.
type dstFault struct {
	Rule string `json:"rule"`
	// Close: armed just before Close (a fault of the shutdown seal)
	// instead of from the start.
	Close bool `json:"close,omitempty"`
}

// dstSpec fixes a run. Everything it does not fix (payload sizes and
// tiers, which producer and shard act next, what a torn crash keeps) comes
// from the PRNG seeded with Seed, so a spec and its seed replay exactly.
type dstSpec struct {
	Scenario  string `json:"scenario"`
	Seed      string `json:"seed"`      // 0x-prefixed hex
	Records   int    `json:"records"`   // records to submit, in requests of 1..MaxPerRequest
	Shards    int    `json:"shards"`    // 1 or more
	Producers int    `json:"producers"` // each numbers its records 0, 1, 2...
	// Interleave: producers submit without waiting and flushers take steps
	// in a PRNG-chosen order. Otherwise each request is answered before the
	// next is submitted.
	Interleave       bool       `json:"interleave,omitempty"`
	MaxPerRequest    int        `json:"max_per_request"`
	MaxPayload       int        `json:"max_payload"`
	DurablePct       int        `json:"durable_pct"`
	SegmentMaxBytes  int64      `json:"segment_max_bytes"`
	PreallocateBytes int64      `json:"preallocate_bytes"`
	BatchMaxRecords  int        `json:"batch_max_records"`
	Faults           []dstFault `json:"faults,omitempty"`
	// CrashOp and CrashN place a power-loss snapshot mid-run: right after
	// the CrashN-th (from 0) completed call of that errorfs operation ("*"
	// for any call that changes state) whose path matches CrashPath (a glob;
	// empty for all), or, for CrashOp "step", before the CrashN-th
	// scheduling step. Empty CrashOp: no mid-run snapshot.
	CrashOp   string `json:"crash_op,omitempty"`
	CrashPath string `json:"crash_path,omitempty"`
	CrashN    int    `json:"crash_n,omitempty"`
	// CrashMode is the memfs crash mode of power-loss images: drop, prefix
	// or torn; Junk fills lost bytes with garbage instead of zeros.
	CrashMode string `json:"crash_mode"`
	Junk      bool   `json:"junk,omitempty"`
	// Kill ends the run like kill -9 instead of Close.
	Kill bool   `json:"kill,omitempty"`
	Note string `json:"note,omitempty"`
	// Broken turns on a deliberately broken flusher for the run
	// ("ack-before-sync" or "skip-dir-sync") and Expect names the invariant
	// the run must then report. Only pinned specs of the catch tests use it.
	Broken string `json:"broken,omitempty"`
	Expect string `json:"expect,omitempty"`
	// InlinePct is the chance that a request is submitted with
	// SubmitInline (written inline when its shard is idle) instead of
	// Submit.
	InlinePct int `json:"inline_pct,omitempty"`
}

func (s *dstSpec) seed() uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s.Seed, "0x"), 16, 64)
	if err != nil {
		panic(fmt.Sprintf("dst: bad seed %q", s.Seed))
	}
	return v
}

func (s *dstSpec) json() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func hexSeed(v uint64) string { return fmt.Sprintf("0x%016x", v) }

// splitmix64 derives seeds from a base seed.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// genSpec derives the spec of a scenario from a seed.
func genSpec(scenario string, seed uint64) *dstSpec {
	rng := rand.New(rand.NewPCG(seed, 0x5ce7a110))
	s := &dstSpec{
		Scenario:         scenario,
		Seed:             hexSeed(seed),
		Records:          8 + rng.IntN(120),
		Shards:           1,
		Producers:        1 + rng.IntN(2),
		MaxPerRequest:    1 + rng.IntN(4),
		MaxPayload:       16 + rng.IntN(300),
		DurablePct:       []int{100, 80, 60, 30}[rng.IntN(4)],
		SegmentMaxBytes:  int64(512 + rng.IntN(6<<10)),
		PreallocateBytes: []int64{-1, 256, 1024, 4096}[rng.IntN(4)],
		BatchMaxRecords:  1 + rng.IntN(16),
		CrashMode:        []string{"drop", "prefix", "torn"}[rng.IntN(3)],
		Junk:             rng.IntN(2) == 0,
		Kill:             rng.IntN(3) == 0,
	}
	if rng.IntN(3) > 0 {
		s.CrashOp, s.CrashN = "*", rng.IntN(6*s.Records)
	}
	switch scenario {
	case "fsync-eio":
		// A flush whose fdatasync fails; sometimes the directory fsync of
		// a new segment or a seal fails instead or as well.
		s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("sync:*.wab:after=%d:once:EIO", rng.IntN(s.Records/2+1))})
		if rng.IntN(4) == 0 {
			s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("syncdir:*/shard-*:after=%d:once:EIO", rng.IntN(8))})
		}
	case "torn-write":
		// A write to a segment (a batch, usually: requests carry several
		// records) stops after a few bytes with EIO or ENOSPC.
		s.MaxPerRequest = 2 + rng.IntN(6)
		errno := []string{"EIO", "ENOSPC"}[rng.IntN(2)]
		s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("write:*.wab:after=%d:once:torn=%d:%s", rng.IntN(s.Records/2+2), 1+rng.IntN(2*s.MaxPayload), errno)})
	case "seal-rename":
		// Small segments, so that seals are frequent; a power loss right
		// after a seal's fdatasync (the rename fails and the snapshot is
		// taken there) or right after the rename, before the directory
		// fsync.
		s.SegmentMaxBytes = int64(300 + rng.IntN(1200))
		k := rng.IntN(4)
		s.CrashOp, s.CrashPath, s.CrashN = "rename", "*.wab", k
		if rng.IntN(2) == 0 {
			s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("rename:*.wab:after=%d:once:EIO", k)})
		}
	case "enospc-seal":
		// ENOSPC at the shutdown seal, and sometimes at segment creation
		// or preallocation during the run.
		s.Kill = false
		s.Faults = append(s.Faults, dstFault{Close: true, Rule: []string{
			"write:*.wab:once:ENOSPC",
			fmt.Sprintf("write:*.wab:once:torn=%d:ENOSPC", 1+rng.IntN(43)),
			"sync:*.wab:once:ENOSPC",
			"truncate:*.wab:once:ENOSPC",
		}[rng.IntN(4)]})
		switch rng.IntN(3) {
		case 0:
			s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("create:*.wab:after=%d:once:ENOSPC", rng.IntN(4))})
		case 1:
			s.PreallocateBytes = []int64{256, 1024}[rng.IntN(2)]
			s.Faults = append(s.Faults, dstFault{Rule: fmt.Sprintf("preallocate:*.wab:after=%d:once:ENOSPC", rng.IntN(6))})
		}
	case "interleave":
		s.Interleave = true
		s.Shards = 1 + rng.IntN(2)
		s.Producers = 2 + rng.IntN(3)
		s.Records = 16 + rng.IntN(200)
		if s.CrashOp != "" && rng.IntN(2) == 0 {
			s.CrashOp, s.CrashN = "step", rng.IntN(3*s.Records)
		}
		if rng.IntN(2) == 0 {
			s.Faults = append(s.Faults, dstFault{Rule: randomFaultRule(rng, s.Records)})
		}
	default:
		panic("dst: unknown scenario " + scenario)
	}
	// Drawn apart from rng, so that every other field of a seed's spec is
	// what it was before inline writes were simulated.
	s.InlinePct = []int{0, 25, 60, 100}[splitmix64(seed^0x1471e)%4]
	return s
}

// randomFaultRule is one fault of any kind at a random position.
func randomFaultRule(rng *rand.Rand, records int) string {
	k := rng.IntN(records/2 + 2)
	switch rng.IntN(6) {
	case 0:
		return fmt.Sprintf("sync:*.wab:after=%d:once:EIO", k)
	case 1:
		return fmt.Sprintf("write:*.wab:after=%d:once:torn=%d:EIO", k, 1+rng.IntN(400))
	case 2:
		return fmt.Sprintf("rename:*.wab:after=%d:once:EIO", rng.IntN(4))
	case 3:
		return fmt.Sprintf("syncdir:*/shard-*:after=%d:once:EIO", rng.IntN(8))
	case 4:
		return fmt.Sprintf("create:*.wab:after=%d:once:ENOSPC", rng.IntN(4))
	default:
		return fmt.Sprintf("write:*.wab:after=%d:once:ENOSPC", k)
	}
}

// ---- scheduling ----

// dstGate is the dstStepper of one run: a flusher runs only when granted a
// step, and the harness waits for it to park again, so exactly one
// goroutine (the harness or one flusher) works at a time.
type dstGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	free   bool
	grant  map[int]int
	parked map[int]bool
	exit   map[int]bool
}

func newGate() *dstGate {
	g := &dstGate{grant: map[int]int{}, parked: map[int]bool{}, exit: map[int]bool{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *dstGate) park(shard int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.parked[shard] = true
	g.cond.Broadcast()
	for !g.free && g.grant[shard] == 0 {
		g.cond.Wait()
	}
	if g.grant[shard] > 0 {
		g.grant[shard]--
	}
	g.parked[shard] = false
	g.cond.Broadcast()
}

func (g *dstGate) exited(shard int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.exit[shard] = true
	g.cond.Broadcast()
}

// waitParked waits until the shard's flusher is parked.
func (g *dstGate) waitParked(shard int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.parked[shard] {
		g.cond.Wait()
	}
}

// step lets the shard's flusher take one turn of its loop and waits until
// it is parked again or has returned; it reports whether it returned.
func (g *dstGate) step(shard int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exit[shard] {
		return true
	}
	g.grant[shard]++
	g.cond.Broadcast()
	for g.grant[shard] > 0 && !g.exit[shard] {
		g.cond.Wait()
	}
	for !g.parked[shard] && !g.exit[shard] {
		g.cond.Wait()
	}
	return g.exit[shard]
}

// inline implements dstInliner: a caller may write in a parked flusher's
// place until the flushers run freely.
func (g *dstGate) inline(int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.free
}

// release lets every flusher run freely from now on.
func (g *dstGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free = true
	g.cond.Broadcast()
}

// ---- the run ----

type dstViolation struct {
	Invariant string
	Detail    string
}

type dstRec struct {
	key      string
	payload  []byte
	dur      Durability
	received int64
	shard    int
	producer int
	seq      int
	acked    bool
	// ackedBefore: acknowledged before the mid-run power-loss snapshot.
	ackedBefore bool
}

type dstReq struct {
	recs  []*dstRec
	dur   Durability
	calls int
	err   error
}

type foundRec struct {
	payload  []byte
	dur      Durability
	received int64
	path     string
}

// dstStats counts what a run exercised.
type dstStats struct {
	Runs, Submitted, AckedDurable, AckedBuffered, Failed int
	FaultsFired, MidRunCrashes, Images, Recovered        int
	Inline                                               int // requests written inline
	TailReads                                            int // records read from open segments' tails
}

func (a *dstStats) add(b dstStats) {
	a.Runs += b.Runs
	a.Submitted += b.Submitted
	a.AckedDurable += b.AckedDurable
	a.AckedBuffered += b.AckedBuffered
	a.Failed += b.Failed
	a.FaultsFired += b.FaultsFired
	a.MidRunCrashes += b.MidRunCrashes
	a.Images += b.Images
	a.Recovered += b.Recovered
	a.Inline += b.Inline
	a.TailReads += b.TailReads
}

func (a dstStats) String() string {
	return fmt.Sprintf("%d runs: %d records submitted (%d requests written inline), %d Durable and %d Buffered acks, %d failed; %d records read from open tails; %d faults fired, %d mid-run power losses; %d crash images recovered (%d records read back)",
		a.Runs, a.Submitted, a.Inline, a.AckedDurable, a.AckedBuffered, a.Failed, a.TailReads, a.FaultsFired, a.MidRunCrashes, a.Images, a.Recovered)
}

type dstRun struct {
	stats dstStats
	// trace, when tracing, lists every FS call of the Log and every answer,
	// in order: two runs of one spec must produce the same trace.
	tracing bool
	trace   []string
	spec    *dstSpec
	t       testing.TB
	mem     *memfs.FS
	efs     *errorfs.FS
	gate    *dstGate
	log     *Log

	crashRng *rand.Rand
	// inlineRng chooses SubmitInline over Submit (spec.InlinePct), apart
	// from the other draws so that specs without it run as before.
	inlineRng *rand.Rand

	mu         sync.Mutex
	recs       map[string]*dstRec
	order      []*dstRec
	reqs       []*dstReq
	violations []dstViolation
	syncFailed map[string]bool
	crashCount int
	crashed    bool
	midImage   *memfs.FS
	steps      int
	// closing is set when Close starts; closeErrnos lists the errnos
	// injected from then on.
	closing     bool
	closeErrnos []syscall.Errno

	durGen, volGen     uint64
	durView, volView   map[string]foundRec
	durValid, volValid bool
}

func (r *dstRun) violate(inv, format string, args ...any) {
	r.violations = append(r.violations, dstViolation{inv, fmt.Sprintf(format, args...)})
}

func (r *dstRun) crashOpts(mode string) memfs.CrashOptions {
	m, err := memfs.ParseCrashMode(mode)
	if err != nil {
		panic(err)
	}
	return memfs.CrashOptions{Mode: m, Rand: r.crashRng, PageSize: 512, SectorSize: 64, Junk: r.spec.Junk}
}

// snapshot takes the mid-run power-loss image. Callers hold r.mu.
func (r *dstRun) snapshot() {
	if r.crashed {
		return
	}
	r.crashed = true
	r.midImage = r.mem.CrashClone(r.crashOpts(r.spec.CrashMode))
}

var mutatingOps = map[errorfs.Op]bool{
	errorfs.OpCreate: true, errorfs.OpWrite: true, errorfs.OpSync: true, errorfs.OpSyncDir: true,
	errorfs.OpRename: true, errorfs.OpRemove: true, errorfs.OpPreallocate: true,
	errorfs.OpTruncate: true, errorfs.OpMkdir: true,
}

// onEvent sees every FS call after it returned.
func (r *dstRun) onEvent(ev errorfs.Event) {
	if r.tracing {
		r.mu.Lock()
		r.trace = append(r.trace, fmt.Sprintf("%s %s %v", ev.Op, ev.Path, ev.Err))
		r.mu.Unlock()
	}
	if !mutatingOps[ev.Op] {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing && ev.Injected {
		var ie *errorfs.InjectedError
		if errors.As(ev.Err, &ie) {
			r.closeErrnos = append(r.closeErrnos, ie.Errno)
		}
	}
	if ev.Op == errorfs.OpSync {
		if r.syncFailed[ev.Path] {
			r.violate("fsync-retried", "fdatasync of %s called again after it failed", ev.Path)
		}
		if ev.Err != nil {
			r.syncFailed[ev.Path] = true
		}
	}
	op := r.spec.CrashOp
	if op == "" || op == "step" || (op != "*" && op != ev.Op.String()) {
		return
	}
	if r.spec.CrashPath != "" && !errorfs.Match(r.spec.CrashPath, ev.Path) {
		return
	}
	if r.crashCount == r.spec.CrashN {
		r.snapshot()
	}
	r.crashCount++
}

// scan reads every record of every segment file under dstDir in fsys, keyed
// by the record's key (the payload up to its first ':').
func scan(fsys *memfs.FS) map[string]foundRec {
	out := map[string]foundRec{}
	shards, _ := fsys.ReadDir(dstDir)
	for _, sd := range shards {
		if _, ok := parseShardDir(sd); !ok {
			continue
		}
		dir := filepath.Join(dstDir, sd)
		names, _ := fsys.ReadDir(dir)
		for _, name := range names {
			if _, kind := parseSegmentName(name); kind != kindOpenSeg && kind != kindSealedSeg {
				continue
			}
			p := filepath.Join(dir, name)
			rd, err := OpenSegment(fsys, p)
			if err != nil {
				continue
			}
			for {
				rec, err := rd.Next()
				if err != nil {
					break
				}
				key, _, _ := bytes.Cut(rec.Payload, []byte(":"))
				out[string(key)] = foundRec{payload: bytes.Clone(rec.Payload), dur: rec.Durability, received: rec.Received, path: p}
			}
			rd.Close()
		}
	}
	return out
}

// views returns what a power loss (durable) and a process crash (volatile)
// would keep now. Callers hold r.mu.
func (r *dstRun) views() (durable, volatile map[string]foundRec) {
	if g := r.mem.DurableGeneration(); !r.durValid || g != r.durGen {
		r.durView = scan(r.mem.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}))
		r.durGen, r.durValid = g, true
	}
	if g := r.mem.Generation(); !r.volValid || g != r.volGen {
		r.volView = scan(r.mem.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll}))
		r.volGen, r.volValid = g, true
	}
	return r.durView, r.volView
}

func (rec *dstRec) matches(f foundRec) bool {
	return bytes.Equal(f.payload, rec.payload) && f.dur == rec.dur && f.received == rec.received
}

// done is every request's Done.
func (r *dstRun) done(q *dstReq, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q.calls++
	if r.tracing {
		r.trace = append(r.trace, fmt.Sprintf("done %s %v", q.recs[0].key, err))
	}
	if q.calls > 1 {
		r.violate("done-called-once", "Done called %d times for the request holding %s", q.calls, q.recs[0].key)
		return
	}
	if err != nil {
		q.err = err
		return
	}
	dur, vol := r.views()
	for _, rec := range q.recs {
		if q.dur == Durable {
			if f, ok := dur[rec.key]; !ok || !rec.matches(f) {
				why := "its bytes are not synced"
				if v, ok := vol[rec.key]; ok && !r.mem.EntryDurable(v.path) {
					why = "the directory entry of " + v.path + " is not durable"
				} else if !ok {
					why = "it is not even written"
				}
				r.violate("ack-before-stable-storage", "Durable record %s acknowledged while %s", rec.key, why)
			}
		} else if f, ok := vol[rec.key]; !ok || !rec.matches(f) {
			r.violate("buffered-ack-before-write", "Buffered record %s acknowledged before it was written", rec.key)
		}
		rec.acked = true
		rec.ackedBefore = !r.crashed
	}
}

// checkTails reads every shard's readable tail as the drain does (with
// OpenTail, between two scheduling steps, the flushers parked) and checks
// the hand-off's promise: the tail is exactly its first Records records,
// ending at End, and each of them is where its tier promises — a Durable
// record on stable storage, a Buffered one written — so that a drain that
// delivers it never delivers what a crash may take back, beyond what the
// Buffered tier allows.
func (r *dstRun) checkTails() {
	if r.log == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	for sh := range r.log.shards {
		t, ok := r.log.Tail(sh)
		if !ok {
			continue
		}
		rd, err := OpenTail(r.mem, t)
		if err != nil {
			r.violate("tail-unreadable", "shard %d: tail %+v: %v", sh, t, err)
			continue
		}
		dur, vol := r.views()
		var n uint64
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.violate("tail-unreadable", "shard %d: tail %+v after %d records: %v", sh, t, n, err)
				break
			}
			n++
			key, _, _ := bytes.Cut(rec.Payload, []byte(":"))
			want := r.recs[string(key)]
			switch f, durOK := dur[string(key)]; {
			case want == nil:
				r.violate("tail-unknown-record", "shard %d: tail holds %q, never submitted", sh, key)
			case rec.Durability == Durable && (!durOK || !want.matches(f)):
				r.violate("tail-before-promise", "shard %d: Durable record %s readable in the tail before its bytes are synced", sh, key)
			case rec.Durability == Buffered:
				if f, ok := vol[string(key)]; !ok || !want.matches(f) {
					r.violate("tail-before-promise", "shard %d: Buffered record %s readable in the tail before it is written", sh, key)
				}
			}
		}
		if n != t.Records || rd.Offset() != t.End {
			r.violate("tail-mismatch", "shard %d: tail says %d records ending at %d, reads %d ending at %d", sh, t.Records, t.End, n, rd.Offset())
		}
		rd.Close()
		r.stats.TailReads += int(n)
	}
}

// hasWork reports whether a parked flusher has something to take.
func (r *dstRun) hasWork(shard int) bool {
	s := r.log.shards[shard]
	return len(s.queue) > 0 || s.holding()
}

func (r *dstRun) stepCrash() {
	r.checkTails()
	if r.spec.CrashOp == "step" {
		r.mu.Lock()
		if r.steps == r.spec.CrashN {
			r.snapshot()
		}
		r.steps++
		r.mu.Unlock()
	}
}

// submitOne builds and submits one request from producer p.
func (r *dstRun) submitOne(rng *rand.Rand, p int, shard int, seqs []int, received *int64, left int) (*dstReq, bool) {
	n := min(left, 1+rng.IntN(r.spec.MaxPerRequest))
	dur := Buffered
	if rng.IntN(100) < r.spec.DurablePct {
		dur = Durable
	}
	q := &dstReq{dur: dur}
	req := &Request{Durability: dur, Received: *received, Done: func(err error) { r.done(q, err) }}
	for range n {
		key := fmt.Sprintf("p%d-%d", p, seqs[p])
		size := rng.IntN(r.spec.MaxPayload + 1)
		payload := make([]byte, 0, len(key)+1+size)
		payload = append(payload, key...)
		payload = append(payload, ':')
		for range size {
			payload = append(payload, byte('a'+rng.IntN(26)))
		}
		rec := &dstRec{key: key, payload: payload, dur: dur, received: *received, shard: shard, producer: p, seq: seqs[p]}
		seqs[p]++
		q.recs = append(q.recs, rec)
		req.Payloads = append(req.Payloads, payload)
	}
	*received++
	submit := r.log.Submit
	if r.spec.InlinePct > 0 && r.inlineRng.IntN(100) < r.spec.InlinePct {
		submit = r.log.SubmitInline
	}
	if err := submit(context.Background(), shard, req, 0); err != nil {
		return q, false
	}
	if r.answered(q) {
		r.stats.Inline++ // answered before Submit returned: written inline
	}
	r.mu.Lock()
	for _, rec := range q.recs {
		r.recs[rec.key] = rec
		r.order = append(r.order, rec)
	}
	r.reqs = append(r.reqs, q)
	r.mu.Unlock()
	return q, true
}

func (r *dstRun) answered(q *dstReq) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return q.calls > 0
}

var errSimulatedKill = errors.New("simulated kill -9")

// runSpec runs one spec and returns the invariants it violated.
func runSpec(spec *dstSpec) []dstViolation {
	vs, _ := runSpecStats(spec)
	return vs
}

// runSpecStats is runSpec, also returning what the run exercised.
func runSpecStats(spec *dstSpec) ([]dstViolation, dstStats) {
	r := newRun(spec)
	return r.run(), r.stats
}

func newRun(spec *dstSpec) *dstRun {
	seed := spec.seed()
	return &dstRun{
		spec:       spec,
		mem:        memfs.New(),
		gate:       newGate(),
		crashRng:   rand.New(rand.NewPCG(seed, 0xc4a54)),
		inlineRng:  rand.New(rand.NewPCG(seed, 0x1471e)),
		recs:       map[string]*dstRec{},
		syncFailed: map[string]bool{},
	}
}

func (r *dstRun) run() []dstViolation {
	spec := r.spec
	seed := spec.seed()
	switch spec.Broken {
	case "":
	case "ack-before-sync":
		dstBrokenAckBeforeSync.Store(true)
		defer dstBrokenAckBeforeSync.Store(false)
	case "skip-dir-sync":
		dstBrokenSkipDirSync.Store(true)
		defer dstBrokenSkipDirSync.Store(false)
	case "tail-before-sync":
		dstBrokenTailBeforeSync.Store(true)
		defer dstBrokenTailBeforeSync.Store(false)
	default:
		panic("dst: unknown broken mode " + spec.Broken)
	}
	r.efs = errorfs.New(r.mem)
	var closeRules []errorfs.Rule
	for _, f := range spec.Faults {
		rules, err := errorfs.Parse(f.Rule)
		if err != nil {
			panic(fmt.Sprintf("dst: fault %q: %v", f.Rule, err))
		}
		if f.Close {
			closeRules = append(closeRules, rules...)
		} else {
			for _, rule := range rules {
				r.efs.Add(rule)
			}
		}
	}
	r.efs.SetHook(r.onEvent)
	// The readable tail is checked between steps and also inside one: after
	// a batch's write, before its fdatasync.
	watch := r.checkTails
	dstSyncWatch.Store(&watch)
	defer dstSyncWatch.Store(nil)
	// The flusher looks its Log's FS up: the *errorfs.FS itself.
	dstSteppers.Store(r.efs, r.gate)
	defer dstSteppers.Delete(r.efs)

	opts := Options{
		FS: r.efs, Dir: dstDir, Shards: spec.Shards, Logger: quiet,
		SegmentMaxBytes: spec.SegmentMaxBytes, PreallocateBytes: spec.PreallocateBytes,
		SegmentMaxAge: -1, BatchMaxRecords: spec.BatchMaxRecords,
	}
	l, err := Open(context.Background(), opts)
	if err != nil {
		// Only a fault can make the first Open fail; the images must
		// still recover.
		if r.efs.Injected() == 0 {
			r.violate("open-failed", "Open on an empty file system: %v", err)
		}
		return r.finish(nil)
	}
	r.log = l
	// Each flusher parks as it starts; then, in shard order, it prepares
	// its first segment and parks at the top of its loop.
	for i := range spec.Shards {
		r.gate.waitParked(i)
	}
	for i := range spec.Shards {
		r.gate.step(i)
	}

	rng := rand.New(rand.NewPCG(seed, 0x30b))
	seqs := make([]int, spec.Producers)
	received := int64(1_700_000_000_000_000_000)
	left := spec.Records
	if !spec.Interleave {
		for left > 0 {
			p := rng.IntN(spec.Producers)
			shard := rng.IntN(spec.Shards)
			r.stepCrash()
			q, ok := r.submitOne(rng, p, shard, seqs, &received, left)
			left -= len(q.recs)
			for ok && !r.answered(q) {
				if !r.hasWork(shard) {
					r.mu.Lock()
					r.violate("request-unanswered", "request holding %s left the queue without an answer", q.recs[0].key)
					r.mu.Unlock()
					break
				}
				r.stepCrash()
				r.gate.step(shard)
			}
		}
	} else {
		for {
			r.stepCrash()
			var busy []int
			for i := range spec.Shards {
				if r.hasWork(i) {
					busy = append(busy, i)
				}
			}
			if left == 0 && len(busy) == 0 {
				break
			}
			if left > 0 && (len(busy) == 0 || rng.IntN(100) < 55) {
				q, _ := r.submitOne(rng, rng.IntN(spec.Producers), rng.IntN(spec.Shards), seqs, &received, left)
				left -= len(q.recs)
				continue
			}
			r.gate.step(busy[rng.IntN(len(busy))])
		}
	}

	// End of the run: Close (with the shutdown faults armed) or kill.
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	if spec.Kill {
		for _, s := range l.shards {
			s.fail(errSimulatedKill)
		}
	} else {
		for _, rule := range closeRules {
			r.efs.Add(rule)
		}
	}
	// Close runs on its own goroutine while the flushers still take their
	// last steps (answering what is queued, sealing) one shard at a time,
	// in shard order, so that shutdown is as deterministic as the rest.
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		closed <- l.Close(ctx)
	}()
	for i := range spec.Shards {
		for !r.gate.step(i) {
		}
	}
	closeErr := <-closed
	r.gate.release()
	// Nothing is queued at Close, so every fault that fires now hits the
	// shutdown seal, and each of those fails the shard.
	r.mu.Lock()
	if errnos := r.closeErrnos; !spec.Kill && len(errnos) > 0 {
		if closeErr == nil {
			r.violate("seal-failure-unreported", "%d faults fired at the shutdown seal but Close returned nil", len(errnos))
		} else if !errors.Is(closeErr, ErrDiskFull) && !slices.ContainsFunc(errnos, func(e syscall.Errno) bool { return e != syscall.ENOSPC }) {
			r.violate("disk-full-misreported", "Close after ENOSPC at the shutdown seal: %v", closeErr)
		}
	}
	r.mu.Unlock()
	return r.finish(closeErr)
}

// finish checks the answers and every crash image.
func (r *dstRun) finish(closeErr error) []dstViolation {
	r.mu.Lock()
	r.stats.Runs = 1
	r.stats.FaultsFired = r.efs.Injected()
	if r.midImage != nil {
		r.stats.MidRunCrashes = 1
	}
	for _, q := range r.reqs {
		r.stats.Submitted += len(q.recs)
		switch {
		case q.calls > 0 && q.err != nil:
			r.stats.Failed += len(q.recs)
		case q.calls > 0 && q.dur == Durable:
			r.stats.AckedDurable += len(q.recs)
		case q.calls > 0:
			r.stats.AckedBuffered += len(q.recs)
		}
		if q.calls == 0 {
			r.violate("request-unanswered", "request holding %s never answered after Close", q.recs[0].key)
		}
	}
	r.mu.Unlock()

	type image struct {
		name string
		fs   *memfs.FS
		want func(*dstRec) bool
		inv  string
	}
	var images []image
	if r.midImage != nil {
		images = append(images, image{"power loss mid-run", r.midImage, func(x *dstRec) bool { return x.acked && x.ackedBefore && x.dur == Durable }, "durable-ack-lost"})
	}
	images = append(images,
		image{"power loss at the end", r.mem.CrashClone(r.crashOpts(r.spec.CrashMode)), func(x *dstRec) bool { return x.acked && x.dur == Durable }, "durable-ack-lost"},
		image{"process crash at the end", r.mem.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll}), func(x *dstRec) bool { return x.acked }, "ack-lost-on-process-crash"},
	)
	for _, img := range images {
		r.checkImage(img.name, img.fs, img.want, img.inv)
	}
	return r.violations
}

// recoverImage opens fsys with the real Open, closes it, and reads every
// sealed segment back with the real reader.
func (r *dstRun) recoverImage(name string, fsys *memfs.FS) ([]foundRec, []string, bool) {
	l, err := Open(context.Background(), Options{FS: fsys, Dir: dstDir, Shards: max(r.spec.Shards, 1), Logger: quiet, SegmentMaxAge: -1})
	if err != nil {
		r.violate("recovery-failed", "%s: Open: %v", name, err)
		return nil, nil, false
	}
	if err := l.Close(context.Background()); err != nil {
		r.violate("recovery-failed", "%s: Close after recovery: %v", name, err)
	}
	refs, err := ListSealed(fsys, dstDir)
	if err != nil {
		r.violate("recovery-failed", "%s: ListSealed: %v", name, err)
		return nil, nil, false
	}
	var recs []foundRec
	var keys []string
	for _, ref := range refs {
		rd, err := OpenSegment(fsys, ref.Path)
		if err != nil {
			r.violate("recovered-segment-unreadable", "%s: %v", name, err)
			continue
		}
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.violate("recovered-segment-unreadable", "%s: %v", name, err)
				break
			}
			key, _, _ := bytes.Cut(rec.Payload, []byte(":"))
			recs = append(recs, foundRec{payload: bytes.Clone(rec.Payload), dur: rec.Durability, received: rec.Received, path: ref.Path})
			keys = append(keys, string(key))
		}
		rd.Close()
	}
	return recs, keys, true
}

func (r *dstRun) checkImage(name string, fsys *memfs.FS, want func(*dstRec) bool, lostInv string) {
	recs, keys, ok := r.recoverImage(name, fsys)
	if !ok {
		return
	}
	r.stats.Images++
	r.stats.Recovered += len(recs)
	seen := map[string]bool{}
	last := map[[2]int]int{} // (producer, shard) -> last seq seen
	for i, f := range recs {
		key := keys[i]
		rec, known := r.recs[key]
		switch {
		case !known:
			r.violate("phantom-record", "%s: recovered record %q was never submitted", name, key)
			continue
		case !rec.matches(f):
			r.violate("phantom-record", "%s: recovered record %s differs from what was submitted", name, key)
		case seen[key]:
			r.violate("duplicate-record", "%s: record %s recovered twice", name, key)
		}
		seen[key] = true
		shard := shardOfPath(f.path)
		if shard != rec.shard {
			r.violate("phantom-record", "%s: record %s submitted to shard %d found in shard %d", name, key, rec.shard, shard)
		}
		ps := [2]int{rec.producer, rec.shard}
		if prev, ok := last[ps]; ok && prev >= rec.seq {
			r.violate("record-order", "%s: producer %d's record %d follows its record %d in shard %d", name, rec.producer, rec.seq, prev, rec.shard)
		}
		last[ps] = rec.seq
	}
	for _, rec := range r.order {
		if want(rec) && !seen[rec.key] {
			r.violate(lostInv, "%s: acknowledged %s record %s is missing after recovery", name, tierName(rec.dur), rec.key)
		}
	}
	// What recovery left must itself be durable: a second power loss right
	// after it changes nothing.
	_, keys2, ok := r.recoverImage(name+", then power loss after recovery", fsys.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}))
	if ok && !slices.Equal(keys, keys2) {
		r.violate("recovery-not-durable", "%s: %d records after recovery, %d after a further power loss", name, len(keys), len(keys2))
	}
}

func shardOfPath(p string) int {
	id, _ := parseShardDir(filepath.Base(filepath.Dir(p)))
	return id
}

func tierName(d Durability) string {
	if d == Durable {
		return "Durable"
	}
	return "Buffered"
}

// ---- reporting ----

// reproducer is the one-line command that replays spec.
func reproducer(spec *dstSpec) string {
	if spec.Broken == "" && slices.Contains(dstScenarios, spec.Scenario) && genSpec(spec.Scenario, spec.seed()).json() == spec.json() {
		return fmt.Sprintf("WEIR_DST_SEED=%s go test -tags dst -run '^TestDST$/^%s$' ./wab", spec.Seed, spec.Scenario)
	}
	return fmt.Sprintf("WEIR_DST_SPEC='%s' go test -tags dst -run '^TestDST$/^spec$' ./wab", spec.json())
}

// report formats violations, and pins the spec when WEIR_DST_PIN is set.
func report(spec *dstSpec, vs []dstViolation) string {
	var b strings.Builder
	// The first violation, then the first of each other invariant, with
	// how often each was violated.
	count := map[string]int{}
	var first []dstViolation
	for _, v := range vs {
		if count[v.Invariant] == 0 {
			first = append(first, v)
		}
		count[v.Invariant]++
	}
	for i, v := range first {
		if i == 0 {
			fmt.Fprintf(&b, "invariant %q violated: %s", v.Invariant, v.Detail)
		} else {
			fmt.Fprintf(&b, "\n  also %q: %s", v.Invariant, v.Detail)
		}
		if n := count[v.Invariant]; n > 1 {
			fmt.Fprintf(&b, " (and %d more like it)", n-1)
		}
	}
	fmt.Fprintf(&b, "\nreproduce: %s", reproducer(spec))
	if os.Getenv("WEIR_DST_PIN") != "" {
		pinned := *spec
		pinned.Note = fmt.Sprintf("found violating %s", vs[0].Invariant)
		path := filepath.Join("testdata", "dst", fmt.Sprintf("%s-%s.json", spec.Scenario, strings.TrimPrefix(spec.Seed, "0x")))
		if err := writePinned(path, &pinned); err != nil {
			fmt.Fprintf(&b, "\npin failed: %v", err)
		} else {
			fmt.Fprintf(&b, "\npinned as wab/%s", path)
		}
	} else {
		b.WriteString("\npin it: rerun with WEIR_DST_PIN=1 to write it under wab/testdata/dst/")
	}
	return b.String()
}

func writePinned(path string, spec *dstSpec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func checkSpec(t testing.TB, spec *dstSpec) {
	t.Helper()
	if vs := runSpec(spec); len(vs) > 0 {
		t.Fatal(report(spec, vs))
	}
}

// ---- tests ----

func envSeed(t *testing.T, name string) (uint64, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a hex seed", name, v)
	}
	return n, true
}

// TestDST runs every scenario for a few fixed seeds, or for WEIR_DST_SEED
// only, or the spec in WEIR_DST_SPEC (subtest "spec").
func TestDST(t *testing.T) {
	if js := os.Getenv("WEIR_DST_SPEC"); js != "" {
		t.Run("spec", func(t *testing.T) {
			var spec dstSpec
			if err := json.Unmarshal([]byte(js), &spec); err != nil {
				t.Fatalf("WEIR_DST_SPEC: %v", err)
			}
			checkSpec(t, &spec)
		})
		return
	}
	seeds := []uint64{1, 2, 3, 0xdeadbeef}
	if s, ok := envSeed(t, "WEIR_DST_SEED"); ok {
		seeds = []uint64{s}
	}
	for _, sc := range dstScenarios {
		t.Run(sc, func(t *testing.T) {
			for _, seed := range seeds {
				checkSpec(t, genSpec(sc, seed))
			}
		})
	}
}

// TestDSTSweep runs WEIR_DST_SWEEP seeds (16 by default) of every scenario,
// derived from WEIR_DST_BASE (random when unset; printed).
func TestDSTSweep(t *testing.T) {
	n := 16
	if v := os.Getenv("WEIR_DST_SWEEP"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			t.Fatalf("WEIR_DST_SWEEP=%q: want a count", v)
		}
	}
	base, ok := envSeed(t, "WEIR_DST_BASE")
	if !ok {
		base = rand.Uint64()
	}
	t.Logf("dst sweep: base seed %s (WEIR_DST_BASE), %d seeds x %d scenarios", hexSeed(base), n, len(dstScenarios))
	start := time.Now()
	var total dstStats
	for _, sc := range dstScenarios {
		t.Run(sc, func(t *testing.T) {
			failures := 0
			var st dstStats
			defer func() { t.Logf("%s: %v", sc, st); total.add(st) }()
			for i := range n {
				spec := genSpec(sc, splitmix64(base+uint64(i)))
				vs, s := runSpecStats(spec)
				st.add(s)
				if len(vs) > 0 {
					t.Errorf("sweep base %s, seed #%d: %s", hexSeed(base), i, report(spec, vs))
					if failures++; failures == 3 {
						t.Fatal("stopping this scenario after 3 failing seeds")
					}
				}
			}
		})
	}
	t.Logf("dst sweep: %v; in %v", total, time.Since(start).Round(time.Millisecond))
}

// TestDSTPinned replays every spec pinned under testdata/dst.
func TestDSTPinned(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "dst", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no pinned specs under testdata/dst")
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var spec dstSpec
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&spec); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			vs := runSpec(&spec)
			if spec.Expect == "" {
				if len(vs) > 0 {
					t.Fatal(report(&spec, vs))
				}
				return
			}
			if !hasViolation(vs, spec.Expect) {
				t.Fatalf("with the flusher broken (%s) the run should violate %q; got %v", spec.Broken, spec.Expect, vs)
			}
		})
	}
}

// TestDSTDeterministic runs seeds of every scenario twice and compares
// the traces: the same FS calls with the same results, and the same
// answers, in the same order.
func TestDSTDeterministic(t *testing.T) {
	events := 0
	for _, sc := range dstScenarios {
		for seed := range uint64(4) {
			var traces [2][]string
			var stats [2]dstStats
			for i := range traces {
				r := newRun(genSpec(sc, seed+1000))
				r.tracing = true
				if vs := r.run(); len(vs) > 0 {
					t.Fatal(report(r.spec, vs))
				}
				traces[i], stats[i] = r.trace, r.stats
			}
			if !slices.Equal(traces[0], traces[1]) || stats[0] != stats[1] {
				i := 0
				for i < min(len(traces[0]), len(traces[1])) && traces[0][i] == traces[1][i] {
					i++
				}
				t.Fatalf("%s seed %d: runs differ at event %d of %d/%d:\n%v\n%v", sc, seed+1000, i, len(traces[0]), len(traces[1]), traces[0][max(0, i-3):min(len(traces[0]), i+5)], traces[1][max(0, i-3):min(len(traces[1]), i+5)])
			}
			events += len(traces[0])
		}
	}
	if events < 1000 {
		t.Fatalf("only %d events traced in 20 runs", events)
	}
	t.Logf("%d events, identical in both runs of each of 20 specs", events)
}

func hasViolation(vs []dstViolation, inv string) bool {
	return slices.ContainsFunc(vs, func(v dstViolation) bool { return v.Invariant == inv })
}

// catchTest runs seeds of every scenario with a broken flusher and expects
// the harness to report inv, at ack time and after recovery.
func catchTest(t *testing.T, broken, detail string) { catchTestInline(t, broken, detail, -1) }

// catchTestInline is catchTest with every spec's InlinePct set to inline
// (-1: as generated); with inline > 0 some requests must have been written
// inline.
func catchTestInline(t *testing.T, broken, detail string, inline int) {
	caught, lost, runs, inlined := 0, 0, 0, 0
	for _, sc := range dstScenarios {
		for seed := range uint64(6) {
			spec := genSpec(sc, seed+100)
			spec.Broken = broken
			if inline >= 0 {
				spec.InlinePct = inline
			}
			vs, st := runSpecStats(spec)
			inlined += st.Inline
			runs++
			if hasViolation(vs, "ack-before-stable-storage") {
				caught++
				if !slices.ContainsFunc(vs, func(v dstViolation) bool { return strings.Contains(v.Detail, detail) }) {
					t.Errorf("%s: violation does not say %q: %v", sc, detail, vs)
				}
			}
			if hasViolation(vs, "durable-ack-lost") {
				lost++
			}
		}
	}
	t.Logf("broken flusher (%s): %d of %d runs caught at ack time, %d also lost a Durable record to a power loss; %d requests written inline", broken, caught, runs, lost, inlined)
	if inline > 0 && inlined == 0 {
		t.Fatalf("no request was written inline with InlinePct %d", inline)
	}
	if caught < runs/2 || lost == 0 {
		t.Fatalf("the harness caught too little of a broken flusher (%s): %d/%d at ack, %d lost", broken, caught, runs, lost)
	}
}

func TestDSTCatchesAckBeforeSync(t *testing.T) {
	catchTest(t, "ack-before-sync", "bytes are not synced")
	if dstBrokenAckBeforeSync.Load() {
		t.Fatal("switch left on")
	}
}

// TestDSTCatchesAckBeforeSyncInline: the same broken flusher code, run by
// inline writes (every request submitted with SubmitInline), is caught.
func TestDSTCatchesAckBeforeSyncInline(t *testing.T) {
	catchTestInline(t, "ack-before-sync", "bytes are not synced", 100)
	if dstBrokenAckBeforeSync.Load() {
		t.Fatal("switch left on")
	}
}

// TestDSTCatchesTailBeforeSync: a flusher that lets the drain read a
// Durable record once written, before its fdatasync, is caught.
func TestDSTCatchesTailBeforeSync(t *testing.T) {
	caught, runs := 0, 0
	for _, sc := range dstScenarios {
		for seed := range uint64(6) {
			spec := genSpec(sc, seed+100)
			spec.Broken = "tail-before-sync"
			runs++
			if hasViolation(runSpec(spec), "tail-before-promise") {
				caught++
			}
		}
	}
	t.Logf("broken tail (Durable records readable before fdatasync): %d of %d runs caught", caught, runs)
	if dstBrokenTailBeforeSync.Load() {
		t.Fatal("switch left on")
	}
	if caught < runs/2 {
		t.Fatalf("the harness caught too little of a broken tail: %d/%d", caught, runs)
	}
}

func TestDSTCatchesMissingDirSync(t *testing.T) {
	catchTest(t, "skip-dir-sync", "directory entry")
	if dstBrokenSkipDirSync.Load() {
		t.Fatal("switch left on")
	}
}
