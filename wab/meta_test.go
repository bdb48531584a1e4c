package wab

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRequestMetas: a request's per-record metas are stored with the
// records and read back; a mismatched or oversized meta is refused.
func TestRequestMetas(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOpts(dir))
	done := make(chan error, 1)
	req := &Request{
		Durability: Durable,
		Payloads:   [][]byte{[]byte("a"), []byte("b")},
		Metas:      [][]byte{[]byte("meta-a"), nil},
		Received:   42,
		Done:       func(err error) { done <- err },
	}
	if err := l.Submit(context.Background(), 0, req, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	bad := []*Request{
		{Payloads: [][]byte{[]byte("x")}, Metas: [][]byte{}, Done: func(error) {}},
		{Payloads: [][]byte{[]byte("x")}, Metas: [][]byte{make([]byte, MaxMetaBytes+1)}, Done: func(error) {}},
	}
	for i, r := range bad {
		if err := l.Submit(context.Background(), 0, r, time.Second); err == nil {
			t.Errorf("bad request %d accepted", i)
		} else if i == 1 && !errors.Is(err, ErrRecordTooLarge) {
			t.Errorf("oversized meta: %v, want ErrRecordTooLarge", err)
		}
	}
	mustClose(t, l)
	recs := readAllSealed(t, nil, dir)
	if len(recs) != 2 || recs[0].Meta != "meta-a" || recs[1].Meta != "" || recs[0].Payload != "a" {
		t.Fatalf("read back %+v", recs)
	}
}
