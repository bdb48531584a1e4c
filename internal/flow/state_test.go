package flow_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-io/weir/internal/flow"
)

var (
	th = flow.DefaultThresholds()
	t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

	calm     = flow.Signals{Memory: 0.3, Queue: 0.2, Held: 0.2}
	degMem   = flow.Signals{Memory: 0.85, Queue: 0.2, Held: 0.2}
	degQueue = flow.Signals{Memory: 0.3, Queue: 0.75}
	degHeld  = flow.Signals{Memory: 0.3, Held: 0.75}
	degFail  = flow.Signals{Memory: 0.3, Queue: 0.2, Failures: flow.DefaultFailures}
	critMem  = flow.Signals{Memory: 0.95, Queue: 0.2, Held: 0.2}
	critQ    = flow.Signals{Memory: 0.3, Queue: 0.95}
)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestLevel(t *testing.T) {
	for _, c := range []struct {
		name string
		s    flow.Signals
		want flow.State
	}{
		{"calm", calm, flow.Normal},
		{"memory at the degraded level is not above it", flow.Signals{Memory: 0.80, Queue: 0.2}, flow.Normal},
		{"memory above degraded", degMem, flow.Degraded},
		{"queue above degraded", degQueue, flow.Degraded},
		{"budget held above degraded", degHeld, flow.Degraded},
		{"failures", degFail, flow.Degraded},
		{"failures below the count", flow.Signals{Failures: flow.DefaultFailures - 1}, flow.Normal},
		{"memory above critical", critMem, flow.Critical},
		{"queue above critical", critQ, flow.Critical},
		{"budget over-subscribed is degraded, not critical (admission bounds it)", flow.Signals{Held: 1.4}, flow.Degraded},
		{"failures never make it critical", flow.Signals{Failures: 1000}, flow.Degraded},
		// The working-set rule: high memory with every queue and the
		// budget near empty is not records held.
		{"working set: critical memory, queues and budget empty", flow.Signals{Memory: 0.99, Queue: 0.01, Held: 0.02}, flow.Normal},
		{"working set: degraded memory, nothing held", flow.Signals{Memory: 0.85}, flow.Normal},
		{"working set does not hide failures", flow.Signals{Memory: 0.99, Failures: flow.DefaultFailures}, flow.Degraded},
		{"memory counts once a queue holds something", flow.Signals{Memory: 0.99, Queue: 0.05}, flow.Critical},
		{"memory counts once the budget holds something", flow.Signals{Memory: 0.99, Held: 0.06}, flow.Critical},
	} {
		if got := th.Level(c.s); got != c.want {
			t.Errorf("%s: Level(%+v) = %s, want %s", c.name, c.s, got, c.want)
		}
	}
	if (flow.Thresholds{Failures: 0}).Level(flow.Signals{Failures: 99}) != flow.Normal {
		t.Error("Failures = 0 does not ignore failures")
	}
}

func TestMachineTransitions(t *testing.T) {
	m := func(s flow.State, since, calmSince time.Duration) flow.Machine {
		mm := flow.Machine{State: s, Since: at(since)}
		if calmSince >= 0 {
			mm.CalmSince = at(calmSince)
		}
		return mm
	}
	const none = -1
	for _, c := range []struct {
		name string
		from flow.Machine
		now  time.Duration
		s    flow.Signals
		want flow.Machine
	}{
		{"normal stays", m(flow.Normal, 0, none), time.Hour, calm, m(flow.Normal, 0, none)},
		{"normal to degraded on memory", m(flow.Normal, 0, none), 5 * time.Second, degMem, m(flow.Degraded, 5*time.Second, none)},
		{"normal to degraded on a queue", m(flow.Normal, 0, none), time.Second, degQueue, m(flow.Degraded, time.Second, none)},
		{"normal to degraded on failures", m(flow.Normal, 0, none), time.Second, degFail, m(flow.Degraded, time.Second, none)},
		{"normal straight to critical", m(flow.Normal, 0, none), time.Second, critMem, m(flow.Critical, time.Second, none)},
		{"normal stays on the working set", m(flow.Normal, 0, none), time.Second, flow.Signals{Memory: 0.99}, m(flow.Normal, 0, none)},

		{"degraded to critical", m(flow.Degraded, 0, none), time.Second, critQ, m(flow.Critical, time.Second, none)},
		{"degraded stays under pressure", m(flow.Degraded, 0, none), time.Minute, degMem, m(flow.Degraded, 0, none)},
		{"degraded: pressure back resets the calm", m(flow.Degraded, 0, 10*time.Second), time.Minute, degQueue, m(flow.Degraded, 0, none)},
		{"degraded starts counting the calm", m(flow.Degraded, 0, none), time.Minute, calm, m(flow.Degraded, 0, time.Minute)},
		{"degraded, calm not long enough", m(flow.Degraded, 0, 10*time.Second), 39 * time.Second, calm, m(flow.Degraded, 0, 10*time.Second)},
		{"degraded to recovery after the hold", m(flow.Degraded, 0, 10*time.Second), 40 * time.Second, calm, m(flow.Recovery, 40*time.Second, none)},
		{"degraded never to normal directly", m(flow.Degraded, 0, 0), time.Hour, calm, m(flow.Recovery, time.Hour, none)},

		{"critical stays under pressure", m(flow.Critical, 0, none), time.Hour, critMem, m(flow.Critical, 0, none)},
		{"critical: pressure back resets the calm", m(flow.Critical, 0, 5*time.Second), time.Minute, critQ, m(flow.Critical, 0, none)},
		{"critical counts degraded pressure as calm", m(flow.Critical, 0, none), time.Minute, degMem, m(flow.Critical, 0, time.Minute)},
		{"critical, calm not long enough", m(flow.Critical, 0, 0), 4 * time.Second, calm, m(flow.Critical, 0, 0)},
		{"critical to degraded after the hold", m(flow.Critical, 0, 0), 5 * time.Second, degQueue, m(flow.Degraded, 5*time.Second, none)},
		{"critical to recovery after the hold", m(flow.Critical, 0, 0), 5 * time.Second, calm, m(flow.Recovery, 5*time.Second, none)},
		{"critical to recovery on the working set", m(flow.Critical, 0, 0), 5 * time.Second, flow.Signals{Memory: 0.99}, m(flow.Recovery, 5*time.Second, none)},

		{"recovery stays", m(flow.Recovery, 0, none), 59 * time.Second, calm, m(flow.Recovery, 0, none)},
		{"recovery to normal after its time", m(flow.Recovery, 0, none), 60 * time.Second, calm, m(flow.Normal, 60*time.Second, none)},
		{"recovery back to degraded", m(flow.Recovery, 0, none), 10 * time.Second, degFail, m(flow.Degraded, 10*time.Second, none)},
		{"recovery back to critical", m(flow.Recovery, 0, none), 10 * time.Second, critMem, m(flow.Critical, 10*time.Second, none)},
	} {
		if got := c.from.Step(at(c.now), c.s, th); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, show(got), show(c.want))
		}
	}
}

func show(m flow.Machine) string {
	c := "-"
	if !m.CalmSince.IsZero() {
		c = m.CalmSince.Sub(t0).String()
	}
	return fmt.Sprintf("%s since %s calm since %s", m.State, m.Since.Sub(t0), c)
}

// The whole way down from Critical, sampled every second: Critical until
// the hold, Recovery for its time, then Normal.
func TestMachineWayDown(t *testing.T) {
	m := flow.Machine{State: flow.Normal, Since: t0}
	var path []flow.State
	for i := range 200 {
		s := calm
		if i < 10 {
			s = critMem
		}
		next := m.Step(at(time.Duration(i)*time.Second), s, th)
		if next.State != m.State {
			path = append(path, next.State)
			t.Logf("%3ds %s", i, next.State)
		}
		m = next
	}
	want := []flow.State{flow.Critical, flow.Recovery, flow.Normal}
	if fmt.Sprint(path) != fmt.Sprint(want) {
		t.Fatalf("path %v, want %v", path, want)
	}
}

func TestStateProperties(t *testing.T) {
	for _, s := range flow.States {
		if s.Throttled() != (s == flow.Critical) {
			t.Errorf("%s.Throttled() = %v", s, s.Throttled())
		}
	}
	want := map[flow.State]float64{flow.Normal: 1, flow.Degraded: .5, flow.Critical: .25, flow.Recovery: .75}
	for s, f := range want {
		if s.BatchFactor() != f {
			t.Errorf("%s.BatchFactor() = %v, want %v", s, s.BatchFactor(), f)
		}
	}
	if got := fmt.Sprint(flow.States); got != "[normal degraded critical recovery]" {
		t.Errorf("States = %s", got)
	}
}

// From any sequence of signals and time steps, under any thresholds, the
// machine never reaches Normal from Critical or Degraded without passing
// through Recovery, moves up at once when pressure calls for it, uses one
// of the four batch factors, and throttles exactly in Critical.
func TestMachineProperty(t *testing.T) {
	ratio := func() *rapid.Generator[float64] {
		return rapid.OneOf(rapid.Float64Range(0, 1.5), rapid.SampledFrom([]float64{0, 0.05, 0.7, 0.8, 0.9, 1}))
	}
	rapid.Check(t, func(rt *rapid.T) {
		dm := rapid.Float64Range(0.1, 0.95).Draw(rt, "degradedMemory")
		dq := rapid.Float64Range(0.1, 0.95).Draw(rt, "degradedQueue")
		th := flow.Thresholds{
			DegradedMemory: dm, CriticalMemory: rapid.Float64Range(dm, 1).Draw(rt, "criticalMemory"),
			DegradedQueue: dq, CriticalQueue: rapid.Float64Range(dq, 1).Draw(rt, "criticalQueue"),
			IdleQueue:    rapid.Float64Range(0, 0.1).Draw(rt, "idle"),
			Failures:     rapid.IntRange(0, 5).Draw(rt, "failures"),
			CriticalHold: time.Duration(rapid.IntRange(0, 30).Draw(rt, "criticalHold")) * time.Second,
			RecoveryHold: time.Duration(rapid.IntRange(0, 60).Draw(rt, "hold")) * time.Second,
			RecoveryTime: time.Duration(rapid.IntRange(0, 120).Draw(rt, "recoveryTime")) * time.Second,
		}
		now := t0
		m := flow.Machine{State: flow.Normal, Since: now}
		lastAbove := flow.Normal // the last state other than Normal
		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		factors := map[float64]bool{1: true, .5: true, .25: true, .75: true}
		for i := range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 45_000).Draw(rt, fmt.Sprint("dt", i))) * time.Millisecond)
			s := flow.Signals{
				Memory:   ratio().Draw(rt, fmt.Sprint("memory", i)),
				Held:     ratio().Draw(rt, fmt.Sprint("held", i)),
				Queue:    ratio().Draw(rt, fmt.Sprint("queue", i)),
				Failures: rapid.IntRange(0, 6).Draw(rt, fmt.Sprint("failures", i)),
			}
			prev := m
			m = m.Step(now, s, th)
			lvl := th.Level(s)
			switch {
			case m.State == flow.Normal && (prev.State == flow.Critical || prev.State == flow.Degraded):
				rt.Fatalf("step %d: %s → normal without recovery", i, prev.State)
			case m.State == flow.Normal && prev.State != flow.Normal && lastAbove != flow.Recovery:
				rt.Fatalf("step %d: reached normal from %s", i, lastAbove)
			case lvl == flow.Critical && m.State != flow.Critical:
				rt.Fatalf("step %d: critical pressure, state %s", i, m.State)
			case lvl == flow.Degraded && (prev.State == flow.Normal || prev.State == flow.Recovery) && m.State != flow.Degraded:
				rt.Fatalf("step %d: degraded pressure in %s, state %s", i, prev.State, m.State)
			case lvl != flow.Normal && m.State == flow.Normal:
				rt.Fatalf("step %d: pressure %s, state normal", i, lvl)
			case !factors[m.State.BatchFactor()]:
				rt.Fatalf("step %d: batch factor %v", i, m.State.BatchFactor())
			case m.State.Throttled() != (m.State == flow.Critical):
				rt.Fatalf("step %d: %s throttled %v", i, m.State, m.State.Throttled())
			case m.State < flow.Normal || m.State > flow.Recovery:
				rt.Fatalf("step %d: state %d", i, m.State)
			}
			if m.State != flow.Normal {
				lastAbove = m.State
			}
		}
	})
}
