package wab

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestDoneIsTheLastUseOfTheBytes: a request's Payloads and Metas are not
// read after its Done was called (the documented contract a submitter
// relies on to reuse them; the socket server recycles its frame buffers on
// it). Every Done here overwrites its request's bytes at once, and what
// lands on disk must still be what was submitted, for both tiers mixed in
// one batch.
func TestDoneIsTheLastUseOfTheBytes(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.BatchDeadline = 2 * time.Millisecond
	l := mustOpen(t, o)
	const submitters, per = 4, 50
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				p := []byte(fmt.Sprintf("payload-%d-%03d", s, i))
				m := []byte(fmt.Sprintf("meta-%d-%03d", s, i))
				d := Durable
				if i%2 == 1 {
					d = Buffered
				}
				done := make(chan error, 1)
				req := &Request{Durability: d, Payloads: [][]byte{p}, Metas: [][]byte{m}, Received: 1, Done: func(err error) {
					for j := range p {
						p[j] = 'X'
					}
					for j := range m {
						m[j] = 'X'
					}
					done <- err
				}}
				if err := l.Submit(context.Background(), 0, req, time.Second); err != nil {
					t.Error(err)
					return
				}
				if err := <-done; err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mustClose(t, l)
	recs := readAllSealed(t, nil, dir)
	if len(recs) != submitters*per {
		t.Fatalf("%d records on disk, want %d", len(recs), submitters*per)
	}
	for _, r := range recs {
		var s, i int
		if _, err := fmt.Sscanf(r.Payload, "payload-%d-%03d", &s, &i); err != nil || r.Meta != fmt.Sprintf("meta-%d-%03d", s, i) {
			t.Fatalf("record on disk %q / %q: bytes changed after Done were written", r.Payload, r.Meta)
		}
	}
}
