package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

func recs(src string, from, n int) []source.Record {
	out := make([]source.Record, n)
	for i := range out {
		p := []byte(fmt.Sprintf("%s-%06d", src, from+i))
		out[i] = source.Record{ID: source.ID([]byte(src), source.Uint64(uint64(from+i)), p), Payload: p, Source: src}
	}
	return out
}

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
