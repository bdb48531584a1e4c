package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

var recs = enginetest.Records

func TestWABGateWritesDurablyWithOrigins(t *testing.T) {
	w := enginetest.OpenWAB(t, 3)
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{MaxRequestRecords: 7, MaxRequestBytes: 600})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var all []source.Record
	for _, src := range []string{"a", "b", "c", "d"} {
		batch := recs(src, 0, 50)
		// Mix sources within a Write too.
		batch = append(batch, recs(src+"x", 0, 3)...)
		if err := g.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	stored := w.Records(t)
	if len(stored) != len(all) {
		t.Fatalf("stored %d records, wrote %d", len(stored), len(all))
	}
	want := map[string]source.Record{}
	for _, r := range all {
		want[string(r.Payload)] = r
	}
	lastIdx := map[string]int{}
	for _, s := range stored {
		r, ok := want[s.Payload]
		if !ok || r.ID != s.ID || r.Source != s.Source {
			t.Fatalf("stored %+v, want %+v", s, r)
		}
		// Each source's records keep their order (one shard per source).
		var idx int
		fmt.Sscanf(s.Payload[strings.LastIndexByte(s.Payload, '-')+1:], "%d", &idx)
		if prev, ok := lastIdx[s.Source]; ok && idx != prev+1 {
			t.Fatalf("source %s: record %d after %d", s.Source, idx, prev)
		}
		lastIdx[s.Source] = idx
	}
}

func TestWABGateRefusesOversizedRecordWholly(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{MaxRecordBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	batch := recs("a", 0, 5)
	batch[3].Payload = make([]byte, 101)
	err = g.Write(context.Background(), batch)
	if !errors.Is(err, wab.ErrRecordTooLarge) || !errors.Is(err, engine.ErrGate) {
		t.Fatalf("err = %v, want ErrGate and ErrRecordTooLarge", err)
	}
	if got := w.Records(t); len(got) != 0 {
		t.Fatalf("%d records written, want none", len(got))
	}
}

func TestWABGateClosedLog(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	g := w.Gate(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	err := g.Write(context.Background(), recs("a", 0, 2))
	if !errors.Is(err, wab.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestWABGateCancelledContext(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	g := w.Gate(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Write(ctx, recs("a", 0, 2)); err == nil {
		// A queue with room accepts at once and the flusher may finish
		// before Write looks at ctx; both outcomes are allowed, but an
		// error must be the context's.
		return
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// laneRecorder is a rejection lane that keeps what it is given, or fails
// with err; gateCounts counts GateQuarantined by code.
type laneRecorder struct {
	err  error
	mu   sync.Mutex
	recs []lane.Rejected
}

func (l *laneRecorder) Reject(_ context.Context, qs []lane.Rejected) error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, qs...)
	return nil
}

// waitFor waits up to 5s for the lane to hold n records and returns what
// it holds then.
func (l *laneRecorder) waitFor(n int) []lane.Rejected {
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		got := slices.Clone(l.recs)
		l.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type gateCounts map[record.Code]int

func (c gateCounts) GateQuarantined(code record.Code, n int) { c[code] += n }

// TestWABGateQuarantinesWhatTheBufferCannotHold: a record the buffer
// cannot hold — its payload over MaxRecordBytes, or its key and headers
// over wab.MaxMetaBytes — goes to the rejection lane with code oversize,
// stage gate, and the Write stores the others and returns nil, so that a
// source may move past it.
func TestWABGateQuarantinesWhatTheBufferCannotHold(t *testing.T) {
	bigPayload := func(r *source.Record) { r.Payload = bytes.Repeat([]byte("p"), 101) }
	bigHeaders := func(r *source.Record) {
		r.Key = []byte("k")
		r.Headers = []sink.Header{{Key: "big", Value: make([]byte, wab.MaxMetaBytes)}}
	}
	for _, tc := range []struct {
		name string
		big  map[int]func(*source.Record)
		why  []string
	}{
		{"payload", map[int]func(*source.Record){3: bigPayload}, []string{"payload of 101 bytes, limit 100"}},
		{"key and headers", map[int]func(*source.Record){0: bigHeaders}, []string{"metadata (key and headers)"}},
		// The buffer could hold it, but a dead letter of it could not
		// add its rejection (record.RejectionRoom).
		{"key and headers leaving no room for a rejection", map[int]func(*source.Record){2: func(r *source.Record) {
			r.Headers = []sink.Header{{Key: "big", Value: make([]byte, wab.MaxMetaBytes-record.RejectionRoom/2)}}
		}}, []string{"metadata (key and headers)"}},
		{"both, and every record", map[int]func(*source.Record){0: bigPayload, 1: bigHeaders, 2: bigPayload, 3: bigPayload, 4: bigHeaders},
			[]string{"payload", "metadata", "payload", "payload", "metadata"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := enginetest.OpenWAB(t, 2)
			lane, counts := &laneRecorder{}, gateCounts{}
			g, err := engine.NewWABGate(w.Log, engine.GateOptions{MaxRecordBytes: 100, Quarantine: lane, Observer: counts})
			if err != nil {
				t.Fatal(err)
			}
			batch := recs("a", 0, 5)
			for i := range batch {
				batch[i].OriginPos = fmt.Sprintf("t/0@%d", i)
			}
			for i, f := range tc.big {
				f(&batch[i])
			}
			if err := g.Write(context.Background(), batch); err != nil {
				t.Fatalf("Write: %v", err)
			}
			var want []source.Record
			for i := range batch {
				if tc.big[i] == nil {
					want = append(want, batch[i])
				}
			}
			stored := w.Records(t)
			if len(stored) != len(want) {
				t.Fatalf("buffer holds %d records, want %d", len(stored), len(want))
			}
			for i, s := range stored {
				if s.ID != want[i].ID || s.Payload != string(want[i].Payload) {
					t.Errorf("buffer record %d: %s, want %s", i, s.Payload, want[i].Payload)
				}
			}
			if len(lane.recs) != len(tc.big) || counts[record.CodeOversize] != len(tc.big) || len(counts) != 1 {
				t.Fatalf("lane got %d records, counted %v; want %d oversize", len(lane.recs), counts, len(tc.big))
			}
			for i, q := range lane.recs {
				r := batch[slices.Sorted(maps.Keys(tc.big))[i]]
				rej := q.Reject
				if q.Sink != "buffer" || q.Pos != 0 || q.OriginPos != r.OriginPos || q.Record.ID != r.ID || !bytes.Equal(q.Record.Payload, r.Payload) ||
					!bytes.Equal(q.Record.Key, r.Key) || len(q.Record.Headers) != len(r.Headers) || q.Record.Source != r.Source {
					t.Errorf("lane record %d: %+v, want %s's record", i, q, r.Payload[:min(len(r.Payload), 10)])
				}
				if rej.Code != record.CodeOversize || rej.Stage != record.StageGate || rej.Component != "buffer" ||
					rej.Attempts != 1 || rej.FirstSeen == 0 || !strings.Contains(rej.Error, tc.why[i]) {
					t.Errorf("lane record %d: rejection %+v, want oversize at the gate with %q", i, rej, tc.why[i])
				}
			}
		})
	}
}

// TestWABGateFailsWhenTheLaneFails: a lane that cannot take an oversized
// record fails the Write, and nothing of it is written: the source does
// not move past a record that is nowhere, and writes the batch again.
func TestWABGateFailsWhenTheLaneFails(t *testing.T) {
	w := enginetest.OpenWAB(t, 1)
	boom := errors.New("lane down")
	counts := gateCounts{}
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{MaxRecordBytes: 100, Quarantine: &laneRecorder{err: boom}, Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	batch := recs("a", 0, 5)
	batch[2].Payload = make([]byte, 101)
	err = g.Write(context.Background(), batch)
	if !errors.Is(err, boom) || !errors.Is(err, engine.ErrGate) {
		t.Fatalf("err = %v, want ErrGate and the lane's error", err)
	}
	if got := w.Records(t); len(got) != 0 {
		t.Fatalf("%d records written, want none", len(got))
	}
	if len(counts) != 0 {
		t.Fatalf("counted %v, want nothing", counts)
	}
}

// TestWABGateOversizeIntoQuarantineFiles: with the quarantine writer the
// daemon uses, the rejected record lands in the lane's NDJSON files with
// its rejection; a full lane fails the Write.
func TestWABGateOversizeIntoQuarantineFiles(t *testing.T) {
	dir := t.TempDir()
	w := enginetest.OpenWAB(t, 1)
	lane := quarantine.NewOnDemand(quarantine.Options{Dir: dir, MaxBytes: 4096})
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{MaxRecordBytes: 1000, Quarantine: lane})
	if err != nil {
		t.Fatal(err)
	}
	batch := recs("a", 0, 3)
	batch[1].Payload = bytes.Repeat([]byte("x"), 1001)
	batch[1].OriginPos = "orders/2@41"
	if err := g.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	got, err := quarantine.ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Record.Payload != string(batch[1].Payload) || got[0].Record.ID != batch[1].ID.String() ||
		got[0].ReasonCode != "oversize" || got[0].Stage != "gate" || got[0].Sink != "buffer" || got[0].OriginPos != "orders/2@41" {
		t.Fatalf("lane holds %+v", got)
	}
	// The lane is bounded: two more such records do not fit.
	batch = recs("b", 0, 3)
	batch[0].Payload = bytes.Repeat([]byte("y"), 1500)
	batch[2].Payload = bytes.Repeat([]byte("z"), 1500)
	if err := g.Write(context.Background(), batch); !errors.Is(err, quarantine.ErrFull) || !errors.Is(err, engine.ErrGate) {
		t.Fatalf("Write with a full lane: %v, want ErrGate and quarantine.ErrFull", err)
	}
	if stored := w.Records(t); len(stored) != 2 {
		t.Fatalf("buffer holds %d records, want the first Write's 2", len(stored))
	}
}

// TestWABGateSettlesAfterCancel: a Write whose context ends while its
// records are being synced waits for them (briefly) and reports them
// durable, so a source stopping cleanly commits the position of a batch
// that is in the buffer instead of reading it again.
func TestWABGateSettlesAfterCancel(t *testing.T) {
	dir := t.TempDir()
	efs := errorfs.New(vfs.OS)
	syncing := make(chan struct{}, 1)
	release := make(chan struct{})
	var armed atomic.Bool
	efs.SetHook(func(e errorfs.Event) {
		if e.Op == errorfs.OpSync && strings.HasSuffix(e.Path, ".wab") && armed.CompareAndSwap(true, false) {
			syncing <- struct{}{}
			<-release
		}
	})
	l, err := wab.Open(context.Background(), wab.Options{FS: efs, Dir: dir, Shards: 1, PreallocateBytes: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w := &enginetest.WAB{Dir: dir, Log: l}
	g := w.Gate(t)
	armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	written := make(chan error, 1)
	go func() { written <- g.Write(ctx, recs("a", 0, 3)) }()
	<-syncing // the batch is written; its fdatasync is under way
	cancel()
	// Release the sync only once Write has taken the cancel and is waiting
	// in settle: released earlier, Write might see the ack first and
	// return without ever settling.
	waitGoroutineIn(t, "engine.(*WABGate).settle")
	close(release)
	if err := <-written; err != nil {
		t.Fatalf("Write = %v after its records were synced, want nil", err)
	}
	if got := w.Records(t); len(got) != 3 {
		t.Fatalf("%d records in the buffer, want 3", len(got))
	}
}

// waitGoroutineIn waits until some goroutine's stack holds fn.
func waitGoroutineIn(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine in %s after 10s", fn)
		}
		time.Sleep(time.Millisecond)
	}
}
