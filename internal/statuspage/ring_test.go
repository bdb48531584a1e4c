package statuspage

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		cap    int
		pushes int
		want   []int
	}{
		{3, 0, nil},
		{3, 2, []int{0, 1}},
		{3, 3, []int{0, 1, 2}},
		{3, 4, []int{1, 2, 3}},
		{3, 7, []int{4, 5, 6}},
		{1, 5, []int{4}},
		{0, 2, []int{1}}, // at least one
	}
	for _, tt := range tests {
		r := NewRing[int](tt.cap)
		for i := range tt.pushes {
			r.Push(i)
		}
		if got := r.Items(); !slices.Equal(got, tt.want) {
			t.Errorf("cap %d after %d pushes: %v, want %v", tt.cap, tt.pushes, got, tt.want)
		}
		if r.Len() != len(tt.want) {
			t.Errorf("cap %d after %d pushes: Len %d, want %d", tt.cap, tt.pushes, r.Len(), len(tt.want))
		}
	}
}

// TestRingConcurrent: readers see whole, ordered windows while a writer
// pushes (run with -race).
func TestRingConcurrent(t *testing.T) {
	r := NewRing[int](16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 10000 {
			r.Push(i)
		}
	}()
	for range 200 {
		items := r.Items()
		for i := 1; i < len(items); i++ {
			if items[i] != items[i-1]+1 {
				t.Fatalf("items out of order: %v", items)
			}
		}
	}
	wg.Wait()
}

// levelHandler is a handler enabled from a level, counting what it
// handles.
type levelHandler struct {
	min     slog.Level
	handled *[]string
}

func (h levelHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }
func (h levelHandler) Handle(_ context.Context, r slog.Record) error {
	*h.handled = append(*h.handled, r.Message)
	return nil
}
func (h levelHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelHandler) WithGroup(string) slog.Handler      { return h }

func TestLogRing(t *testing.T) {
	var handled []string
	ring := NewLogRing(3)
	log := slog.New(ring.Handler(levelHandler{min: slog.LevelError, handled: &handled}))

	log.Info("info is not kept")
	log.Warn("kept though the next handler leaves warnings out", "n", 1)
	drain := log.With("component", "drain", "sink", "postgres")
	drain.Error("transient sink error, retrying", "err", "dial tcp: i/o timeout", "attempt", 2)
	log.WithGroup("g").Warn("grouped", "sink", "not-a-sink-attr", slog.Group("h", "x", "a b"))
	log.Warn("a second sink", "sink", "copy")

	if want := []string{"transient sink error, retrying"}; !slices.Equal(handled, want) {
		t.Errorf("the wrapped handler handled %v, want %v (its own level decides)", handled, want)
	}
	es := ring.Entries()
	var msgs []string
	for _, e := range es {
		msgs = append(msgs, e.Msg)
	}
	if want := []string{"transient sink error, retrying", "grouped", "a second sink"}; !slices.Equal(msgs, want) {
		t.Fatalf("ring holds %v, want %v (the last 3)", msgs, want)
	}
	if w, e := ring.Counts(); w != 3 || e != 1 {
		t.Errorf("counts %d warnings, %d errors; want 3, 1", w, e)
	}
	if got, want := es[0].Attrs, `component=drain sink=postgres err="dial tcp: i/o timeout" attempt=2`; got != want {
		t.Errorf("attrs %q, want %q", got, want)
	}
	if got, want := es[1].Attrs, `g.sink=not-a-sink-attr g.h.x="a b"`; got != want {
		t.Errorf("grouped attrs %q, want %q", got, want)
	}
	if es[0].Level != "ERROR" || es[1].Level != "WARN" {
		t.Errorf("levels %q %q", es[0].Level, es[1].Level)
	}
	e, ok := ring.LastForSink("postgres")
	if !ok || e.Msg != "transient sink error, retrying" {
		t.Errorf("last for postgres: %+v %v", e, ok)
	}
	if _, ok := ring.LastForSink("not-a-sink-attr"); ok {
		t.Error("a grouped sink attribute was taken for a sink")
	}
	if e, ok := ring.LastForSink("copy"); !ok || e.Msg != "a second sink" {
		t.Errorf("last for copy: %+v %v", e, ok)
	}
	if !log.Enabled(context.Background(), slog.LevelWarn) || log.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled: warnings are always taken, infos only when the next handler wants them")
	}
}

func TestLogRingBounds(t *testing.T) {
	ring := NewLogRing(4)
	log := slog.New(ring.Handler(slog.DiscardHandler))
	log.Warn(strings.Repeat("m", 2*maxMsgBytes), "v", strings.Repeat("é", maxAttrsBytes))
	e := ring.Entries()[0]
	if len(e.Msg) > maxMsgBytes+len("…") || !strings.HasSuffix(e.Msg, "…") {
		t.Errorf("message of %d bytes kept", len(e.Msg))
	}
	if len(e.Attrs) > maxAttrsBytes+len("…") {
		t.Errorf("attributes of %d bytes kept", len(e.Attrs))
	}
	for i := range 2 * maxSinks {
		log.Warn("x", "sink", strings.Repeat("s", i+1))
	}
	ring.mu.Lock()
	n := len(ring.bySink)
	ring.mu.Unlock()
	if n != maxSinks {
		t.Errorf("remembers %d sinks, want at most %d", n, maxSinks)
	}
}
