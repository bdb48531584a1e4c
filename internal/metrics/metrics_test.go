package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// series returns the value of every series of family name, keyed by its
// labels rendered as k=v,k=v (sorted as in the exposition).
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		out := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			out[strings.Join(ls, ",")] = value(mf.GetType(), m)
		}
		return out
	}
	return nil
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}

func TestFirstScrapeHasEveryLabelValue(t *testing.T) {
	_, reg := New(Config{Shards: 3, Sink: "file"})
	want := map[string]map[string]float64{
		"weir_drain_state": {
			"state=idle": 1, "state=draining": 0, "state=retrying_transient": 0, "state=blocked_dead_letter_full": 0,
		},
		"weir_sink_health": {
			"sink=file,state=healthy": 0, "sink=file,state=degraded": 0, "sink=file,state=down": 0,
		},
		"weir_shard_failed":               {"shard=0": 0, "shard=1": 0, "shard=2": 0},
		"weir_queue_depth":                {"shard=0": 0, "shard=1": 0, "shard=2": 0},
		"weir_connections_rejected_total": {"reason=max_connections": 0, "reason=shutting_down": 0},
		"weir_records_received_total":     {"durability=durable": 0, "durability=buffered": 0},
		"weir_records_acked_total":        {"durability=durable": 0, "durability=buffered": 0},
		"weir_wab_segments":               {"": 0},
		"weir_segments_damaged":           {"": 0},
		"weir_dead_letter_files":          {"": 0},
		"weir_dead_letter_full_total":     {"": 0},
		"weir_dead_letter_records_total": {
			"code=unknown": 0, "code=decode": 0, "code=contract": 0, "code=dq": 0,
			"code=retry-exhausted": 0, "code=sink-refused": 0, "code=oversize": 0,
		},
		"weir_gate_quarantined_records_total": {
			"code=unknown": 0, "code=decode": 0, "code=contract": 0, "code=dq": 0,
			"code=retry-exhausted": 0, "code=sink-refused": 0, "code=oversize": 0,
		},
	}
	for name, w := range want {
		got := series(t, reg, name)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s on the first scrape:\n got %v\nwant %v", name, got, w)
		}
	}
	// Every drain state the drain knows of is a label value.
	if got := len(series(t, reg, "weir_drain_state")); got != len(drain.States()) {
		t.Errorf("weir_drain_state has %d series, drain has %d states", got, len(drain.States()))
	}
	nacks := series(t, reg, "weir_records_nacked_total")
	for _, d := range []string{"durable", "buffered"} {
		for _, c := range []wire.Code{wire.CodeQueueTimeout, wire.CodeDiskFull, wire.CodeShardFailed, wire.CodeShuttingDown} {
			if _, ok := nacks["code="+c.String()+",durability="+d]; !ok {
				t.Errorf("weir_records_nacked_total{durability=%q,code=%q} missing", d, c)
			}
		}
	}
	bi := series(t, reg, "weir_build_info")
	if len(bi) != 1 {
		t.Errorf("weir_build_info: %v", bi)
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "weir_batch_records", "weir_fdatasync_duration_seconds",
		"weir_sink_commit_duration_seconds", "weir_sink_commit_records_total", "weir_drain_retries_total",
		"weir_segments_delivered_total", "weir_dead_letter_bytes", "weir_wab_bytes", "weir_connections_open", "weir_connections_total"} {
		if series(t, reg, name) == nil {
			t.Errorf("%s missing from the first scrape", name)
		}
	}
}

func TestRegistriesAreIndependent(t *testing.T) {
	m1, reg1 := New(Config{Shards: 1, Sink: "file"})
	_, reg2 := New(Config{Shards: 1, Sink: "file"})
	m1.ConnOpened()
	if got := testutil.ToFloat64(m1.connTotal); got != 1 {
		t.Fatalf("connections_total = %v", got)
	}
	if got := series(t, reg2, "weir_connections_total")[""]; got != 0 {
		t.Errorf("second registry saw the first one's connection: %v", got)
	}
	if got := series(t, reg1, "weir_connections_total")[""]; got != 1 {
		t.Errorf("first registry: %v", got)
	}
	if n, err := testutil.GatherAndCount(prometheus.DefaultGatherer, "weir_connections_total"); err != nil || n != 0 {
		t.Errorf("weir metrics in the default registry: %d, %v", n, err)
	}
}

func TestServerObserver(t *testing.T) {
	m, reg := New(Config{Shards: 2, Sink: "file"})
	m.ConnOpened()
	m.ConnOpened()
	m.ConnClosed()
	m.ConnRejected("max_connections")
	m.ConnRejected("shutting_down")
	m.ConnRejected("shutting_down")
	m.ConnRejected("something_new")
	m.Received(wire.Durable, 10, 10, 1000)
	m.Received(wire.Buffered, 5, 5, 50)
	m.Acked(wire.Durable, 8, 8, 800)
	m.Acked(wire.Buffered, 5, 5, 50)
	m.Nacked(wire.Durable, wire.CodeQueueTimeout, 2)
	m.Nacked(wire.Buffered, wire.Code(99), 1)

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP weir_connections_open Producer connections open now.
# TYPE weir_connections_open gauge
weir_connections_open 1
# HELP weir_connections_total Producer connections accepted.
# TYPE weir_connections_total counter
weir_connections_total 2
# HELP weir_connections_rejected_total Producer connections refused at accept, by reason.
# TYPE weir_connections_rejected_total counter
weir_connections_rejected_total{reason="max_connections"} 1
weir_connections_rejected_total{reason="shutting_down"} 2
weir_connections_rejected_total{reason="something_new"} 1
# HELP weir_records_received_total Records received in decoded push frames, by durability tier.
# TYPE weir_records_received_total counter
weir_records_received_total{durability="buffered"} 5
weir_records_received_total{durability="durable"} 10
# HELP weir_bytes_received_total Payload bytes received in decoded push frames, by durability tier.
# TYPE weir_bytes_received_total counter
weir_bytes_received_total{durability="buffered"} 50
weir_bytes_received_total{durability="durable"} 1000
# HELP weir_records_acked_total Records acknowledged to producers, by durability tier.
# TYPE weir_records_acked_total counter
weir_records_acked_total{durability="buffered"} 5
weir_records_acked_total{durability="durable"} 8
# HELP weir_bytes_acked_total Payload bytes acknowledged to producers, by durability tier.
# TYPE weir_bytes_acked_total counter
weir_bytes_acked_total{durability="buffered"} 50
weir_bytes_acked_total{durability="durable"} 800
`), "weir_connections_open", "weir_connections_total", "weir_connections_rejected_total",
		"weir_records_received_total", "weir_bytes_received_total", "weir_records_acked_total", "weir_bytes_acked_total")
	if err != nil {
		t.Error(err)
	}
	nacks := series(t, reg, "weir_records_nacked_total")
	if got := nacks["code=QueueTimeout,durability=durable"]; got != 2 {
		t.Errorf("nacked QueueTimeout durable = %v", got)
	}
	if got := nacks["code=Code(99),durability=buffered"]; got != 1 {
		t.Errorf("nacked unknown code = %v (%v)", got, nacks)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m, _ := New(Config{Shards: 4, Sink: "file"})
	allocs := testing.AllocsPerRun(1000, func() {
		m.Received(wire.Durable, 3, 3, 300)
		m.Acked(wire.Buffered, 3, 3, 300)
		m.Nacked(wire.Durable, wire.CodeDiskFull, 1)
		m.Batch(2, 100, 4096, time.Millisecond)
		m.QueueDepth(2, 7)
		m.ConnRejected("max_connections")
		m.State(drain.Draining)
		m.Commit(100, 0, time.Millisecond, nil)
		m.SinkHealth(sink.Health{State: sink.Degraded, Reason: "x"})
	})
	if allocs > 0 {
		t.Errorf("observer calls allocate %v times per round", allocs)
	}
}

func TestWABObserver(t *testing.T) {
	m, reg := New(Config{Shards: 2, Sink: "file"})
	m.Batch(0, 10, 1000, 2*time.Millisecond)
	m.Batch(1, 3, 300, 0) // Buffered only: no fdatasync
	m.QueueDepth(1, 42)
	m.QueueDepth(5, 1) // a shard beyond the configured ones
	m.Sealed(wab.SegmentRef{Shard: 0, Seq: 1}, 10, 1100)
	m.Sealed(wab.SegmentRef{Shard: 1, Seq: 1}, 3, 400)
	m.Sealed(wab.SegmentRef{Shard: 1, Seq: 1}, 3, 400) // twice: counted once on disk

	if got := series(t, reg, "weir_batch_records")[""]; got != 2 {
		t.Errorf("batch_records count %v", got)
	}
	if got := series(t, reg, "weir_fdatasync_duration_seconds")[""]; got != 1 {
		t.Errorf("fdatasync count %v, want 1 (unsynced batches are not observed)", got)
	}
	if got := series(t, reg, "weir_queue_depth"); got["shard=1"] != 42 || got["shard=5"] != 1 {
		t.Errorf("queue_depth %v", got)
	}
	if s, b := testutil.ToFloat64(m.wabSegments), testutil.ToFloat64(m.wabBytes); s != 2 || b != 1500 {
		t.Errorf("wab segments %v bytes %v, want 2 and 1500", s, b)
	}
	m.SegmentDelivered(wab.SegmentRef{Shard: 0, Seq: 1}, 10)
	m.SegmentDelivered(wab.SegmentRef{Shard: 7, Seq: 9}, 1) // unknown: no size
	if s, b := testutil.ToFloat64(m.wabSegments), testutil.ToFloat64(m.wabBytes); s != 1 || b != 400 {
		t.Errorf("after delivery: wab segments %v bytes %v, want 1 and 400", s, b)
	}
	if got := testutil.ToFloat64(m.deliveredBytes); got != 1100 {
		t.Errorf("wab_delivered_bytes_total %v", got)
	}
	if got := testutil.ToFloat64(m.segDelivered); got != 2 {
		t.Errorf("segments_delivered_total %v", got)
	}
	if got := testutil.ToFloat64(m.recsDelivered); got != 11 {
		t.Errorf("records_delivered_total %v", got)
	}
	m.Preallocation(1, 64<<20, 8<<20)
	m.Preallocation(1, 64<<20, 0)
	if got := series(t, reg, "weir_wab_preallocate_reduced"); got["shard=0"] != 0 || got["shard=1"] != 1 {
		t.Errorf("preallocate_reduced %v", got)
	}
	m.Preallocation(1, 64<<20, 64<<20)
	if got := series(t, reg, "weir_wab_preallocate_reduced"); got["shard=1"] != 0 || testutil.ToFloat64(m.preallocFallbacks) != 2 {
		t.Errorf("after the return to full chunks: reduced %v, fallbacks %v", got, testutil.ToFloat64(m.preallocFallbacks))
	}
	m.TailCut(0, 11, 0)
	m.TailCut(2, 9, 3)
	if cuts, dropped := testutil.ToFloat64(m.tailCuts), testutil.ToFloat64(m.tailCutDropped); cuts != 2 || dropped != 3 {
		t.Errorf("tail cuts %v, dropped valid records %v", cuts, dropped)
	}
}

// fakeWAB serves WatchWAB and the liveness check.
type fakeWAB struct {
	dir    string
	errs   []error
	busies []time.Duration
}

func (f *fakeWAB) Dir() string                           { return f.dir }
func (f *fakeWAB) Shards() int                           { return len(f.errs) }
func (f *fakeWAB) ShardErr(i int) error                  { return f.errs[i] }
func (f *fakeWAB) FlusherBusy(i int) time.Duration       { return f.busies[i] }
func (f *fakeWAB) DeadLetterTotals() (int, int64)        { return 3, 12345 }
func (f *fakeWAB) Busy() time.Duration                   { return f.busies[len(f.busies)-1] }
func (f *fakeWAB) set(i int, err error, b time.Duration) { f.errs[i], f.busies[i] = err, b }

// TestWatchWABAgainstRealLog writes segments through a real write-ahead
// buffer, then checks a fresh Metrics derives the same gauges from disk.
func TestWatchWABAgainstRealLog(t *testing.T) {
	dir := t.TempDir()
	m, reg := New(Config{Shards: 2, Sink: "file"})
	l, err := wab.Open(context.Background(), wab.Options{Dir: dir, Shards: 2, Logger: quiet, Observer: m, SegmentMaxAge: -1, PreallocateBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchWAB(vfs.OS, l); err != nil {
		t.Fatal(err)
	}
	for shard := 0; shard < 2; shard++ {
		done := make(chan error, 1)
		req := &wab.Request{Durability: wab.Durable, Payloads: [][]byte{[]byte("a"), []byte("bb")}, Received: 1, Done: func(err error) { done <- err }}
		if err := l.Submit(context.Background(), shard, req, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(context.Background()); err != nil { // seals both
		t.Fatal(err)
	}
	// Read after Close: a flusher reports its batch just after answering
	// it (off the ack path), so right after Done it may not have yet.
	if got := series(t, reg, "weir_fdatasync_duration_seconds")[""]; got != 2 {
		t.Errorf("fdatasync observations %v, want 2", got)
	}
	refs, err := wab.ListSealed(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, r := range refs {
		fi, err := os.Stat(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	if len(refs) != 2 {
		t.Fatalf("%d sealed segments on disk, want 2", len(refs))
	}
	if s, b := testutil.ToFloat64(m.wabSegments), testutil.ToFloat64(m.wabBytes); s != 2 || b != float64(size) {
		t.Errorf("kept by observer: segments %v bytes %v, disk has 2 and %d", s, b, size)
	}

	// A restart derives the same from disk.
	m2, _ := New(Config{Shards: 2, Sink: "file"})
	if err := m2.WatchWAB(vfs.OS, &fakeWAB{dir: dir, errs: make([]error, 2)}); err != nil {
		t.Fatal(err)
	}
	if s, b := testutil.ToFloat64(m2.wabSegments), testutil.ToFloat64(m2.wabBytes); s != 2 || b != float64(size) {
		t.Errorf("derived from disk: segments %v bytes %v, want 2 and %d", s, b, size)
	}
	// Sealing one it already knows from disk does not count it twice.
	m2.Sealed(refs[0], 2, 1)
	if s := testutil.ToFloat64(m2.wabSegments); s != 2 {
		t.Errorf("segments %v after a repeated seal", s)
	}
	if err := m2.WatchWAB(vfs.OS, &fakeWAB{dir: filepath.Join(dir, "missing"), errs: make([]error, 2)}); err == nil {
		t.Error("WatchWAB of a missing directory succeeded")
	}
}

func TestShardFailed(t *testing.T) {
	m, reg := New(Config{Shards: 2, Sink: "file"})
	f := &fakeWAB{dir: t.TempDir(), errs: make([]error, 3), busies: make([]time.Duration, 3)}
	if err := m.WatchWAB(vfs.OS, f); err != nil {
		t.Fatal(err)
	}
	f.set(1, wab.ErrShardFailed, 0)
	got := series(t, reg, "weir_shard_failed")
	want := map[string]float64{"shard=0": 0, "shard=1": 1, "shard=2": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shard_failed %v, want %v", got, want)
	}
}

func TestDrainObserver(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "file"})
	m.WatchDrain(&fakeWAB{})
	if f, b := testutil.ToFloat64(m.dlFiles), testutil.ToFloat64(m.dlBytes); f != 3 || b != 12345 {
		t.Errorf("dead letter from the drain's totals: %v files %v bytes", f, b)
	}

	m.State(drain.Draining)
	m.State(drain.RetryingTransient)
	got := series(t, reg, "weir_drain_state")
	want := map[string]float64{"state=idle": 0, "state=draining": 0, "state=retrying_transient": 1, "state=blocked_dead_letter_full": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("drain_state %v, want %v", got, want)
	}

	m.Commit(100, 0, 10*time.Millisecond, nil)
	m.Commit(50, 2, 5*time.Millisecond, nil)
	m.Commit(50, 0, time.Second, sink.Transient(errors.New("busy")))
	m.Commit(50, 50, time.Millisecond, sink.Permanent(errors.New("bad")))
	m.Retry(1, time.Second, errors.New("busy"))
	m.DeadLettered(sink.CodeSinkRefused, 50)
	m.DeadLettered(sink.CodeOversize, 2)
	m.DeadLettered(sink.Code(200), 1) // a code this build does not know still counts
	m.GateQuarantined(sink.CodeDecode, 3)
	m.DeadLetterTotals(4, 17345)
	m.DeadLetterFull()
	m.SegmentDeferred(wab.SegmentRef{}, errors.New("x"))
	m.SegmentsDamaged(2)

	recs := series(t, reg, "weir_sink_commit_records_total")
	calls := series(t, reg, "weir_sink_commit_duration_seconds")
	for _, c := range []struct {
		result       string
		records, cnt float64
	}{{"ok", 150, 2}, {"transient", 50, 1}, {"permanent", 50, 1}} {
		k := "result=" + c.result + ",sink=file"
		if recs[k] != c.records || calls[k] != c.cnt {
			t.Errorf("%s: records %v calls %v, want %v and %v", c.result, recs[k], calls[k], c.records, c.cnt)
		}
	}
	for name, want := range map[string]float64{
		"weir_sink_rejected_records_total": 52,
		"weir_drain_retries_total":         1,
		"weir_dead_letter_records_total":   53,
		"weir_dead_letter_files":           4,
		"weir_dead_letter_bytes":           17345,
		"weir_dead_letter_full_total":      1,
		"weir_segments_deferred_total":     1,
		"weir_segments_damaged":            2,
	} {
		var got float64
		for _, v := range series(t, reg, name) {
			got += v
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	dl := series(t, reg, "weir_dead_letter_records_total")
	if dl["code=sink-refused"] != 50 || dl["code=oversize"] != 2 || dl["code=code(200)"] != 1 || dl["code=decode"] != 0 {
		t.Errorf("weir_dead_letter_records_total by code: %v", dl)
	}
	if gq := series(t, reg, "weir_gate_quarantined_records_total"); gq["code=decode"] != 3 || gq["code=oversize"] != 0 {
		t.Errorf("weir_gate_quarantined_records_total by code: %v", gq)
	}

	m.SinkHealth(sink.Health{State: sink.Down, Reason: "unreachable"})
	h := series(t, reg, "weir_sink_health")
	wantH := map[string]float64{"sink=file,state=healthy": 0, "sink=file,state=degraded": 0, "sink=file,state=down": 1}
	if fmt.Sprint(h) != fmt.Sprint(wantH) {
		t.Errorf("sink_health %v, want %v", h, wantH)
	}
}

func TestHealth(t *testing.T) {
	h := NewHealth(time.Second, quiet)
	if err := h.Readiness(); err == nil || err.Error() != "starting" {
		t.Errorf("new Health readiness: %v", err)
	}
	if err := h.Liveness(); err != nil {
		t.Errorf("new Health liveness: %v", err)
	}
	h.Ready()
	if err := h.Readiness(); err != nil {
		t.Errorf("after Ready: %v", err)
	}
	h.NotReady("shutting down")
	if err := h.Readiness(); err == nil || err.Error() != "shutting down" {
		t.Errorf("after NotReady: %v", err)
	}

	f := &fakeWAB{errs: make([]error, 3), busies: make([]time.Duration, 3)} // the last one is the drain
	h.WatchFlushers(&fakeFlushers{f})
	h.WatchDrain(f)
	f.set(0, nil, 900*time.Millisecond) // busy but within the limit
	if err := h.Liveness(); err != nil {
		t.Errorf("busy within the limit: %v", err)
	}
	f.set(1, nil, 2*time.Second)
	err := h.Liveness()
	if err == nil || !strings.Contains(err.Error(), "shard 1 flusher") {
		t.Errorf("stuck flusher: %v", err)
	}
	f.set(1, nil, 0)
	f.set(2, nil, 5*time.Second)
	if err := h.Liveness(); err == nil || !strings.Contains(err.Error(), "drain") {
		t.Errorf("stuck drain: %v", err)
	}
	f.set(2, nil, 0)
	if err := h.Liveness(); err != nil {
		t.Errorf("recovered: %v", err)
	}
}

// fakeFlushers exposes the first two entries of a fakeWAB as flushers.
type fakeFlushers struct{ f *fakeWAB }

func (f *fakeFlushers) Shards() int                     { return 2 }
func (f *fakeFlushers) FlusherBusy(i int) time.Duration { return f.f.busies[i] }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func TestServer(t *testing.T) {
	defer http.DefaultClient.CloseIdleConnections()
	m, reg := New(Config{Shards: 1, Sink: "file"})
	h := NewHealth(time.Second, quiet)
	srv, err := Listen(context.Background(), ServerOptions{Addr: "127.0.0.1:0", Registry: reg, Health: h, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + srv.Addr().String()

	if code, body := get(t, base+"/ready"); code != 503 || body != "not ready: starting\n" {
		t.Errorf("/ready before Ready: %d %q", code, body)
	}
	if code, body := get(t, base+"/live"); code != 200 || body != "live\n" {
		t.Errorf("/live: %d %q", code, body)
	}
	h.Ready()
	if code, _ := get(t, base+"/ready"); code != 200 {
		t.Errorf("/ready after Ready: %d", code)
	}
	m.Received(wire.Durable, 7, 7, 70)
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, `weir_records_received_total{durability="durable"} 7`) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	for _, want := range []string{`weir_drain_state{state="idle"} 1`, `weir_sink_health{sink="file",state="down"} 0`, "go_goroutines", "process_", "promhttp_metric_handler_requests_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	f := &fakeWAB{errs: make([]error, 1), busies: []time.Duration{3 * time.Second}}
	h.WatchDrain(f)
	if code, body := get(t, base+"/live"); code != 503 || !strings.HasPrefix(body, "stuck: drain busy") {
		t.Errorf("/live with a stuck drain: %d %q", code, body)
	}
	h.NotReady("shutting down")
	if code, body := get(t, base+"/ready"); code != 503 || body != "not ready: shutting down\n" {
		t.Errorf("/ready during shutdown: %d %q", code, body)
	}
	resp, err := http.Post(base+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", resp.StatusCode)
	}
	if srv.srv.ReadHeaderTimeout == 0 || srv.srv.ReadTimeout == 0 || srv.srv.WriteTimeout == 0 || srv.srv.IdleTimeout == 0 {
		t.Errorf("server timeouts not all set: %+v", srv.srv)
	}
}

func TestListenFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, reg := New(Config{Shards: 1})
	_, err = Listen(context.Background(), ServerOptions{Addr: ln.Addr().String(), Registry: reg, Health: NewHealth(0, nil)})
	if err == nil || !strings.Contains(err.Error(), "metrics: listen on "+ln.Addr().String()) {
		t.Errorf("Listen on a taken port: %v", err)
	}
}

// TestFreshness: one observation per distinct receive time of a committed
// batch, for the drain's sink and for a secondary; a record without a
// receive time is not observed.
func TestFreshness(t *testing.T) {
	m, reg := New(Config{Shards: 1, Sink: "postgres"})
	t0 := time.Unix(1_700_000_000, 0)
	recs := []sink.Record{{Received: t0}, {Received: t0}, {Received: t0.Add(time.Millisecond)}, {}}
	m.Fresh(recs, t0.Add(20*time.Millisecond))
	m.Topology().Fresh("warehouse", recs[:2], t0.Add(time.Second))
	got := series(t, reg, "weir_freshness_seconds")
	if got["sink=postgres"] != 2 || got["sink=warehouse"] != 1 {
		t.Fatalf("observations %v, want 2 for the drain's sink and 1 for the secondary", got)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "weir_freshness_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == "postgres" {
				if sum := s.GetHistogram().GetSampleSum(); sum < 0.0389 || sum > 0.0391 { // 20 ms + 19 ms
					t.Errorf("sum %v s, want 0.039", sum)
				}
			}
		}
	}
}

// TestOldestSegment: weir_wab_oldest_segment_timestamp_seconds is the
// seal time of the oldest segment still waiting, 0 once none waits.
func TestOldestSegment(t *testing.T) {
	m, reg := New(Config{Shards: 2, Sink: "file"})
	oldest := func() float64 { return series(t, reg, "weir_wab_oldest_segment_timestamp_seconds")[""] }
	if got := oldest(); got != 0 {
		t.Errorf("with nothing sealed: %v, want 0", got)
	}
	before := float64(time.Now().UnixNano()) / 1e9
	m.Sealed(wab.SegmentRef{Shard: 0, Seq: 1}, 10, 1100)
	first := oldest()
	time.Sleep(10 * time.Millisecond)
	m.Sealed(wab.SegmentRef{Shard: 1, Seq: 1}, 3, 400)
	if first < before || first > float64(time.Now().UnixNano())/1e9 || oldest() != first {
		t.Errorf("oldest %v (first %v, test began %v)", oldest(), first, before)
	}
	m.SegmentDelivered(wab.SegmentRef{Shard: 0, Seq: 1}, 10)
	if got := oldest(); got <= first {
		t.Errorf("after the oldest was delivered: %v, want the second's seal time (> %v)", got, first)
	}
	m.SegmentDelivered(wab.SegmentRef{Shard: 1, Seq: 1}, 3)
	if got := oldest(); got != 0 {
		t.Errorf("after every segment was delivered: %v, want 0", got)
	}
}
