package systest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// TestDurableAckAfterFdatasync: through the real binary (the faultinject
// build), every fdatasync of an open segment is held for syncDelay. A
// Durable ack may only be written once the fdatasync that covers its
// record has returned, and that fdatasync starts after the record reached
// the daemon, so every Durable ack — a lone producer waiting for each, and
// several producers pipelining — must arrive at least syncDelay after its
// push began. Buffered pushes on the same daemon are the control: they do
// not wait for a fdatasync, so most of them must be answered well within
// syncDelay (an ack path that answered Durable pushes before their sync
// would look like that). Speed work on the ack path must keep this green.
func TestDurableAckAfterFdatasync(t *testing.T) {
	const syncDelay = 40 * time.Millisecond
	d := newDaemon(t, "--segment-max-age", "1h")
	d.env = []string{"WEIR_FAULTS=sync:*/shard-*/*.wab:delay=" + syncDelay.String()}
	d.start()
	ctx := ctxTimeout(t, 60*time.Second)

	// pushAll has producers clients each push n records of tier with up to
	// window in flight, and returns every push's time to its answer.
	pushAll := func(name string, producers, n, window int, tier client.Durability) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := client.Dial(ctx, d.socket, client.WithWindow(window))
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close(context.Background())
				for i := range n {
					payload := []byte(fmt.Sprintf("%s-%d-%d", name, p, i))
					t0 := time.Now()
					record := func(err error) {
						el := time.Since(t0)
						if err != nil {
							t.Errorf("%s: push: %v", name, err)
						}
						mu.Lock()
						lat = append(lat, el)
						mu.Unlock()
					}
					if window == 1 {
						record(c.Push(ctx, payload, tier))
						// Let the flusher go idle, so that the next push
						// is not held up behind a sync of its own.
						time.Sleep(syncDelay)
						continue
					}
					if err := c.PushAsync(ctx, [][]byte{payload}, tier, record); err != nil {
						t.Errorf("%s: push: %v", name, err)
						return
					}
				}
				if err := c.Close(ctx); err != nil {
					t.Errorf("%s: close: %v", name, err)
				}
			}()
		}
		wg.Wait()
		return lat
	}
	check := func(name string, lat []time.Duration, want int) {
		t.Helper()
		if len(lat) != want {
			t.Fatalf("%s: %d answers, want %d", name, len(lat), want)
		}
		early := 0
		for _, l := range lat {
			if l < syncDelay {
				early++
			}
		}
		slices.Sort(lat)
		t.Logf("%s: %d Durable acks, fastest %v, median %v", name, len(lat), lat[0], lat[len(lat)/2])
		if early > 0 {
			t.Errorf("%s: %d of %d Durable acks arrived sooner than the %v every fdatasync takes (fastest %v): acked before the fdatasync that covers them returned",
				name, early, len(lat), syncDelay, lat[0])
		}
	}
	check("one producer, each ack awaited", pushAll("serial", 1, 10, 1, client.Durable), 10)
	check("8 producers, 16 in flight each", pushAll("pipelined", 8, 64, 16, client.Durable), 8*64)

	buffered := pushAll("buffered", 4, 64, 16, client.Buffered)
	slices.Sort(buffered)
	if med := buffered[len(buffered)/2]; med >= syncDelay/2 {
		t.Errorf("Buffered median ack %v: the control should not wait for the %v fdatasyncs", med, syncDelay)
	}
	if !strings.Contains(d.log.String(), "fault delayed") {
		t.Fatalf("no fdatasync was delayed:\n%s", tail(d.log.String(), 3000))
	}
	if err := d.stop(20 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
