package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/sink"
)

// healthObserver keeps the last health reported for each secondary.
type healthObserver struct {
	engine.NopObserver
	mu   sync.Mutex
	last map[string]sink.HealthState
}

func (o *healthObserver) SecondaryHealth(name string, h sink.Health) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last[name] = h.State
}

func (o *healthObserver) state(name string) (sink.HealthState, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.last[name]
	return s, ok
}

// Each secondary's health is polled every HealthInterval and reported
// under its name, following the sink as it goes down and comes back.
func TestFanoutReportsSecondaryHealth(t *testing.T) {
	rawDir := t.TempDir()
	up, down := newMemSink("up"), newMemSink("flaky")
	down.down.Store(true)
	obs := &healthObserver{last: map[string]sink.HealthState{}}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: openRaw(t, rawDir), Store: openStore(t, rawDir), Observer: obs, HealthInterval: 10 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: up}, {Sink: down}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wait := func(name string, want sink.HealthState) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if s, ok := obs.state(name); ok && s == want {
				return
			}
			if time.Now().After(deadline) {
				s, ok := obs.state(name)
				t.Fatalf("%s: health %v (reported: %v), want %v", name, s, ok, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("up", sink.Healthy)
	wait("flaky", sink.Down)
	down.down.Store(false)
	wait("flaky", sink.Healthy)
	down.down.Store(true)
	wait("flaky", sink.Down)
}
