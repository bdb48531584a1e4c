//go:build dst

package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the simulation on one processor: goroutines a step wakes
// then run one at a time, in the Go scheduler's order, which makes that
// order a function of the steps.
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	goleak.VerifyTestMain(m)
}

// sweepSeeds is how many seeds each scenario runs: WEIR_SIM_SWEEP, or a
// CI-sized default.
func sweepSeeds(t *testing.T) int {
	n := 20
	if v := os.Getenv("WEIR_SIM_SWEEP"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("WEIR_SIM_SWEEP: %v", err)
		}
	}
	return n
}

// TestEngineSim runs the sweep: every scenario under sweepSeeds seeds
// from WEIR_SIM_BASE (default 1). A failing spec is written under
// testdata/failures to replay.
func TestEngineSim(t *testing.T) {
	if f := os.Getenv("WEIR_SIM_SPEC"); f != "" {
		replayFile(t, f)
		return
	}
	base := uint64(1)
	if v := os.Getenv("WEIR_SIM_BASE"); v != "" {
		b, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("WEIR_SIM_BASE: %v", err)
		}
		base = b
	}
	seeds := sweepSeeds(t)
	start := time.Now()
	var runs, steps, crashes, records, inlined int
	for si, sc := range scenarios {
		for i := range seeds {
			sp := makeSpec(sc, splitmix(base+uint64(i)+uint64(si)<<32))
			res := runSpec(t, sp)
			runs, steps, crashes, records, inlined = runs+1, steps+res.Steps, crashes+res.Crashes, records+res.Records, inlined+res.Inlined
			if res.Violated != nil {
				pin(t, sp, res)
			}
			if testing.Verbose() && os.Getenv("WEIR_SIM_VERBOSE") != "" {
				t.Logf("%s %s: %d steps, %d crashes, settled %v, trace %016x: %s", sc, sp.Seed, res.Steps, res.Crashes, res.Settled, res.Trace, res.Summary)
			}
		}
	}
	took := time.Since(start)
	t.Logf("%d runs (%d seeds × %d scenarios), %d steps, %d crashes, %d records (%d frames written inline) in %v (%.0f records a second)",
		runs, seeds, len(scenarios), steps, crashes, records, inlined, took.Round(time.Millisecond), float64(records)/took.Seconds())
}

// pin shrinks a failing spec, writes it under testdata/failures and
// fails the test.
func pin(t *testing.T, sp spec, res result) {
	t.Helper()
	if os.Getenv("WEIR_SIM_NOSHRINK") == "" {
		small := shrink(t, sp, res.Violated.Invariant)
		if small.json() != sp.json() {
			t.Logf("shrunk %s %s: %s", sp.Scenario, sp.Seed, small.Note)
			sp, res = small, runSpec(t, small)
		}
	}
	dir := filepath.Join("testdata", "failures")
	_ = os.MkdirAll(dir, 0o755)
	file := filepath.Join(dir, fmt.Sprintf("%s-%s.json", sp.Scenario, sp.Seed))
	_ = os.WriteFile(file, []byte(sp.json()+"\n"), 0o644)
	t.Errorf("%s seed %s: %v\nreplay: WEIR_SIM_SPEC=%s go test -tags dst -run TestEngineSim ./internal/sim\nlast steps:\n%s",
		sp.Scenario, sp.Seed, res.Violated, file, res.Tail)
}

func replayFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var sp spec
	if err := json.Unmarshal(b, &sp); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	// A run may take another way at a select Go resolves at random
	// (TestEngineSimReplays): a failure is looked for in a few runs.
	for try := 1; try <= 10; try++ {
		res := runSpec(t, sp)
		if res.Violated != nil {
			t.Fatalf("%s (run %d): %v\nlast steps:\n%s", file, try, res.Violated, res.Tail)
		}
	}
	res := runSpec(t, sp)
	t.Logf("%s: settled in %d steps, %d crashes", file, res.Steps, res.Crashes)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// TestEngineSimReplays: a spec run twice takes the same steps — the
// trace of scheduling decisions, crashes and faults hashes alike — and
// ends alike, for most specs. Not for all: where the product's loops
// select among several channels ready at once, Go picks one at random
// (the secondary's worker between its queue and its recovery tick, the
// drain between a seal and its poll), and from there a run may go its
// own way. The test measures the share of specs that replay exactly and
// requires three in four (it is about 95 %: docs/testing.md).
// WEIR_SIM_REPLAYS sets the specs per scenario (default 2) and prints
// where each divergent pair first differs.
func TestEngineSimReplays(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector randomizes the Go scheduler: replays are checked without -race (docs/testing.md)")
	}
	n := 2
	if v := os.Getenv("WEIR_SIM_REPLAYS"); v != "" {
		n, _ = strconv.Atoi(v)
		keepTrace = true
	}
	same := 0
	for i := range n * len(scenarios) {
		sc := scenarios[i%len(scenarios)]
		sp := makeSpec(sc, splitmix(uint64(i)+99))
		a, b := runSpec(t, sp), runSpec(t, sp)
		if a.Trace == b.Trace && a.Steps == b.Steps && a.Crashes == b.Crashes && a.Summary == b.Summary {
			same++
			continue
		}
		if (a.Violated == nil) != (b.Violated == nil) {
			t.Errorf("%s %s: one run broke an invariant and its replay did not: %v / %v", sc, sp.Seed, a.Violated, b.Violated)
		}
		for j := range min(len(a.All), len(b.All)) {
			if a.All[j] != b.All[j] {
				t.Logf("%s %s: first difference at step line %d:\n%s\n--- vs ---\n%s", sc, sp.Seed, j,
					strings.Join(a.All[max(0, j-6):min(len(a.All), j+3)], "\n"), strings.Join(b.All[max(0, j-6):min(len(b.All), j+3)], "\n"))
				break
			}
		}
	}
	total := n * len(scenarios)
	t.Logf("%d of %d specs replayed step for step", same, total)
	if same*4 < total*3 {
		t.Errorf("only %d of %d specs replayed step for step", same, total)
	}
}

// TestEngineSimCatches: deliberately broken builds are caught by the
// invariant they break. cover-early: a secondary's coverage recorded
// before its commit returns (a crash then leaves coverage of records the
// sink never took). cursor-early: a source's position committed before
// the gate's Write (a power loss then loses records the broker will not
// deliver again). Each must be caught in a handful of seeds.
func TestEngineSimCatches(t *testing.T) {
	cases := []struct {
		broken, expect, scenario string
		tune                     func(*spec)
	}{
		{"cover-early", "coverage-overclaims", "crash", func(sp *spec) {
			sp.Sinks[0].Slow, sp.Sinks[0].Hang, sp.Sinks[0].Applied = 30, 10, 0
		}},
		{"cursor-early", "acked-missing", "power", func(sp *spec) {
			sp.Crashes = nil
			for i := range 8 {
				sp.Crashes = append(sp.Crashes, crash{Step: 30 + i*37, Mode: "drop"})
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			const seeds = 30
			caught, other := 0, 0
			for i := range seeds {
				sp := makeSpec(c.scenario, splitmix(uint64(i)+7777))
				sp.Broken, sp.Expect = c.broken, c.expect
				c.tune(&sp)
				res := runSpec(t, sp)
				switch {
				case res.Violated == nil:
				case res.Violated.Invariant == c.expect:
					caught++
					if caught == 1 && os.Getenv("WEIR_SIM_PIN_CATCHES") != "" {
						small := shrink(t, sp, c.expect)
						file := filepath.Join("testdata", "pinned", c.broken+".json")
						if err := os.WriteFile(file, []byte(small.json()+"\n"), 0o644); err != nil {
							t.Fatal(err)
						}
						t.Logf("pinned %s: %s", file, small.Note)
					}
				default:
					other++
					t.Logf("%s: caught as %v", sp.Seed, res.Violated)
				}
			}
			t.Logf("%s: caught by %s in %d of %d seeds (%d by another invariant)", c.broken, c.expect, caught, seeds, other)
			if caught == 0 {
				t.Errorf("%s was never caught by %s in %d seeds", c.broken, c.expect, seeds)
			}
		})
	}
}

// TestEngineSimPinned replays every spec under testdata/pinned: those
// with an Expect (deliberately broken builds, shrunk) must break that
// invariant, the others must settle with every invariant kept.
func TestEngineSimPinned(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "pinned", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pinned specs under testdata/pinned (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var sp spec
			if err := json.Unmarshal(b, &sp); err != nil {
				t.Fatal(err)
			}
			res := runSpec(t, sp)
			// A broken build's run may take another way at a random
			// select (TestEngineSimReplays): a few tries.
			for try := 1; sp.Expect != "" && (res.Violated == nil || res.Violated.Invariant != sp.Expect) && try < 10; try++ {
				res = runSpec(t, sp)
			}
			switch {
			case sp.Expect == "" && res.Violated != nil:
				t.Fatalf("%v\nlast steps:\n%s", res.Violated, res.Tail)
			case sp.Expect != "" && (res.Violated == nil || res.Violated.Invariant != sp.Expect):
				t.Fatalf("the broken build %q was not caught by %s: %v", sp.Broken, sp.Expect, res.Violated)
			}
		})
	}
}
