package flow

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
)

// FallbackLimit is the budget when neither GOMEMLIMIT nor a cgroup memory
// limit says how much memory the process may use.
const FallbackLimit = 512 << 20

// cgroupMemoryMax is the cgroup v2 limit of the process's cgroup.
var cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// DefaultLimit derives the budget: half of the Go memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit) or of the cgroup's memory.max,
// whichever is set and smaller, else FallbackLimit. Half, because the
// budget counts records, and the runtime, the garbage collector's headroom,
// encode buffers and goroutine stacks need the rest. from names the
// source, for the start-up log.
func DefaultLimit() (limit int64, from string) {
	limit, from, ok := ProcessLimit()
	if !ok {
		return FallbackLimit, "fallback"
	}
	return limit / 2, "half of " + from
}

// ProcessLimit is the memory the process may use: the Go memory limit
// (GOMEMLIMIT) or the cgroup's memory.max, whichever is set and smaller;
// ok is false when neither is.
func ProcessLimit() (limit int64, from string, ok bool) {
	limit, from = math.MaxInt64, ""
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 && l != goLimitSet.Load() {
		limit, from = l, "GOMEMLIMIT"
	}
	if b, err := os.ReadFile(cgroupMemoryMax); err == nil {
		s := strings.TrimSpace(string(b))
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < limit {
			limit, from = n, "cgroup memory.max"
		}
	}
	return limit, from, from != ""
}

// GoLimitOverhead is what SetGoMemoryLimit allows the Go runtime beyond
// GoLimitFactor × the budget: the buffers of constant size outside
// records, goroutine stacks and the runtime's own structures. With the
// resident pages of the binary itself (about 40 MiB, which the Go limit
// does not count) it makes the fixed overhead of docs/flow_control.md,
// "The memory bound".
const GoLimitOverhead = 16 << 20

// GoLimitFactor is the Go memory limit's factor on the budget: the
// records (1 ×), the broker clients' prefetch outside the budget (at most
// a quarter, staged subscription) and a little room for the collector.
const GoLimitFactor = 1.3

// SetGoMemoryLimit gives the Go runtime a soft memory limit when the
// process has none (GOMEMLIMIT unset): GoLimitFactor × the budget plus
// GoLimitOverhead, or the cgroup's memory.max when that is smaller.
// Without one the garbage collector lets the heap grow to twice what is
// live before it collects, whatever the budget: a node holding its whole
// budget would reach twice it. With it, the heap stays near what the
// budget and the runtime need (docs/flow_control.md, "The memory bound").
// It returns the limit set, or 0 when GOMEMLIMIT was already set (and is
// left alone). `weir serve` calls it once at start; it changes the whole
// process.
func SetGoMemoryLimit(budget int64) int64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return 0
	}
	limit := GoMemoryLimit(budget)
	if l, _, ok := ProcessLimit(); ok && l < limit {
		limit = l
	}
	goLimitSet.Store(limit)
	debug.SetMemoryLimit(limit)
	return limit
}

// GoMemoryLimit is the Go memory limit SetGoMemoryLimit derives from a
// budget: GoLimitFactor × budget + GoLimitOverhead.
func GoMemoryLimit(budget int64) int64 {
	return int64(GoLimitFactor*float64(budget)) + GoLimitOverhead
}

// goLimitSet is the Go memory limit SetGoMemoryLimit set: derived from
// the budget, it is not a limit the budget may be derived from in turn.
var goLimitSet atomic.Int64
