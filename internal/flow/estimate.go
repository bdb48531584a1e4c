package flow

import (
	"math"
	"slices"
	"sync"
)

// Defaults of an Estimator.
const (
	// DefaultColdRatio is the expansion ratio assumed until MinSamples
	// samples exist: conservative, so a cold start over-reserves rather
	// than overruns.
	DefaultColdRatio = 4.0
	// DefaultMinSamples is how many samples the p95 needs before it is
	// trusted.
	DefaultMinSamples = 64
	// DefaultWindow is how many recent samples the p95 is taken over.
	DefaultWindow = 1024
	// DefaultRecordSizeEstimate is the cold-start seed and floor of a
	// record's estimated size (the record_size_estimate knob).
	DefaultRecordSizeEstimate = 256
	// recomputeEvery: the p95 is recomputed after this many new samples.
	recomputeEvery = 64
)

// Estimator estimates how many bytes a record occupies once it is held in
// memory (decompressed, decoded, copied) from the size it arrives with.
// It keeps the last DefaultWindow expansion ratios (expanded ÷ arrived)
// and uses their 95th percentile — not the mean, which a few highly
// compressible records would drag up and so over-reserve — or
// DefaultColdRatio until DefaultMinSamples samples exist. No estimate is
// below the floor (record_size_estimate), which is also the seed.
//
// Safe for concurrent use.
type Estimator struct {
	floor int64

	mu      sync.Mutex
	ring    []float64
	next    int
	pending int     // samples since the last recompute
	p95     float64 // 0 until MinSamples
}

// NewEstimator makes an estimator with the given floor (≤ 0 takes
// DefaultRecordSizeEstimate).
func NewEstimator(floor int64) *Estimator {
	if floor <= 0 {
		floor = DefaultRecordSizeEstimate
	}
	return &Estimator{floor: floor, ring: make([]float64, 0, DefaultWindow)}
}

// Observe records that arrived bytes became expanded bytes in memory.
func (e *Estimator) Observe(arrived, expanded int64) {
	if arrived <= 0 || expanded <= 0 {
		return
	}
	r := float64(expanded) / float64(arrived)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ring) < cap(e.ring) {
		e.ring = append(e.ring, r)
	} else {
		e.ring[e.next] = r
		e.next = (e.next + 1) % len(e.ring)
	}
	e.pending++
	if len(e.ring) >= DefaultMinSamples && (e.p95 == 0 || e.pending >= recomputeEvery) {
		e.recompute()
	}
}

func (e *Estimator) recompute() {
	s := slices.Clone(e.ring)
	slices.Sort(s)
	i := int(math.Ceil(0.95*float64(len(s)))) - 1
	e.p95 = s[max(i, 0)]
	e.pending = 0
}

// Ratio is the expansion ratio in use: the p95 of the window, or
// DefaultColdRatio while there are too few samples.
func (e *Estimator) Ratio() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p95 == 0 {
		return DefaultColdRatio
	}
	return e.p95
}

// Estimate is the bytes to reserve for a record that arrived with size
// bytes: size × Ratio, at least the floor.
func (e *Estimator) Estimate(size int64) int64 {
	n := int64(math.Ceil(float64(size) * e.Ratio()))
	return max(n, e.floor)
}

// EstimateBatch is the bytes to reserve for n records that arrived with
// size bytes in all: size × Ratio, at least n × the floor.
func (e *Estimator) EstimateBatch(n int, size int64) int64 {
	b := int64(math.Ceil(float64(size) * e.Ratio()))
	return max(b, int64(n)*e.floor)
}

// Floor is the smallest estimate (record_size_estimate).
func (e *Estimator) Floor() int64 { return e.floor }
