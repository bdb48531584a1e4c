package flow_test

import (
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

var (
	sth = flow.StuckThresholds{Memory: 0.5, IdleQueue: 0.05,
		WarnAfter: 2 * time.Minute, FailAfter: 5 * time.Minute, ExitAfter: 3 * time.Minute, ClearAfter: 30 * time.Second}
	stuckSig = flow.Signals{Memory: 0.7, Held: 0.6, Queue: 0}
)

func TestStuckCondition(t *testing.T) {
	for _, c := range []struct {
		name       string
		s          flow.Signals
		progressed bool
		want       bool
	}{
		{"held, queues empty, no progress", stuckSig, false, true},
		{"budget held alone", flow.Signals{Held: 0.5}, false, true},
		{"heap high with some of the budget held", flow.Signals{Memory: 0.9, Held: 0.05}, false, true},
		{"progress", stuckSig, true, false},
		{"a queue holds records: saturated, not stuck", flow.Signals{Held: 0.9, Queue: 0.05}, false, false},
		{"memory low", flow.Signals{Memory: 0.4, Held: 0.49}, false, false},
		// An idle node whose heap is large against the budget holds no
		// records: not stuck (the working-set rule).
		{"heap high, budget and queues empty", flow.Signals{Memory: 3, Held: 0.01}, false, false},
	} {
		if got := sth.Condition(c.s, c.progressed); got != c.want {
			t.Errorf("%s: Condition(%+v, %v) = %v, want %v", c.name, c.s, c.progressed, got, c.want)
		}
	}
}

// stuckRun steps the detector every second for d; cond(i) says whether
// second i shows the stuck condition (else progress happened). It returns
// the stage at each second and when each change happened.
func stuckRun(d time.Duration, cond func(sec int) bool) (stages []flow.StuckStage, changes map[flow.StuckStage][]time.Duration) {
	changes = map[flow.StuckStage][]time.Duration{}
	var det flow.Stuck
	for i := 0; time.Duration(i)*time.Second <= d; i++ {
		now := at(time.Duration(i) * time.Second)
		prev := det.Stage
		det = det.Step(now, stuckSig, !cond(i), sth)
		if det.Stage != prev {
			changes[det.Stage] = append(changes[det.Stage], now.Sub(t0))
		}
		stages = append(stages, det.Stage)
	}
	return stages, changes
}

func TestStuckEscalates(t *testing.T) {
	_, ch := stuckRun(20*time.Minute, func(int) bool { return true })
	want := map[flow.StuckStage][]time.Duration{
		flow.StuckWarn:      {2 * time.Minute},
		flow.StuckUnhealthy: {5 * time.Minute},
		flow.StuckExit:      {8 * time.Minute}, // ExitAfter once /live fails
	}
	for st, w := range want {
		if g := ch[st]; len(g) != 1 || g[0] != w[0] {
			t.Errorf("%s at %v, want %v", st, g, w)
		}
	}
	if len(ch[flow.StuckClear]) != 0 {
		t.Errorf("cleared at %v without progress", ch[flow.StuckClear])
	}
}

// A slow sink makes progress now and then: each return restarts the count,
// so it is never unhealthy. One slower than WarnAfter is warned about, and
// the warning clears only after ClearAfter of progress.
func TestStuckSlowSinkNeverUnhealthy(t *testing.T) {
	for _, c := range []struct {
		name    string
		every   int // seconds between progress
		maxWant flow.StuckStage
	}{
		{"progress every 90 s", 90, flow.StuckClear},
		{"progress every 119 s", 119, flow.StuckClear},
		{"progress every 4 min", 240, flow.StuckWarn},
	} {
		stages, _ := stuckRun(time.Hour, func(i int) bool { return i%c.every != 0 })
		top := flow.StuckClear
		for _, s := range stages {
			top = max(top, s)
		}
		if top != c.maxWant {
			t.Errorf("%s: reached %s, want at most %s", c.name, top, c.maxWant)
		}
	}
}

func TestStuckClearIsDebounced(t *testing.T) {
	// Unhealthy at 5 min; then progress for 29 s, stuck again: not cleared.
	// Then progress for 30 s: cleared.
	cond := func(i int) bool {
		switch {
		case i < 360: // 6 min stuck
			return true
		case i < 389: // 29 s of progress
			return false
		case i < 400:
			return true
		default: // progress from then on
			return false
		}
	}
	stages, ch := stuckRun(10*time.Minute, cond)
	if g := ch[flow.StuckClear]; len(g) != 1 || g[0] != 430*time.Second {
		t.Fatalf("cleared at %v, want once at 430s (30 s of progress from 400 s)", g)
	}
	if stages[388] != flow.StuckUnhealthy || stages[399] != flow.StuckUnhealthy {
		t.Fatalf("stage changed during 29 s of progress: %s, %s", stages[388], stages[399])
	}
	if len(ch[flow.StuckExit]) != 0 {
		t.Fatalf("exited at %v", ch[flow.StuckExit])
	}
}

// Alternating samples neither escalate nor clear a raised stage: the stage
// cannot oscillate.
func TestStuckNoOscillation(t *testing.T) {
	for _, period := range []int{1, 2, 5, 29} {
		// Stuck for 3 min (warned), then alternate every period seconds.
		_, ch := stuckRun(time.Hour, func(i int) bool { return i < 180 || (i/period)%2 == 0 })
		n := 0
		for _, c := range ch {
			n += len(c)
		}
		if n != 1 || len(ch[flow.StuckWarn]) != 1 {
			t.Errorf("alternating every %ds: changes %v, want only the warning", period, ch)
		}
	}
	// From clear, alternating never escalates.
	_, ch := stuckRun(time.Hour, func(i int) bool { return i%2 == 0 })
	if len(ch) != 0 {
		t.Errorf("alternating from clear: changes %v", ch)
	}
}

func TestStuckStageNames(t *testing.T) {
	want := []string{"clear", "warn", "unhealthy", "exit"}
	for i, s := range flow.StuckStages {
		if s.String() != want[i] {
			t.Errorf("stage %d is %q, want %q", i, s, want[i])
		}
	}
	if flow.ExitStuck != 70 {
		t.Errorf("ExitStuck = %d, the documented code is 70", flow.ExitStuck)
	}
}
