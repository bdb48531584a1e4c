package wab

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// BenchmarkBareFdatasync measures the floor under a Durable ack on this
// disk: append 4 KiB and fdatasync, with the file growing on every write
// or written into a region reserved in advance with fallocate.
func BenchmarkBareFdatasync(b *testing.B) {
	for _, prealloc := range []bool{false, true} {
		name := "append"
		if prealloc {
			name = "preallocated"
		}
		b.Run(name, func(b *testing.B) {
			f, err := vfs.OS.Create(filepath.Join(b.TempDir(), "f"), 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if prealloc {
				if err := f.Preallocate(0, int64(b.N+1)*4096); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 4096)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "syncs/s")
		})
	}
}

// BenchmarkFlusher measures records/s through Submit → Done with 256-byte
// records, one record per request, for each tier and several concurrent
// submitters that each wait for their ack before the next record.
func BenchmarkFlusher(b *testing.B) {
	payload := make([]byte, 256)
	for _, tier := range []Durability{Durable, Buffered} {
		for _, submitters := range []int{1, 16, 64} {
			tierName := map[Durability]string{Durable: "durable", Buffered: "buffered"}[tier]
			b.Run(fmt.Sprintf("%s/submitters=%d", tierName, submitters), func(b *testing.B) {
				o := Options{Dir: b.TempDir(), Shards: 1, Logger: quiet, SegmentMaxAge: -1}
				l, err := Open(context.Background(), o)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var next sync.WaitGroup
				per := (b.N + submitters - 1) / submitters
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				start := time.Now()
				for range submitters {
					next.Add(1)
					go func() {
						defer next.Done()
						done := make(chan error, 1)
						req := &Request{Durability: tier, Payloads: [][]byte{payload}, Done: func(err error) { done <- err }}
						for range per {
							if err := l.Submit(ctx, 0, req, time.Minute); err != nil {
								b.Error(err)
								return
							}
							if err := <-done; err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				next.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(per*submitters)/elapsed.Seconds(), "records/s")
				if err := l.Close(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
