package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/flow"
)

// Flow holds flow control's metrics; it implements flow.Observer. Make it
// with Metrics.Flow.
type Flow struct {
	state       *prometheus.GaugeVec
	stateS      []prometheus.Gauge // by flow.State
	transitions *prometheus.CounterVec
	limit       prometheus.Gauge
	grantable   prometheus.Gauge
	inUse       prometheus.Gauge
	waiting     prometheus.Gauge
	heap        prometheus.Gauge
	ratio       prometheus.Gauge
	memory      prometheus.Gauge
	saturation  prometheus.Gauge
	sinkBound   prometheus.Gauge
	queueFill   *prometheus.GaugeVec
	paused      *prometheus.GaugeVec
	stuck       *prometheus.GaugeVec
	stuckS      []prometheus.Gauge // by flow.StuckStage
	wait        prometheus.Histogram
	oversize    *prometheus.CounterVec

	mu      sync.Mutex
	sources map[string]bool // paused, by source name
	degMem  float64
	degQ    float64
}

var waitBuckets = []float64{.0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Flow returns flow control's metrics, registering them on first use;
// th are the thresholds weir_flow_sink_bound is judged by.
func (m *Metrics) Flow(th flow.Thresholds) *Flow {
	m.flowOnce.Do(func() { m.flow = newFlow(factory{m.reg}, th) })
	return m.flow
}

func newFlow(f factory, th flow.Thresholds) *Flow {
	x := &Flow{sources: map[string]bool{}, degMem: th.DegradedMemory, degQ: th.DegradedQueue}
	x.state = f.gaugeVec("weir_flow_state", "1 for the backpressure state in force (normal, degraded, critical, recovery), 0 for the others.", "state")
	for _, s := range flow.States {
		x.stateS = append(x.stateS, x.state.WithLabelValues(s.String()))
	}
	x.stateS[flow.Normal].Set(1)
	x.transitions = f.counterVec("weir_flow_transitions_total", "Backpressure state changes, by the state left and the state entered.", "from", "to")
	for _, from := range flow.States {
		for _, to := range flow.States {
			if from != to {
				x.transitions.WithLabelValues(from.String(), to.String())
			}
		}
	}
	x.limit = f.gauge("weir_memory_budget_bytes", "The memory budget (memory_budget, or derived; scaled by the quorum profile).")
	x.grantable = f.gauge("weir_memory_budget_grantable_bytes", "What the budget grants now: below weir_memory_budget_bytes during warm-up.")
	x.inUse = f.gauge("weir_memory_budget_in_use_bytes", "Bytes reserved by records held in memory now.")
	x.waiting = f.gauge("weir_memory_budget_waiting_bytes", "Bytes of reservations waiting for the budget.")
	x.heap = f.gauge("weir_flow_live_heap_bytes", "Live heap at the last garbage collection, as the backpressure machine reads it.")
	x.ratio = f.gauge("weir_flow_expansion_ratio", "Expansion ratio the drain's size estimates use (the p95 of recent samples, or the cold-start ratio); sources keep their own.")
	x.memory = f.gauge("weir_flow_memory_ratio", "Live heap ÷ the memory the process may use: GOMEMLIMIT or the cgroup's memory.max when set, else 2 × memory_budget (the machine's memory signal).")
	x.saturation = f.gauge("weir_flow_saturation_ratio", "Fill of the fullest bounded queue or of the budget (the machine's saturation signal).")
	x.sinkBound = f.gauge("weir_flow_sink_bound", "1 while saturation is high and memory low: the sink, not memory, is the bottleneck.")
	x.queueFill = f.gaugeVec("weir_flow_queue_fill_ratio", "Fill of each bounded queue flow control watches.", "queue")
	x.paused = f.gaugeVec("weir_flow_source_paused", "1 while flow control has paused the source (Critical).", "source")
	x.stuck = f.gaugeVec("weir_flow_stuck_stage", "1 for the stuck detector's stage (clear, warn, unhealthy, exit), 0 for the others.", "stage")
	for _, s := range flow.StuckStages {
		x.stuckS = append(x.stuckS, x.stuck.WithLabelValues(s.String()))
	}
	x.stuckS[flow.StuckClear].Set(1)
	x.wait = f.histogram("weir_flow_admission_wait_seconds", "Time a reservation waited for the memory budget (0 when granted at once).", waitBuckets)
	x.oversize = f.counterVec("weir_flow_oversize_total", "Records refused by admission as larger than the grantable budget, by where they were refused.", "stage")
	return x
}

// AddSource pre-initialises a source's throttle flag.
func (x *Flow) AddSource(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.sources[name] = false
	x.paused.WithLabelValues(name).Set(0)
}

// AdmissionWaited records how long a reservation waited.
func (x *Flow) AdmissionWaited(d time.Duration) { x.wait.Observe(d.Seconds()) }

// Oversize counts a record refused as larger than the grantable budget.
func (x *Flow) Oversize(stage string) { x.oversize.WithLabelValues(stage).Inc() }

// Sampled implements flow.Observer.
func (x *Flow) Sampled(s flow.Sample) {
	x.limit.Set(float64(s.Budget.Limit))
	x.grantable.Set(float64(s.Budget.Grantable))
	x.inUse.Set(float64(s.Budget.InUse))
	x.waiting.Set(float64(s.Budget.WaitBytes))
	x.heap.Set(float64(s.Heap))
	x.ratio.Set(s.Ratio)
	x.memory.Set(s.Signals.Memory)
	sat := max(s.Signals.Queue, s.Signals.Held)
	x.saturation.Set(sat)
	bound := 0.0
	if sat > x.degQ && s.Signals.Memory < x.degMem {
		bound = 1
	}
	x.sinkBound.Set(bound)
	for q, v := range s.Queues {
		x.queueFill.WithLabelValues(q).Set(v)
	}
	x.mu.Lock()
	for name := range x.sources {
		x.sources[name] = s.Paused
		v := 0.0
		if s.Paused {
			v = 1
		}
		x.paused.WithLabelValues(name).Set(v)
	}
	x.mu.Unlock()
}

// Transition implements flow.Observer.
func (x *Flow) Transition(from, to flow.State) {
	x.transitions.WithLabelValues(from.String(), to.String()).Inc()
	oneHot(x.stateS, int(to))
}

// StuckStage implements flow.Observer.
func (x *Flow) StuckStage(from, to flow.StuckStage) { oneHot(x.stuckS, int(to)) }

// oneHot sets gauge i of gs to 1 and the others to 0.
func oneHot(gs []prometheus.Gauge, i int) {
	for j, g := range gs {
		if j == i {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}
