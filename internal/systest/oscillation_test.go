package systest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// oscillationRun is what one daemon of the oscillation test saw.
type oscillationRun struct {
	name        string
	transitions float64            // weir_flow_transitions_total over the run
	changes     map[string]float64 // by "from>to"
	perMinute   float64            // transitions per minute
	ingest      []float64          // records acked per second, each second
	delivered   []float64          // records the secondary committed per second
	refused     int64              // pushes answered Overloaded (the client retries them)
	acked       int64
}

// steadyProducers push 1 KiB Durable records in batches of 32 from n
// connections, each waiting for its answer, until ctx ends; an Overloaded
// refusal is retried by the client after the daemon's hint. With rate > 0
// all of them together push at most rate records a second (a batch every
// n×32/rate seconds each, none made up when late); with 0 as fast as they
// are answered.
func steadyProducers(ctx context.Context, socket string, n int, rate float64, acked, refused *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, socket)
			if err != nil {
				return
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c.Close(cctx)
				cancel()
				refused.Add(int64(c.OverloadRetried()))
			}()
			batch := make([][]byte, 32)
			var tick <-chan time.Time
			if rate > 0 {
				t := time.NewTicker(time.Duration(float64(n*len(batch)) / rate * float64(time.Second)))
				defer t.Stop()
				tick = t.C
			}
			for i := 0; ctx.Err() == nil; i++ {
				if tick != nil {
					select {
					case <-ctx.Done():
						return
					case <-tick:
					}
				}
				for j := range batch {
					r := make([]byte, 1024)
					copy(r, fmt.Sprintf("osc%02d-%08d|", p, i*len(batch)+j))
					batch[j] = r
				}
				err := c.PushBatch(ctx, batch, client.Durable)
				switch {
				case err == nil:
					acked.Add(int64(len(batch)))
				case ctx.Err() != nil || errors.Is(err, client.ErrClosed):
					return
				}
			}
		}()
	}
	return &wg
}

// asyncProducers push 1 KiB Durable records in frames of 32 from n
// connections, each keeping window records in flight, until ctx ends; the
// client retries an Overloaded refusal itself after the daemon's hint
// (counted in refused).
func asyncProducers(ctx context.Context, socket string, n, window int, acked, refused *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, socket, client.WithWindow(window))
			if err != nil {
				return
			}
			for i := 0; ctx.Err() == nil; i++ {
				batch := make([][]byte, 32)
				for j := range batch {
					r := make([]byte, 1024)
					copy(r, fmt.Sprintf("osc%02d-%08d|", p, i*len(batch)+j))
					batch[j] = r
				}
				err := c.PushAsync(ctx, batch, client.Durable, func(err error) {
					if err == nil {
						acked.Add(int64(len(batch)))
					}
				})
				if err != nil {
					break
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Close(cctx)
			cancel()
			refused.Add(int64(c.OverloadRetried()))
		}()
	}
	return &wg
}

// TestOscillation: the write-ahead buffer's fdatasync — the durable stage
// socket ingest waits for — alternates between 150 ms slower and normal
// every 3 s (errorfs alternate=3s), under 16 Durable producers keeping 256
// records of 1 KiB in flight each; one shard, its queue bounded to 4 MiB,
// so a slow phase fills it. Two daemons run side by side on the same
// schedule, one with the default hysteresis (flow.recovery_hold 30s,
// flow.recovery_time 1m), one without (both 0). Each second the ingest
// rate and the drain's commit rate are read; the test reports the state
// transitions per minute and the coefficient of variation of both rates
// for each, and fails if the daemon with hysteresis changes state more
// often than its hold allows (3 + 2 per started 30 s: 7 in the default
// 30 s run, about 4 a minute in a long one), or if neither daemon changed
// state at all (the scenario would test nothing).
// WEIR_OSCILLATION_SECONDS sets the length (default 30).
func TestOscillation(t *testing.T) {
	dur := envDuration(t, "WEIR_OSCILLATION_SECONDS", 30*time.Second)
	// With hysteresis every step down waits flow.recovery_hold (30 s) of
	// calm and steps up are immediate: two steps up at first, then at
	// most a step down and a step up per hold.
	maxTransitions := 3 + 2*math.Ceil(dur.Seconds()/30)
	variants := []struct {
		name  string
		extra []string
	}{
		{"hysteresis", nil},
		{"no hysteresis", []string{"--flow-critical-hold", "0s", "--flow-recovery-hold", "0s", "--flow-recovery-time", "0s"}},
	}
	runs := make([]oscillationRun, len(variants))
	var wg sync.WaitGroup
	ds := make([]*daemon, len(variants))
	for i, v := range variants {
		ds[i] = newDaemon(t, append([]string{"--memory-budget", "64MiB", "--log-level", "info", "--shards", "1",
			"--queue-capacity-bytes", "4MiB"}, v.extra...)...)
		ds[i].env = []string{"WEIR_FAULTS=sync:*.wab:delay=150ms:alternate=3s"}
	}
	for _, d := range ds {
		d.start()
	}
	for i, v := range variants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := ds[i]
			var acked, refused atomic.Int64
			before, err := d.tryScrape()
			if err != nil {
				t.Error(err)
				return
			}
			ingest := d.sampleRate(time.Second, "weir_records_acked_total")
			delivered := d.sampleRate(time.Second, "weir_sink_commit_records_total", `result="ok"`)
			ctx, cancel := context.WithTimeout(context.Background(), dur)
			defer cancel()
			asyncProducers(ctx, d.socket, 16, 256, &acked, &refused).Wait()
			r := oscillationRun{name: v.name, ingest: ingest.finish(), delivered: delivered.finish(),
				refused: refused.Load(), acked: acked.Load()}
			after, err := d.tryScrape()
			if err != nil {
				t.Error(err)
				return
			}
			r.transitions = sum(after, "weir_flow_transitions_total") - sum(before, "weir_flow_transitions_total")
			r.changes = stateTransitions(after)
			r.perMinute = r.transitions * float64(time.Minute) / float64(dur)
			runs[i] = r
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, r := range runs {
		im, icv := meanCV(r.ingest)
		dm, dcv := meanCV(r.delivered)
		t.Logf("%-13s: %.0f transitions (%.1f a minute) %v; ingest %.0f records/s, CV %.2f; sink %.0f records/s, CV %.2f; %d acked, %d refused Overloaded",
			r.name, r.transitions, r.perMinute, r.changes, im, icv, dm, dcv, r.acked, r.refused)
		t.Logf("%-13s: ingest per second %v", r.name, roundAll(r.ingest))
	}
	for i, d := range ds {
		t.Logf("%s: state changes", runs[i].name)
		logFlowChanges(t, d, 8)
	}
	if runs[0].transitions > maxTransitions {
		t.Errorf("with hysteresis the state changed %.0f times in %v (%.1f a minute; bound %.0f)", runs[0].transitions, dur,
			runs[0].perMinute, maxTransitions)
	}
	if runs[0].transitions == 0 && runs[1].transitions == 0 {
		t.Errorf("neither daemon changed state: the slow phases put no pressure on them")
	}
	for i, d := range ds {
		if runs[i].acked == 0 {
			t.Errorf("%s: nothing acked\n%s", runs[i].name, tail(d.log.String(), 3000))
		}
	}
}

func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}
