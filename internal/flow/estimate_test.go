package flow_test

import (
	"sync"
	"testing"

	"github.com/weir-io/weir/internal/flow"
)

func TestEstimatorColdUntilMinSamples(t *testing.T) {
	e := flow.NewEstimator(16)
	for i := range flow.DefaultMinSamples - 1 {
		e.Observe(1000, 2000)
		if r := e.Ratio(); r != flow.DefaultColdRatio {
			t.Fatalf("after %d samples Ratio = %v, want the cold ratio %v", i+1, r, flow.DefaultColdRatio)
		}
	}
	if got := e.Estimate(1000); got != 1000*flow.DefaultColdRatio {
		t.Fatalf("cold Estimate(1000) = %d", got)
	}
	e.Observe(1000, 2000)
	if r := e.Ratio(); r != 2 {
		t.Fatalf("after %d samples Ratio = %v, want 2", flow.DefaultMinSamples, r)
	}
	if got := e.Estimate(1000); got != 2000 {
		t.Fatalf("Estimate(1000) = %d, want 2000", got)
	}
}

// A few hugely compressible records drag the mean far above what typical
// records need; the p95 ignores them.
func TestEstimatorP95NotMean(t *testing.T) {
	e := flow.NewEstimator(1)
	sum := 0.0
	for i := range 1000 {
		arrived, expanded := int64(1000), int64(1500) // ratio 1.5
		if i%50 == 0 {                                // 2 % of the records: a ratio of 1000
			expanded = 1_000_000
		}
		e.Observe(arrived, expanded)
		sum += float64(expanded) / float64(arrived)
	}
	mean := sum / 1000
	if r := e.Ratio(); r != 1.5 {
		t.Fatalf("Ratio = %v, want the p95 1.5 (the mean is %.1f)", r, mean)
	}
	if mean < 10 {
		t.Fatalf("the mean %.1f is not dragged up: the test shows nothing", mean)
	}
	// The p95 is the 95th percentile: with 10 % of the records at a ratio
	// of 3 it is 3.
	e2 := flow.NewEstimator(1)
	for i := range 1000 {
		exp := int64(1500)
		if i%10 == 0 {
			exp = 3000
		}
		e2.Observe(1000, exp)
	}
	if r := e2.Ratio(); r != 3 {
		t.Fatalf("Ratio with 10%% at 3 = %v, want 3", r)
	}
}

// The window slides: old ratios age out.
func TestEstimatorWindow(t *testing.T) {
	e := flow.NewEstimator(1)
	for range flow.DefaultWindow {
		e.Observe(100, 800)
	}
	if r := e.Ratio(); r != 8 {
		t.Fatalf("Ratio = %v, want 8", r)
	}
	for range flow.DefaultWindow {
		e.Observe(100, 200)
	}
	if r := e.Ratio(); r != 2 {
		t.Fatalf("after a full window of ratio 2, Ratio = %v", r)
	}
}

func TestEstimatorFloorAndBatch(t *testing.T) {
	if f := flow.NewEstimator(0).Floor(); f != flow.DefaultRecordSizeEstimate {
		t.Fatalf("default floor %d", f)
	}
	e := flow.NewEstimator(256)
	for range flow.DefaultMinSamples {
		e.Observe(100, 150)
	}
	for _, c := range []struct {
		what string
		got  int64
		want int64
	}{
		{"Estimate(0): the floor", e.Estimate(0), 256},
		{"Estimate(10): 15, below the floor", e.Estimate(10), 256},
		{"Estimate(1000): ratio 1.5", e.Estimate(1000), 1500},
		{"EstimateBatch(10, 1000): ten floors beat the ratio", e.EstimateBatch(10, 1000), 2560},
		{"EstimateBatch(10, 100000): the ratio beats the floors", e.EstimateBatch(10, 100_000), 150_000},
		{"EstimateBatch(1, 1000): as Estimate", e.EstimateBatch(1, 1000), 1500},
		{"EstimateBatch(0, 0)", e.EstimateBatch(0, 0), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	// Samples that say nothing are ignored.
	e2 := flow.NewEstimator(1)
	for range flow.DefaultMinSamples {
		e2.Observe(0, 100)
		e2.Observe(100, 0)
		e2.Observe(-1, -1)
	}
	if r := e2.Ratio(); r != flow.DefaultColdRatio {
		t.Fatalf("Ratio after empty samples = %v", r)
	}
}

func TestEstimatorConcurrent(t *testing.T) {
	e := flow.NewEstimator(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				e.Observe(100, int64(100+i%300))
				_ = e.Estimate(int64(i))
			}
		})
	}
	wg.Wait()
	if r := e.Ratio(); r < 1 || r > 4 {
		t.Fatalf("Ratio %v", r)
	}
}
