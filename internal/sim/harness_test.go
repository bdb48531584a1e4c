//go:build dst

package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
)

// crash is one crash of the node: before the step Step, as Mode leaves
// the disk (keepall: the process died; drop, prefix, torn: the power
// failed).
type crash struct {
	Step int    `json:"step"`
	Mode string `json:"mode"`
	Junk bool   `json:"junk,omitempty"`
}

// fault is an errorfs rule armed in incarnation Inc (its spec grammar).
type fault struct {
	Inc  int    `json:"inc"`
	Rule string `json:"rule"`
}

// span is a range of steps [From, To).
type span struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// spec fixes a run; everything else comes from its seed.
type spec struct {
	Scenario   string `json:"scenario"`
	Seed       string `json:"seed"`
	Records    int    `json:"records"`
	Partitions int    `json:"partitions"`
	// ProducerPct > 0 adds a producer sending one frame a request, like
	// the socket's (an extra partition of the broker): that share of its
	// frames go through SubmitInline, the rest through Submit.
	ProducerPct  int          `json:"producer_pct,omitempty"`
	MaxPayload   int          `json:"max_payload"`
	PoisonPct    int          `json:"poison_pct,omitempty"`
	SegmentBytes int64        `json:"segment_bytes"`
	Budget       int64        `json:"budget"`
	LingerMs     int          `json:"linger_ms"`
	QueueBatches int          `json:"queue_batches"`
	MaxAttempts  int          `json:"max_attempts,omitempty"`
	Sinks        []sinkFaults `json:"sinks"`
	StallLane    bool         `json:"stall_lane,omitempty"`
	Claims       bool         `json:"claims,omitempty"`
	Steals       []int        `json:"steals,omitempty"`
	ClaimsDown   []span       `json:"claims_down,omitempty"`
	Crashes      []crash      `json:"crashes,omitempty"`
	Faults       []fault      `json:"faults,omitempty"`
	// TimePct: the chance that a step advances simulated time instead of
	// releasing a parked call; ProducePct that it first produces 1 to 8
	// records at the broker.
	TimePct    int `json:"time_pct"`
	ProducePct int `json:"produce_pct"`
	MaxSteps   int `json:"max_steps"`
	// Broken runs a deliberately broken build ("cursor-early": the source
	// commits its position before the gate's Write; "cover-early": a
	// secondary covers a chunk before its commit) and Expect names the
	// invariant it must break. Catch tests only.
	Broken string `json:"broken,omitempty"`
	Expect string `json:"expect,omitempty"`
	Note   string `json:"note,omitempty"`
}

func (s *spec) seed() uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s.Seed, "0x"), 16, 64)
	if err != nil {
		panic(fmt.Sprintf("sim: bad seed %q", s.Seed))
	}
	return v
}

func (s *spec) json() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// scenarios are what a sweep runs, each seed in each.
var scenarios = []string{"crash", "power", "sink-faults", "quarantine-stall", "claims", "disk-faults"}

// makeSpec draws a spec of the scenario from seed.
func makeSpec(scenario string, seed uint64) spec {
	r := rand.New(rand.NewPCG(seed, 0xc0ffee))
	sp := spec{Scenario: scenario, Seed: fmt.Sprintf("0x%016x", seed), Records: 120 + r.IntN(200), Partitions: 1 + r.IntN(3),
		MaxPayload: 40 + r.IntN(300), SegmentBytes: int64(4<<10 + r.IntN(12<<10)), Budget: int64(64<<10 + r.IntN(192<<10)),
		LingerMs: r.IntN(6), QueueBatches: 1 + r.IntN(4), TimePct: 5 + r.IntN(20), ProducePct: 5 + r.IntN(20), MaxSteps: 6000,
		Sinks: []sinkFaults{{Applied: r.IntN(101)}, {Poison: true, Applied: r.IntN(101)}}}
	// The steps while records are produced, about.
	active := sp.Records * 100 / 4 / sp.ProducePct
	crashes := func(n int, modes ...string) {
		for range n {
			sp.Crashes = append(sp.Crashes, crash{Step: 20 + r.IntN(active), Mode: modes[r.IntN(len(modes))], Junk: r.IntN(2) == 0})
		}
	}
	switch scenario {
	case "crash":
		crashes(1+r.IntN(3), "keepall")
		sp.Sinks[0].Transient, sp.Sinks[1].Transient = r.IntN(10), r.IntN(10)
	case "power":
		crashes(1+r.IntN(2), "drop", "prefix", "torn")
		sp.Sinks[0].Slow, sp.Sinks[1].Slow = r.IntN(20), r.IntN(20)
	case "sink-faults":
		sp.PoisonPct = 5 + r.IntN(10)
		for i := range sp.Sinks {
			sp.Sinks[i].Transient, sp.Sinks[i].Slow, sp.Sinks[i].Hang = 5+r.IntN(20), r.IntN(15), r.IntN(4)
		}
		if r.IntN(2) == 0 {
			sp.MaxAttempts = 2 + r.IntN(3)
		}
		crashes(r.IntN(2), "keepall", "drop")
	case "quarantine-stall":
		sp.PoisonPct, sp.StallLane = 10+r.IntN(20), true
		crashes(r.IntN(2), "keepall", "torn")
	case "claims":
		sp.Claims, sp.QueueBatches = true, 1
		sp.Sinks[0].Transient, sp.Sinks[1].Slow = r.IntN(15), r.IntN(20)
		for range 1 + r.IntN(6) {
			sp.Steals = append(sp.Steals, 20+r.IntN(active))
		}
		for range r.IntN(3) {
			from := 20 + r.IntN(active)
			sp.ClaimsDown = append(sp.ClaimsDown, span{From: from, To: from + 20 + r.IntN(300)})
		}
		crashes(r.IntN(2), "keepall", "prefix")
	case "disk-faults":
		files := []string{wabDir + "/*", rawDir + "/*"}
		ops := []string{"sync", "write", "syncdir", "rename"}
		errs := []string{"EIO", "ENOSPC"}
		for range 1 + r.IntN(2) {
			sp.Faults = append(sp.Faults, fault{Inc: 0, Rule: fmt.Sprintf("%s:%s:after=%d:once:%s",
				ops[r.IntN(len(ops))], files[r.IntN(len(files))], r.IntN(60), errs[r.IntN(len(errs))])})
		}
		crashes(r.IntN(2), "keepall", "drop")
	default:
		panic("sim: unknown scenario " + scenario)
	}
	if sp.PoisonPct == 0 {
		sp.PoisonPct = r.IntN(4)
	}
	if r.IntN(2) == 0 {
		sp.ProducerPct = 1 + r.IntN(100)
	}
	return sp
}

// harness runs one spec.
type harness struct {
	spec   spec
	seed   uint64
	rng    *rand.Rand // the harness's own choices
	s      *sched
	broker *broker
	sinks  []*simSink
	lanes  []*simLane
	claims *simClaims
	node   *node
	inc    int
	steps  int
	// lanesOpen: the quarantine lanes no longer stall (settling, once
	// every clean record arrived without them).
	lanesOpen bool
	inlined   atomic.Int64 // frames the producer's SubmitInline wrote inline
}

// violation is a broken invariant: its name and what was seen.
type violation struct {
	Invariant string
	Detail    string
}

func (v *violation) Error() string { return v.Invariant + ": " + v.Detail }

// result is a run's outcome.
type result struct {
	Trace    uint64
	Steps    int
	Crashes  int
	Records  int
	Settled  bool
	Violated *violation
	Tail     string   // the last steps, when violated
	Summary  string   // what the world holds at the end
	Inlined  int      // frames written inline
	All      []string // every step (keepTrace)
}

// keepTrace makes runs keep every step of their trace (debugging replays).
var keepTrace = false

// runSpec runs sp in a synctest bubble of its own.
func runSpec(t *testing.T, sp spec) (res result) {
	synctest.Test(t, func(*testing.T) { res = run(sp) })
	return res
}

func run(sp spec) (res result) {
	h := &harness{spec: sp, seed: sp.seed(), s: newSched()}
	h.s.keep = keepTrace
	h.rng = rand.New(rand.NewPCG(h.seed, 0x4a11))
	parts := sp.Partitions
	if sp.ProducerPct > 0 {
		parts++ // the producer's
	}
	h.broker = newBroker(rand.New(rand.NewPCG(h.seed, 0xb0b)), parts, sp.Records, sp.PoisonPct, sp.MaxPayload)
	for i, f := range sp.Sinks {
		name := string(rune('a' + i))
		h.sinks = append(h.sinks, newSimSink(name, h.s, h.seed+uint64(i), f))
		h.lanes = append(h.lanes, newSimLane(name, h.s, sp.StallLane && f.Poison))
	}
	h.claims = newSimClaims(h.s)
	engine.DSTBreakCoverEarly.Store(sp.Broken == "cover-early")
	defer engine.DSTBreakCoverEarly.Store(false)

	defer func() {
		res.Trace, res.Steps, res.Records, res.All, res.Inlined = h.s.sum(), h.steps, sp.Records, h.s.all, int(h.inlined.Load())
		if res.Violated != nil {
			res.Tail = h.s.tail()
		}
	}()
	fail := func(v *violation) result {
		if h.node != nil {
			h.s.kill(h.node.inc)
			h.node.stop()
		}
		return result{Violated: v, Crashes: res.Crashes}
	}
	mem := memfs.New()
	var err error
	if h.node, err = h.boot(mem); err != nil {
		return fail(&violation{"boot", err.Error()})
	}
	crashes := map[int]crash{}
	for _, c := range sp.Crashes {
		crashes[c.Step] = c
	}
	steals := map[int]bool{}
	for _, s := range sp.Steals {
		steals[s] = true
	}
	faultSeen, restartAt := 0, -1
	producing, settleFrom := true, 0
	settling := false
	for h.steps = 0; ; h.steps++ {
		synctest.Wait()
		if v := h.checkBudget(); v != nil {
			return fail(v)
		}
		if !settling && (h.steps >= sp.MaxSteps || h.broker.done() && h.steps > sp.lastEvent()) {
			settling, settleFrom = true, h.steps
			h.calm()
			h.s.note("settle")
		}
		if settling {
			if h.steps%20 == 0 && h.settled() {
				if !h.lanesOpen {
					// The clean records all arrived while the lanes
					// stalled; now let the lanes take their rejects.
					h.openLanes()
					continue
				}
				if h.lanesSettled() {
					break
				}
			}
			if h.steps >= settleFrom+settleSteps {
				if v := h.ackedInRaw(h.node.mem); v != nil {
					return fail(v)
				}
				what := "liveness"
				if !h.lanesOpen && sp.StallLane {
					what = "clean-blocked-by-quarantine"
				}
				return fail(&violation{what, fmt.Sprintf("did not settle in %d steps: %s", h.steps, h.progress())})
			}
		}
		// A fault the disk injected breaks the incarnation's buffer or
		// raw for good; a supervisor restarts it a while later.
		if n := h.node.fs.Injected(); n > faultSeen {
			faultSeen = n
			restartAt = h.steps + 10 + h.rng.IntN(100)
		}
		c, crashNow := crashes[h.steps]
		if !settling && crashNow || h.steps == restartAt {
			if !crashNow {
				c = crash{Mode: "drop"}
			}
			res.Crashes++
			if v := h.crash(c); v != nil {
				return fail(v)
			}
			faultSeen, restartAt = 0, -1
			continue
		}
		if !settling && steals[h.steps] {
			h.steal()
			continue
		}
		h.claims.partition(!settling && sp.claimsDown(h.steps))
		if producing && h.rng.IntN(100) < sp.ProducePct {
			p, n := h.rng.IntN(len(h.broker.parts)), 1+h.rng.IntN(8)
			producing = h.broker.produce(p, n)
			h.s.note("%d produce %d %d", h.steps, p, n)
		}
		ops := h.s.pending()
		if len(ops) == 0 || h.rng.IntN(100) < sp.TimePct {
			h.s.note("%d time", h.steps)
			time.Sleep(time.Millisecond)
			continue
		}
		p := ops[h.rng.IntN(len(ops))]
		h.s.note("%d %s", h.steps, p.label)
		h.s.release(p)
	}
	h.s.note("stop")
	summary := h.summary()
	h.stopGracefully()
	if v := h.checkEnd(); v != nil {
		return result{Violated: v, Crashes: res.Crashes}
	}
	return result{Settled: true, Crashes: res.Crashes, Summary: summary}
}

func (h *harness) summary() string {
	var b strings.Builder
	st := h.node.fan.Stats()
	fmt.Fprintf(&b, "raw end %d", st.RawEnd)
	for i, k := range h.sinks {
		k.mu.Lock()
		fmt.Fprintf(&b, "; %s holds %d in %d commits, refused %d", k.name, len(k.held), k.commits, len(k.refused[h.node.inc]))
		k.mu.Unlock()
		s := st.Sinks[i]
		fmt.Fprintf(&b, " (live %d, recovered %d, dropped %d, quarantined %d, shed %d, failures %d)", s.LiveDelivered, s.Recovered, s.LiveDropped, s.Quarantined, s.QuarantineShed, s.CommitFailures)
	}
	return b.String()
}

func (sp *spec) lastEvent() int {
	last := 0
	for _, c := range sp.Crashes {
		last = max(last, c.Step)
	}
	for _, s := range sp.Steals {
		last = max(last, s)
	}
	for _, d := range sp.ClaimsDown {
		last = max(last, d.To)
	}
	return last
}

func (sp *spec) claimsDown(step int) bool {
	for _, d := range sp.ClaimsDown {
		if step >= d.From && step < d.To {
			return true
		}
	}
	return false
}

// calm ends the faults: the sinks answer, the disk is sound.
func (h *harness) calm() {
	for _, k := range h.sinks {
		k.calm()
	}
	h.node.fs.Clear()
}

// crash takes the disk as c leaves it, kills the incarnation, checks the
// image and boots the next incarnation on it.
func (h *harness) crash(c crash) *violation {
	mode, err := memfs.ParseCrashMode(c.Mode)
	if err != nil {
		return &violation{"spec", err.Error()}
	}
	h.s.note("%d crash %s", h.steps, c.Mode)
	img := h.node.mem.CrashClone(memfs.CrashOptions{Mode: mode, Rand: rand.NewPCG(h.seed, uint64(h.steps)), PageSize: 512, SectorSize: 64, Junk: c.Junk})
	h.s.kill(h.node.inc)
	if h.spec.Claims {
		h.claims.expireAll() // the leases die with the process
	}
	h.node.stop()
	if v := h.checkImage(img, "crash image"); v != nil {
		return v
	}
	h.inc++
	if h.node, err = h.boot(img); err != nil {
		return &violation{"restart", fmt.Sprintf("incarnation %d did not start on the %s image: %v", h.inc, c.Mode, err)}
	}
	return nil
}

// steal takes a held recovery window from the node as an expired lease
// would, and enters the thief's higher token in the offset store.
func (h *harness) steal() {
	f, ok := h.claims.steal(h.rng.IntN(1 << 16))
	if !ok {
		return
	}
	h.s.note("%d steal %s", h.steps, f.Window)
	if err := h.node.store.Enter(context.Background(), f); err != nil {
		h.s.note("%d steal refused: %v", h.steps, err)
	}
}

// stopGracefully stops the last incarnation as SIGTERM would, releasing
// its parked calls meanwhile.
func (h *harness) stopGracefully() {
	done := make(chan struct{})
	go func() {
		h.node.stop()
		close(done)
	}()
	for {
		synctest.Wait()
		select {
		case <-done:
			return
		default:
		}
		if ops := h.s.pending(); len(ops) > 0 {
			h.s.release(ops[0])
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// settled: every record committed at the broker, every clean one held by
// every secondary, and no secondary lagging raw.
func (h *harness) settled() bool {
	if !h.broker.done() {
		return false
	}
	for _, r := range h.broker.acked() {
		for i, k := range h.sinks {
			if h.spec.Sinks[i].Poison && poison(r.Payload) {
				continue
			}
			if !k.tookOrGaveUp(r.ID, h.spec.MaxAttempts > 0) {
				return false
			}
		}
	}
	for _, st := range h.node.fan.Stats().Sinks {
		if st.Lag > 0 {
			return false
		}
	}
	return true
}

// openLanes ends the lanes' stall.
func (h *harness) openLanes() {
	h.lanesOpen = true
	for _, l := range h.lanes {
		l.mu.Lock()
		l.stalled = false
		l.mu.Unlock()
	}
	h.s.note("%d lanes open", h.steps)
}

// lanesSettled: every record a secondary refused in this incarnation is
// in its lane or counted as shed.
func (h *harness) lanesSettled() bool {
	_, v := h.rejectsAccounted()
	return v == nil
}

// rejectsAccounted checks that every record a secondary refused in the
// last incarnation is in its quarantine lane or counted as shed.
func (h *harness) rejectsAccounted() (int, *violation) {
	last, total := h.node.inc, 0
	for i, k := range h.sinks {
		if !h.spec.Sinks[i].Poison {
			continue
		}
		k.mu.Lock()
		refused := len(k.refused[last])
		var missing int
		for id := range k.refused[last] {
			if !h.lanes[i].has(id) {
				missing++
			}
		}
		k.mu.Unlock()
		total += refused
		if shed := h.node.obs.shedOf(k.name); missing > shed {
			return total, &violation{"reject-lost", fmt.Sprintf("%s refused %d records in the last incarnation; %d are neither in its quarantine nor among the %d shed",
				k.name, refused, missing, shed)}
		}
	}
	return total, nil
}

func (h *harness) progress() string {
	var b strings.Builder
	for p := range h.broker.parts {
		fmt.Fprintf(&b, "partition %d at %d/%d; ", p, h.broker.position(p), len(h.broker.parts[p]))
	}
	st := h.node.fan.Stats()
	fmt.Fprintf(&b, "raw end %d", st.RawEnd)
	for _, s := range st.Sinks {
		fmt.Fprintf(&b, "; %s lag %d queued %d", s.Name, s.Lag, s.Queued)
	}
	return b.String()
}

func (h *harness) checkBudget() *violation {
	st := h.node.budget.Stats()
	if st.InUse > st.Limit {
		return &violation{"budget", fmt.Sprintf("%d bytes in use over the limit of %d", st.InUse, st.Limit)}
	}
	return nil
}

// rawRecords reads every record raw holds on fsys.
func rawRecords(fsys vfs.FS) ([]sink.Positioned, error) {
	r, err := filesink.OpenRawReader(fsys, rawDir)
	if err != nil {
		return nil, err
	}
	var out []sink.Positioned
	for from := uint64(0); ; {
		got, err := r.ReadFrom(context.Background(), from, 1024, 1<<30)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return out, nil
		}
		out = append(out, got...)
		from = got[len(got)-1].Pos + 1
	}
}

// checkImage checks a disk the node left (a crash image, or the last
// incarnation's disk after its stop): no coverage over-claims, and no
// secondary holds a record raw lacks.
func (h *harness) checkImage(fsys *memfs.FS, what string) *violation {
	recs, err := rawRecords(fsys)
	if err != nil {
		return &violation{"raw-unreadable", fmt.Sprintf("%s: %v", what, err)}
	}
	inRaw := make(map[sink.RecordID]bool, len(recs))
	for _, r := range recs {
		inRaw[r.Record.ID] = true
	}
	for _, k := range h.sinks {
		k.mu.Lock()
		for id := range k.held {
			if !inRaw[id] {
				k.mu.Unlock()
				return &violation{"secondary-ahead-of-raw", fmt.Sprintf("%s: sink %s holds %s, which raw does not", what, k.name, id)}
			}
		}
		k.mu.Unlock()
	}
	// Open a copy: opening the store may tidy the directory.
	store, err := engine.OpenOffsetStore(context.Background(), fsys.CrashClone(memfs.CrashOptions{Mode: memfs.CrashKeepAll}), rawDir)
	if err != nil {
		return &violation{"offsets-unreadable", fmt.Sprintf("%s: %v", what, err)}
	}
	for _, k := range h.sinks {
		cov := store.Coverage(k.name)
		for _, r := range recs {
			// A record given up on after its attempts is covered and
			// quarantined as retry-exhausted.
			if !cov.Contains(r.Pos) || k.tookOrGaveUp(r.Record.ID, h.spec.MaxAttempts > 0) || k.refusedEver(r.Record.ID) {
				continue
			}
			return &violation{"coverage-overclaims", fmt.Sprintf("%s: %s's coverage holds raw position %d (%s), which the sink never took",
				what, k.name, r.Pos, r.Record.ID)}
		}
	}
	return nil
}

// settleSteps is how long a run may take to settle once its faults end.
const settleSteps = 4000

// ackedInRaw: every record committed at the broker is in raw on fsys.
func (h *harness) ackedInRaw(fsys vfs.FS) *violation {
	recs, err := rawRecords(fsys)
	if err != nil {
		return &violation{"raw-unreadable", err.Error()}
	}
	inRaw := make(map[sink.RecordID]bool, len(recs))
	for _, r := range recs {
		inRaw[r.Record.ID] = true
	}
	for _, r := range h.broker.acked() {
		if !inRaw[r.ID] {
			return &violation{"acked-missing", fmt.Sprintf("%s (%s) was committed at the broker and is not in raw", r.OriginPos, r.ID)}
		}
	}
	return nil
}

// checkEnd checks the settled world.
func (h *harness) checkEnd() *violation {
	if v := h.checkImage(h.node.mem, "settled disk"); v != nil {
		return v
	}
	if v := h.ackedInRaw(h.node.mem); v != nil {
		return v
	}
	if _, v := h.rejectsAccounted(); v != nil {
		return v
	}
	return nil
}

func (k *simSink) refusedEver(id sink.RecordID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range k.refused {
		if m[id] {
			return true
		}
	}
	return false
}
