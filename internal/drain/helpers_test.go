package drain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dirSource lists sealed segments the way the WAB lays them out:
// <dir>/shard-NNN/<seq:020d>.wab.sealed.
type dirSource struct {
	dir    string
	notify chan struct{}
}

func newDirSource(dir string) *dirSource {
	return &dirSource{dir: dir, notify: make(chan struct{}, 1)}
}

func (s *dirSource) Notify() <-chan struct{} { return s.notify }

func (s *dirSource) Sealed() ([]wab.SegmentRef, error) {
	shards, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []wab.SegmentRef
	for _, sd := range shards {
		var shard int
		if _, err := fmt.Sscanf(sd.Name(), "shard-%03d", &shard); err != nil || !sd.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(s.dir, sd.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			name, ok := strings.CutSuffix(f.Name(), ".wab.sealed")
			if !ok || len(name) != 20 {
				continue
			}
			var seq uint64
			if _, err := fmt.Sscanf(name, "%d", &seq); err != nil {
				continue
			}
			out = append(out, wab.SegmentRef{Shard: shard, Seq: seq, Path: filepath.Join(s.dir, sd.Name(), f.Name())})
		}
	}
	return out, nil
}

var testInstance = [16]byte{'t', 'e', 's', 't'}

// baseReceived is the receive time of a test segment's first record.
var baseReceived = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()

// writeSegment writes a sealed segment of the given payloads as the WAB
// names it and returns its path and header. Records alternate between the
// durable and buffered tiers and are received one microsecond apart.
func writeSegment(t *testing.T, wabDir string, shard int, seq uint64, payloads ...string) (string, wab.Header) {
	t.Helper()
	dir := filepath.Join(wabDir, fmt.Sprintf("shard-%03d", shard))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h := wab.Header{
		Shard:    uint16(shard),
		Seq:      seq,
		UID:      uint64(shard)<<32 | seq,
		Created:  baseReceived,
		Instance: testInstance,
	}
	recs := make([]wab.Record, len(payloads))
	for i, p := range payloads {
		recs[i] = wab.Record{
			Durability: wab.Durability(i % 2),
			Received:   baseReceived + int64(i)*int64(time.Microsecond),
			Payload:    []byte(p),
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("%020d.wab.sealed", seq))
	if err := wab.WriteSealed(vfs.OS, path, h, recs); err != nil {
		t.Fatalf("write segment: %v", err)
	}
	return path, h
}

func payloads(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// scriptSink records every batch it is given and answers with script
// (nil: commit everything). call counts from 0.
type scriptSink struct {
	max    int
	script func(ctx context.Context, call int, b sink.Batch) (sink.CommitResult, error)

	mu      sync.Mutex
	batches []sink.Batch

	health      atomic.Pointer[sink.Health]
	healthCalls atomic.Int64
}

func (s *scriptSink) Name() string      { return "script" }
func (s *scriptSink) MaxBatchSize() int { return s.max }
func (s *scriptSink) Close() error      { return nil }

func (s *scriptSink) Health(context.Context) sink.Health {
	s.healthCalls.Add(1)
	if h := s.health.Load(); h != nil {
		return *h
	}
	return sink.Health{State: sink.Healthy}
}

func (s *scriptSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	cp := sink.Batch{Token: b.Token, Records: make([]sink.Record, len(b.Records))}
	for i, r := range b.Records {
		r.Payload = append([]byte(nil), r.Payload...)
		cp.Records[i] = r
	}
	s.mu.Lock()
	call := len(s.batches)
	s.batches = append(s.batches, cp)
	s.mu.Unlock()
	if s.script == nil {
		return sink.CommitResult{}, nil
	}
	return s.script(ctx, call, b)
}

func (s *scriptSink) got() []sink.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sink.Batch(nil), s.batches...)
}

// payloadsOf lists a batch's payloads as strings.
func payloadsOf(b sink.Batch) []string {
	out := make([]string, len(b.Records))
	for i, r := range b.Records {
		out[i] = string(r.Payload)
	}
	return out
}

// recObserver records what the drain reports.
type recObserver struct {
	mu        sync.Mutex
	states    []State
	commits   int
	fresh     []time.Duration // one per distinct receive time of a committed record
	retries   []time.Duration
	dlRecords int
	dlByCode  map[record.Code]int
	totals    [2]int64
	full      int
	health    []sink.Health
	delivered []wab.SegmentRef
	deferred  []wab.SegmentRef
	damaged   []int // every SegmentsDamaged report, in order
}

func (o *recObserver) State(s State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.states = append(o.states, s)
}

func (o *recObserver) Commit(int, int, time.Duration, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commits++
}

func (o *recObserver) Fresh(recs []sink.Record, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var last time.Time
	for _, r := range recs {
		if !r.Received.Equal(last) {
			last = r.Received
			o.fresh = append(o.fresh, at.Sub(r.Received))
		}
	}
}

func (o *recObserver) Retry(_ int, d time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries = append(o.retries, d)
}

func (o *recObserver) DeadLettered(code record.Code, records int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dlRecords += records
	if o.dlByCode == nil {
		o.dlByCode = map[record.Code]int{}
	}
	o.dlByCode[code] += records
}

func (o *recObserver) DeadLetterTotals(files int, bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.totals = [2]int64{int64(files), bytes}
}

func (o *recObserver) DeadLetterFull() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.full++
}

func (o *recObserver) SinkHealth(h sink.Health) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.health = append(o.health, h)
}

func (o *recObserver) SegmentDelivered(ref wab.SegmentRef, _ uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered = append(o.delivered, ref)
}

func (o *recObserver) SegmentDeferred(ref wab.SegmentRef, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deferred = append(o.deferred, ref)
}

func (o *recObserver) SegmentsDamaged(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.damaged = append(o.damaged, n)
}

func (o *recObserver) snapshot() recObserver {
	o.mu.Lock()
	defer o.mu.Unlock()
	return recObserver{
		states:    append([]State(nil), o.states...),
		commits:   o.commits,
		fresh:     append([]time.Duration(nil), o.fresh...),
		retries:   append([]time.Duration(nil), o.retries...),
		dlRecords: o.dlRecords,
		dlByCode:  maps.Clone(o.dlByCode),
		totals:    o.totals,
		full:      o.full,
		health:    append([]sink.Health(nil), o.health...),
		delivered: append([]wab.SegmentRef(nil), o.delivered...),
		deferred:  append([]wab.SegmentRef(nil), o.deferred...),
		damaged:   append([]int(nil), o.damaged...),
	}
}

// fastOptions are options with small intervals for tests.
func fastOptions(wabDir string, src Source, s sink.Sink, obs Observer) Options {
	return Options{
		FS:                      vfs.OS,
		WABDir:                  wabDir,
		Source:                  src,
		Sink:                    s,
		RetryBase:               time.Millisecond,
		RetryMax:                5 * time.Millisecond,
		MaxRetries:              3,
		DeadLetterCheckInterval: 5 * time.Millisecond,
		HealthInterval:          time.Hour,
		PollInterval:            5 * time.Millisecond,
		Observer:                obs,
	}
}

// running is a drain running in the background.
type running struct {
	d      *Drain
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, opts Options) *running {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the drain and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// waitFor polls cond until it holds or fails the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func confirmedCount(t *testing.T, seg string) uint64 {
	t.Helper()
	n, err := wab.ReadConfirmed(vfs.OS, seg)
	if err != nil {
		t.Fatalf("ReadConfirmed: %v", err)
	}
	return n
}
