package source

import (
	"context"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

// waitReturns runs p.Wait(ctx) and reports its result on the channel.
func waitReturns(ctx context.Context, p *Pauser) <-chan error {
	c := make(chan error, 1)
	go func() { c <- p.Wait(ctx) }()
	return c
}

func TestPauserWaitsWhilePaused(t *testing.T) {
	var p Pauser
	var changes []bool
	p.OnChange = func(paused bool) { changes = append(changes, paused) }
	if err := p.Wait(context.Background()); err != nil || p.Paused() {
		t.Fatalf("zero Pauser: Wait = %v, paused %v", err, p.Paused())
	}
	p.Pause()
	p.Pause() // idempotent
	if !p.Paused() {
		t.Fatal("not paused after Pause")
	}
	c := waitReturns(context.Background(), &p)
	select {
	case err := <-c:
		t.Fatalf("Wait returned %v while paused", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.Resume()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("Wait after Resume = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Resume")
	}
	p.Resume() // idempotent
	if p.Paused() {
		t.Fatal("paused after Resume")
	}
	if err := p.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after Resume = %v", err)
	}
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Fatalf("OnChange saw %v, want [true false]: once per change", changes)
	}
}

func TestPauserWaitEndsWithContext(t *testing.T) {
	var p Pauser
	p.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	c := waitReturns(ctx, &p)
	cancel()
	select {
	case err := <-c:
		if err != context.Canceled {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return when its context ended")
	}
}

// Pause and Resume from many goroutines at once: no race, no panic (a
// double close), and the last call decides.
func TestPauserConcurrent(t *testing.T) {
	var p Pauser
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				if i%2 == 0 {
					p.Pause()
				} else {
					p.Resume()
				}
				_ = p.Paused()
			}
		}()
	}
	for range 8 {
		<-done
	}
	p.Resume()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSizes(t *testing.T) {
	recs := []Record{
		{Payload: make([]byte, 100)},
		{Payload: make([]byte, 10), Key: []byte("key"), OriginPos: "t/0@1",
			Headers: []sink.Header{{Key: "h", Value: []byte("vv")}}},
	}
	data, held := Sizes(recs)
	// data: 100 + (10 + 3 + 1 + 2); held adds key and headers again
	// (the gate's metadata) and the origin position.
	if data != 116 || held != 116+6+5 {
		t.Fatalf("Sizes = %d, %d; want 116, 127", data, held)
	}
	if recs[1].Size() != 16 {
		t.Fatalf("Size = %d, want 16", recs[1].Size())
	}
}
