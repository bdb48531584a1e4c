package enginetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// DrainToFileRaw closes the buffer, delivers every record in it through
// a real drain to a file sink in raw mode (the NDJSON primary raw) in a
// temporary directory, and returns what a raw reader — what recovery
// reads secondaries from — reads back, in position order. It is how a
// source test follows a record from the source to a sink and back.
func (w *WAB) DrainToFileRaw(t testing.TB) []sink.Record {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("close wab: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := t.TempDir()
	fsink, err := filesink.New(ctx, filesink.Options{Dir: out, Positions: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := drain.New(drain.Options{
		FS: vfs.OS, WABDir: w.Dir, Source: sealedLister(w.Dir), Sink: fsink,
		PollInterval: 5 * time.Millisecond, HealthInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	for {
		refs, err := wab.ListSealed(nil, w.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := fsink.Close(); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the drain did not deliver every segment in time")
	}
	r, err := filesink.OpenRawReader(vfs.OS, out)
	if err != nil {
		t.Fatal(err)
	}
	var recs []sink.Record
	for from := uint64(0); ; {
		got, err := r.ReadFrom(ctx, from, 1024, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return recs
		}
		for _, p := range got {
			recs = append(recs, p.Record)
		}
		from = got[len(got)-1].Pos + 1
	}
}

// sealedLister is a drain.Source over a closed buffer's directory.
type sealedLister string

func (s sealedLister) Sealed() ([]wab.SegmentRef, error) { return wab.ListSealed(nil, string(s)) }
func (s sealedLister) Notify() <-chan struct{}           { return nil }
