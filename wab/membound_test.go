package wab

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

// keptBound is keptBufBytes written out, so the test builds without it.
const keptBound = 2 << 20

// TestEncodeBufferBounded: after a batch of large records (16 MiB, 64 KiB
// each, one request) and after a single 4 MiB record, the encode buffer a
// shard keeps is at most 2 MiB (docs/flow_control.md, "Buffers outside
// records"), and every record is in the segment, in order. Before the
// flusher wrote in chunks it kept the whole batch's frames.
func TestEncodeBufferBounded(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.BatchMaxRecords = 1024
	l := mustOpen(t, o)
	var want []string
	var big [][]byte
	for i := range 256 {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", 64<<10)
		big = append(big, []byte(p))
		want = append(want, p)
	}
	if err := submit(t, l, 0, Durable, 1, big...); err != nil {
		t.Fatal(err)
	}
	if c := cap(l.shards[0].buf); c > keptBound {
		t.Errorf("after a 16 MiB batch the shard keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	one := strings.Repeat("y", 4<<20)
	want = append(want, one)
	if err := submit(t, l, 0, Durable, 2, []byte(one)); err != nil {
		t.Fatal(err)
	}
	if c := cap(l.shards[0].buf); c > keptBound {
		t.Errorf("after a 4 MiB record the shard keeps an encode buffer of %d bytes (bound %d)", c, keptBound)
	}
	want = append(want, "small")
	if err := submit(t, l, 0, Durable, 3, []byte("small")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	got := payloads(readAllSealed(t, nil, dir))
	if len(got) != len(want) {
		t.Fatalf("read %d records back, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
}

// TestFlusherLetsGoOfAnsweredRequests: once a request's Done has been
// called, the flusher holds no reference to it or its payloads, for each
// durability — even while it goes on sealing the segment the batch filled.
// The caller gives back the memory the payloads were reserved with when
// Done is called (a socket frame's reservation, docs/flow_control.md), so
// bytes the flusher kept reachable after it were held without one: the
// batch used to keep every request of it until the seal after it was done
// (its fdatasync, truncate, rename and directory sync).
func TestFlusherLetsGoOfAnsweredRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Durability
	}{{"buffered", Buffered}, {"durable", Durable}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			efs := errorfs.New(vfs.OS)
			sealing, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			efs.SetHook(func(e errorfs.Event) {
				// The seal's rename to .wab.sealed: hold the flusher there.
				if e.Op == errorfs.OpRename && e.Err == nil && strings.HasSuffix(e.Path, ".wab") {
					once.Do(func() {
						close(sealing)
						<-release
					})
				}
			})
			o := testOpts(dir)
			o.FS = efs
			o.SegmentMaxBytes = 1 << 20 // the one request fills it: sealed after its batch
			l := mustOpen(t, o)
			defer mustClose(t, l)
			defer close(release)
			payload, done := submitWeak(t, l, tc.d, 1<<20-64<<10)
			if err := waitDone(t, done); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sealing:
			case <-time.After(10 * time.Second):
				t.Fatal("the segment was not sealed after the batch")
			}
			// The flusher is in the seal now.
			for range 3 {
				runtime.GC()
			}
			if payload.Value() != nil {
				t.Error("the flusher still holds an answered request's payload while it seals the segment")
			}
		})
	}
}

// submitWeak submits one request of an n-byte payload and returns a weak
// pointer to the payload and the channel its Done sends on: nothing of
// the request stays reachable from the caller.
func submitWeak(t *testing.T, l *Log, d Durability, n int) (weak.Pointer[byte], <-chan error) {
	t.Helper()
	p := make([]byte, n)
	done := make(chan error, 1)
	req := &Request{Durability: d, Payloads: [][]byte{p}, Received: 1, Done: func(err error) { done <- err }}
	if err := l.Submit(context.Background(), 0, req, time.Second); err != nil {
		t.Fatal(err)
	}
	return weak.Make(&p[0]), done
}
