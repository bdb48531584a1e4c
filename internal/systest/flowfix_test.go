package systest

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fixtures of the flow-control system tests (flow_test.go) and benchmarks
// (flow_bench_test.go): memory of the real process, /live, per-second
// rates from /metrics, and the knobs that size a run.

// procMem reads the resident set (VmRSS) and its peak (VmHWM) of process
// pid from /proc/<pid>/status, in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(l, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		f := strings.Fields(v) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q", pid, l)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, l, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM", pid)
	}
	return rss, hwm, nil
}

// memSample is one reading of the daemon's memory and budget.
type memSample struct {
	at        time.Duration // since the sampler started
	rss, hwm  int64
	grantable float64 // weir_memory_budget_grantable_bytes (-1: not scraped)
	inUse     float64 // weir_memory_budget_in_use_bytes
	heap      float64 // weir_flow_live_heap_bytes
}

// memSampler reads the daemon's memory on an interval until stopped.
type memSampler struct {
	d     *daemon
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	samples []memSample
	errs    int
}

// sampleMemory samples d's VmRSS and VmHWM every interval and, with
// scrape, the budget's gauges.
func (d *daemon) sampleMemory(every time.Duration, scrape bool) *memSampler {
	s := &memSampler{d: d, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	pid := d.cmd.Process.Pid
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m := memSample{at: time.Since(s.start), grantable: -1, inUse: -1, heap: -1}
			var err error
			m.rss, m.hwm, err = procMem(pid)
			if err == nil && scrape {
				if sc, serr := d.tryScrape(); serr == nil {
					m.grantable = sc["weir_memory_budget_grantable_bytes"]
					m.inUse = sc["weir_memory_budget_in_use_bytes"]
					m.heap = sc["weir_flow_live_heap_bytes"]
				}
			}
			s.mu.Lock()
			if err != nil {
				s.errs++
			} else {
				s.samples = append(s.samples, m)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-d.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns its samples.
func (s *memSampler) finish() []memSample {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// peakHWM is the largest VmHWM seen.
func peakHWM(ss []memSample) int64 {
	var p int64
	for _, s := range ss {
		p = max(p, s.hwm)
	}
	return p
}

// idleHWM starts a daemon with args, lets it idle for a moment (the
// runtime, the shards' preallocated segments, the metrics server, the
// sinks' clients all up) and returns its VmHWM: the fixed overhead a
// memory bound under load is stated over. The daemon is stopped.
func idleHWM(t testing.TB, start func(*daemon), args ...string) int64 {
	t.Helper()
	d := newDaemon(t, args...)
	start(d)
	time.Sleep(time.Second)
	_, hwm, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Logf("idle daemon stop: %v", err)
	}
	return hwm
}

// live is the status code of the daemon's /live (0 when it does not
// answer) and its body.
func (d *daemon) live() (int, string) {
	code, body, err := d.httpGet("/live")
	if err != nil {
		return 0, err.Error()
	}
	return code, strings.TrimSpace(body)
}

// exitCode waits up to timeout for the process to end and returns its exit
// code (-1 if it did not end or was killed by a signal).
func (d *daemon) exitCode(timeout time.Duration) int {
	select {
	case <-d.done:
	case <-time.After(timeout):
		return -1
	}
	if d.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(d.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// rateSeries samples a counter (sum of the series whose name and labels
// start with family and contain every filter string) every interval and
// keeps the per-second rate of each interval, until stopped.
type rateSeries struct {
	stop, done chan struct{}
	mu         sync.Mutex
	perSec     []float64
	values     []float64 // the counter at each sample
}

func (d *daemon) sampleRate(every time.Duration, family string, filters ...string) *rateSeries {
	r := &rateSeries{stop: make(chan struct{}), done: make(chan struct{})}
	read := func() (float64, bool) {
		m, err := d.tryScrape()
		if err != nil {
			return 0, false
		}
		return sumWhere(m, family, filters...), true
	}
	go func() {
		defer close(r.done)
		prev, ok := read()
		last := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-d.done:
				return
			case <-t.C:
			}
			v, vok := read()
			now := time.Now()
			if ok && vok {
				r.mu.Lock()
				r.perSec = append(r.perSec, (v-prev)/now.Sub(last).Seconds())
				r.values = append(r.values, v)
				r.mu.Unlock()
			}
			prev, ok, last = v, vok, now
		}
	}()
	return r
}

func (r *rateSeries) finish() []float64 {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.perSec)
}

// rates are the rates so far (the sampler keeps running).
func (r *rateSeries) rates() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.perSec)
}

// counts are the values read at each sample after the first (for a gauge:
// the gauge itself). Call after finish.
func (r *rateSeries) counts() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.values)
}

// sumWhere adds the samples of family whose labels contain every filter.
func sumWhere(m map[string]float64, family string, filters ...string) float64 {
	var s float64
next:
	for k, v := range m {
		if k != family && !strings.HasPrefix(k, family+"{") {
			continue
		}
		for _, f := range filters {
			if !strings.Contains(k, f) {
				continue next
			}
		}
		s += v
	}
	return s
}

// meanCV is the mean of xs and their coefficient of variation (standard
// deviation over mean; 0 for a zero mean).
func meanCV(xs []float64) (mean, cv float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if mean == 0 {
		return 0, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs))) / mean
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// envDuration is the duration in environment variable name (a Go duration,
// or a number of seconds), else def.
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	t.Fatalf("%s=%q: want a duration (60s) or a number of seconds", name, v)
	return 0
}

// envInt is the integer in environment variable name, else def.
func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// mib formats bytes as MiB with one decimal.
func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// logFlowChanges logs the daemon's flow state changes and stuck detector
// stages (its "flow state changed" and "stuck detector" log lines), at
// most max of them.
func logFlowChanges(t testing.TB, d *daemon, max int) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(d.log.String(), "\n") {
		if !strings.Contains(l, "flow state changed") && !strings.Contains(l, "stuck detector") {
			continue
		}
		if n++; n > max {
			t.Logf("  ... (more)")
			return
		}
		t.Logf("  %s", l)
	}
}
