package systest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

// System tests of flow control (docs/flow_control.md, issue 11). Each is
// bounded; the environment variables named in docs/testing.md lengthen
// them into soaks.

// overloadRun is one overload scenario's outcome.
type overloadRun struct {
	budget   int64 // memory_budget
	idle     int64 // VmHWM of the same daemon idle: the fixed overhead
	peak     int64 // VmHWM under the overload
	samples  []memSample
	answers  map[string]int // by outcome: ok, a Nack code's name, other
	acked    map[string]bool
	maxWait  time.Duration // longest push → answer
	pushed   int64
	duration time.Duration
	drained  time.Duration // from the sink's return to every acked record in it
	// transitions are the backpressure state changes, "from>to" → count.
	transitions map[string]float64
}

// stateTransitions reads weir_flow_transitions_total by "from>to".
func stateTransitions(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "weir_flow_transitions_total{") || v == 0 {
			continue
		}
		from, to := labelValue(k, "from"), labelValue(k, "to")
		out[from+">"+to] = v
	}
	return out
}

// labelValue is the value of label name in a sample's name{labels}.
func labelValue(sample, name string) string {
	_, rest, ok := strings.Cut(sample, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// overloadRecordBytes is the payload size of the overload scenario.
const overloadRecordBytes = 64 << 10

// overloadHeader is the fixed-width id at the start of each payload
// ("ovl" producer "-" sequence "|"), which the table check reads back.
func overloadHeader(p, i int) string { return fmt.Sprintf("ovl%02d-%07d|", p, i) }

const overloadHeaderLen = len("ovl00-0000000|")

// overloadProducers pushes 64 KiB Durable records, one per frame, from n
// producers with the given window until ctx ends; every answer is timed.
type overloadProducers struct {
	mu      sync.Mutex
	answers map[string]int
	acked   map[string]bool
	maxWait time.Duration
	pushed  atomic.Int64
}

func runOverloadProducers(ctx context.Context, t testing.TB, socket string, n, window int) *overloadProducers {
	op := &overloadProducers{answers: map[string]int{}, acked: map[string]bool{}}
	var wg sync.WaitGroup
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// No retries by the client: each Overloaded refusal reaches
			// the callback, to be counted.
			c, err := client.Dial(ctx, socket, client.WithWindow(window), client.WithOverloadRetries(0))
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("producer %d: dial: %v", p, err)
				}
				return
			}
			fill := make([]byte, overloadRecordBytes)
			for i := range fill {
				fill[i] = 'a' + byte(i%26)
			}
			for i := 0; ctx.Err() == nil; i++ {
				h := overloadHeader(p, i)
				rec := slices.Clone(fill)
				copy(rec, h)
				t0 := time.Now()
				err := c.PushAsync(ctx, [][]byte{rec}, client.Durable, func(err error) { op.answer(h, time.Since(t0), err) })
				if err != nil {
					break
				}
				op.pushed.Add(1)
			}
			// Whatever is unanswered after a minute is counted under
			// its error (ErrClosed), never as acked.
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			c.Close(cctx)
			cancel()
		}()
	}
	go func() { wg.Wait(); op.mu.Lock(); op.answers["_done"] = 1; op.mu.Unlock() }()
	return op
}

func (op *overloadProducers) answer(h string, wait time.Duration, err error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.maxWait = max(op.maxWait, wait)
	var ne *client.NackError
	switch {
	case err == nil:
		op.answers["ok"]++
		op.acked[h] = true
	case errors.As(err, &ne):
		op.answers[ne.Code.String()]++
	default:
		op.answers["other: "+err.Error()]++
	}
}

// waitDone waits until every producer has closed.
func (op *overloadProducers) waitDone(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		op.mu.Lock()
		done := op.answers["_done"] == 1
		op.mu.Unlock()
		if done {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// tableHeaders reads every overload header in table and how often each
// weir_record_id occurs more than once.
func tableHeaders(ctx context.Context, conn *pgx.Conn, table string) (headers map[string]bool, dupIDs int, err error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT convert_from(substring(payload from 1 for %d), 'UTF8'), count(*) OVER (PARTITION BY weir_record_id) FROM %s",
		overloadHeaderLen, pgx.Identifier{table}.Sanitize()))
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	headers = map[string]bool{}
	for rows.Next() {
		var h string
		var n int64
		if err := rows.Scan(&h, &n); err != nil {
			return nil, 0, err
		}
		headers[h] = true
		if n > 1 {
			dupIDs++
		}
	}
	return headers, dupIDs, rows.Err()
}

// overloadArgs are the daemon flags of the overload scenario besides its
// config: two shards flushing at most 8 records per fdatasync (with the
// slow buffer of overloadFaults, the producers outrun it whatever the
// machine's disk) and, with flow, the budget (a binary from before flow
// control has no such flag).
func overloadArgs(cfg string, budget int64, flow bool) []string {
	args := []string{"--config", cfg, "--shards", "2", "--batch-max-records", "8",
		"--coverage-flush-interval", "100ms", "--live-stall-timeout", "1h"}
	if flow {
		args = append(args, "--memory-budget", fmt.Sprint(budget))
	}
	return args
}

// overloadFaults slows the scenario's disks: every fdatasync of the
// buffer's open segments by wabDelay (the producers outrun it, and what
// is acked stays small enough for the table check), every fdatasync of
// the "slow" secondary by 200 ms.
func overloadFaults(wabDelay time.Duration) string {
	return fmt.Sprintf("sync:*.wab:delay=%s;sync:*/secondary/slow/*:delay=200ms", wabDelay)
}

// runOverload is the overload scenario: 64 producers pushing 64 KiB
// Durable records (window records in flight each) for dur while the
// primary sink — a Postgres raw table behind a proxy — is stalled (the
// connection open, no byte moving) and a file secondary is slow; then the
// proxy resumes and every acked record must reach the table.
// overloadOpts size one overload run.
type overloadOpts struct {
	budget   int64
	dur      time.Duration
	window   int           // each producer's records in flight
	wabDelay time.Duration // added to every fdatasync of the buffer
	// bin runs another weir binary ("": this tree's) — one from before
	// flow control, which has no flow flags (noFlow).
	bin    string
	noFlow bool
}

func runOverload(t testing.TB, o overloadOpts) overloadRun {
	t.Helper()
	budget, dur, window := o.budget, o.dur, o.window
	db := newPGTable(t, "weir_ovl")
	raw := pgRaw(t, db.conn)
	cfg := writeConfig(t, pgRawTOML(db.via, raw, "batch_records = 256", `timeout = "10m"`)+`
[[secondary]]
name = "slow"
type = "file"
`)
	args := overloadArgs(cfg, budget, !o.noFlow)
	faults := "WEIR_FAULTS=" + overloadFaults(o.wabDelay)

	idle := idleHWM(t, func(d *daemon) { d.bin, d.env = o.bin, []string{faults}; d.start() }, args...)
	// The idle daemon created the table; this one starts on it.
	d := newDaemon(t, args...)
	d.bin, d.env = o.bin, []string{faults}
	d.start()
	mem := d.sampleMemory(100*time.Millisecond, true)

	db.proxy.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	start := time.Now()
	op := runOverloadProducers(ctx, t, d.socket, 64, window)
	<-ctx.Done()
	if !op.waitDone(2 * time.Minute) {
		t.Fatalf("producers still waiting for answers 2 minutes after the overload ended\n%s", tail(d.log.String(), 4000))
	}
	elapsed := time.Since(start)
	samples := mem.finish()
	_, peak, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	op.mu.Lock()
	acked := op.acked
	answers := op.answers
	delete(answers, "_done")
	maxWait := op.maxWait
	op.mu.Unlock()

	db.proxy.Resume()
	resumed := time.Now()
	pctx := ctxTimeout(t, 10*time.Minute)
	deadline := resumed.Add(5 * time.Minute)
	for {
		got, dup, err := tableHeaders(pctx, db.conn, raw)
		if err != nil {
			t.Fatal(err)
		}
		if dup > 0 {
			t.Fatalf("%d rows share a weir_record_id with another row", dup)
		}
		missing := 0
		var example string
		for h := range acked {
			if !got[h] {
				missing++
				example = h
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acked records not in the table 5 minutes after the sink returned (e.g. %q)\n%s",
				missing, len(acked), example, tail(d.log.String(), 4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
	drained := time.Since(resumed)
	var transitions map[string]float64
	if m, err := d.tryScrape(); err == nil {
		transitions = stateTransitions(m)
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	return overloadRun{budget: budget, idle: idle, peak: peak, samples: samples, answers: answers, acked: acked,
		maxWait: maxWait, pushed: op.pushed.Load(), duration: elapsed, drained: drained, transitions: transitions}
}

// overloadHeadroom is the stated bound's factor on the budget: a live heap
// of B bytes may occupy up to 2B before the garbage collector runs (GOGC =
// 100), plus a quarter for what is not a record (encode buffers, the
// sinks' statements). Under -race every heap byte has shadow memory too.
func overloadHeadroom() float64 {
	if raceEnabled {
		return 2.25 * raceMemFactor
	}
	return 2.25
}

// raceMemFactor is how much more memory the race detector makes a heap
// take (its shadow memory; the Go documentation gives 5–10×).
const raceMemFactor = 4

// TestOverloadMemoryBound: 64 producers push 64 KiB Durable records with
// windows of 256 (16 MiB in flight each, 1 GiB in all, against a 64 MiB
// budget) while the primary sink's Postgres connection is stalled and a
// file secondary fsyncs slowly. The daemon's peak RSS stays under the
// idle daemon's plus overloadHeadroom × memory_budget; producers are told
// to retry (Overloaded) rather than left hanging — every push is answered
// within answerBound; and once the sink returns every acked record is in
// the table, once by weir_record_id. WEIR_OVERLOAD_SECONDS sets the
// overload's length (default 10; the soak is 60).
func TestOverloadMemoryBound(t *testing.T) {
	const budget = 64 << 20
	const answerBound = 30 * time.Second
	dur := envDuration(t, "WEIR_OVERLOAD_SECONDS", 10*time.Second)
	r := runOverload(t, overloadOpts{budget: budget, dur: dur, window: 256, wabDelay: 40 * time.Millisecond})
	bound := r.idle + int64(overloadHeadroom()*budget)
	t.Logf("overload %v: pushed %d, answers %v; longest answer %v; peak RSS %s (idle %s, budget %s, bound %s); drained %d acked records in %v after the sink returned; state changes %v",
		r.duration.Round(time.Millisecond), r.pushed, r.answers, r.maxWait.Round(time.Millisecond), mib(float64(r.peak)),
		mib(float64(r.idle)), mib(budget), mib(float64(bound)), len(r.acked), r.drained.Round(time.Millisecond), r.transitions)
	logMemSeries(t, r.samples)
	if r.peak > bound {
		t.Errorf("peak RSS %s exceeds the bound %s (idle %s + %.2f × budget %s)", mib(float64(r.peak)), mib(float64(bound)),
			mib(float64(r.idle)), overloadHeadroom(), mib(budget))
	}
	if r.answers[wire.CodeOverloaded.String()] == 0 {
		t.Errorf("no producer was told Overloaded: %v", r.answers)
	}
	for k, n := range r.answers {
		if k != "ok" && k != wire.CodeOverloaded.String() {
			t.Errorf("%d pushes answered %s", n, k)
		}
	}
	if len(r.acked) == 0 {
		t.Error("nothing acked during the overload")
	}
	if r.maxWait > answerBound {
		t.Errorf("a push waited %v for its answer (bound %v)", r.maxWait, answerBound)
	}
}

// logMemSeries logs the memory samples at about one a second.
func logMemSeries(t testing.TB, ss []memSample) {
	t.Helper()
	var last time.Duration = -time.Second
	for _, s := range ss {
		if s.at-last < time.Second {
			continue
		}
		last = s.at
		t.Logf("  +%5.1fs rss %s hwm %s heap %s budget in use %s of %s grantable",
			s.at.Seconds(), mib(float64(s.rss)), mib(float64(s.hwm)), mib(s.heap), mib(s.inUse), mib(s.grantable))
	}
}
