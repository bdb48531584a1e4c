package statuspage

import (
	"testing"

	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/metrics"
)

// BenchmarkSampler is what the page costs the daemon, on a registry as
// the daemon's (every series of a node with the HTTP door): the gather it
// makes every second (gather; tick adds the reading of the registry),
// and the figures a refresh builds from a fresh reading (snapshot; a
// refresh more than 250 ms after a tick adds a gather).
func BenchmarkSampler(b *testing.B) {
	m, reg := metrics.New(metrics.Config{Shards: 2, Sink: "file", DeadLetterMaxBytes: 1 << 30})
	m.Flow(flow.DefaultThresholds())
	m.Topology()
	m.HTTP([]string{"/v1/records"}, []int{200}, []string{"decode"})
	p, err := New(Options{Gatherer: reg, Health: fakeHealth{}, Logs: NewLogRing(50)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("gather", func(b *testing.B) {
		for b.Loop() {
			reg.Gather()
		}
	})
	b.Run("tick", func(b *testing.B) {
		for b.Loop() {
			p.tick()
		}
	})
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			p.Snapshot()
		}
	})
}
