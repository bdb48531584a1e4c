package flow_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/flow"
)

// The admission cost on the socket path: one TryAcquire when a frame
// arrives and one Release when it is acknowledged. Run with
//
//	go test -run '^$' -bench Budget -cpu 1,2,4 ./internal/flow/
//
// "observed" adds an ObserveWait hook (the metrics' histogram is about as
// cheap as the atomic add here).
func BenchmarkBudget(b *testing.B) {
	var observed atomic.Int64
	for _, bc := range []struct {
		name    string
		observe func(time.Duration)
	}{
		{"plain", nil},
		{"observed", func(d time.Duration) { observed.Add(int64(d)) }},
	} {
		newBudget := func() *flow.Budget {
			return flow.NewBudget(flow.BudgetOptions{Limit: 1 << 40, WarmupFraction: 1, ObserveWait: bc.observe})
		}
		b.Run(bc.name+"/TryAcquire+Release", func(b *testing.B) {
			bu := newBudget()
			defer bu.Close()
			for b.Loop() {
				if ok, _ := bu.TryAcquire(4096); !ok {
					b.Fatal("refused")
				}
				bu.Release(4096)
			}
		})
		b.Run(bc.name+"/TryAcquire+Release/parallel", func(b *testing.B) {
			bu := newBudget()
			defer bu.Close()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if ok, _ := bu.TryAcquire(4096); !ok {
						b.Fatal("refused")
					}
					bu.Release(4096)
				}
			})
		})
		b.Run(bc.name+"/Reserve+Release", func(b *testing.B) {
			bu := newBudget()
			defer bu.Close()
			for b.Loop() {
				tk, err := bu.Reserve(4096)
				if err != nil {
					b.Fatal(err)
				}
				<-tk.C
				tk.Release()
			}
		})
		b.Run(bc.name+"/Reserve+Release/parallel", func(b *testing.B) {
			bu := newBudget()
			defer bu.Close()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk, err := bu.Reserve(4096)
					if err != nil {
						b.Fatal(err)
					}
					<-tk.C
					tk.Release()
				}
			})
		})
	}
}
