package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// memSink is a secondary whose contents the test can see, that can be
// taken down (transient errors), slowed, and told to reject some ids.
type memSink struct {
	name  string
	delay time.Duration
	// hold, when set, holds every Commit until it is closed.
	hold   chan struct{}
	down   atomic.Bool
	mu     sync.Mutex
	ids    map[sink.RecordID]int // id -> deliveries
	poison map[sink.RecordID]bool
	// stuck: a batch holding one of these fails with a transient error.
	stuck map[sink.RecordID]bool
	calls atomic.Int64
}

func newMemSink(name string) *memSink {
	return &memSink{name: name, ids: map[sink.RecordID]int{}, poison: map[sink.RecordID]bool{}, stuck: map[sink.RecordID]bool{}}
}

func (m *memSink) Name() string      { return m.name }
func (m *memSink) MaxBatchSize() int { return 1000 }
func (m *memSink) Close() error      { return nil }
func (m *memSink) Health(context.Context) sink.Health {
	if m.down.Load() {
		return sink.Health{State: sink.Down}
	}
	return sink.Health{State: sink.Healthy}
}

func (m *memSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	m.calls.Add(1)
	if m.hold != nil {
		select {
		case <-m.hold:
		case <-ctx.Done():
			return sink.CommitResult{}, sink.Transient(ctx.Err())
		}
	}
	if m.delay > 0 {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
			return sink.CommitResult{}, sink.Transient(ctx.Err())
		}
	}
	if m.down.Load() {
		return sink.CommitResult{}, sink.Transient(errors.New("memsink: down"))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range b.Records {
		if m.stuck[r.ID] {
			return sink.CommitResult{}, sink.Transient(errors.New("memsink: stuck"))
		}
	}
	var res sink.CommitResult
	for i, r := range b.Records {
		if m.poison[r.ID] {
			res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Reason: "poison"})
			continue
		}
		m.ids[r.ID]++
	}
	return res, nil
}

func (m *memSink) has(id sink.RecordID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[id] > 0
}

func (m *memSink) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ids)
}

func openRaw(t testing.TB, dir string) *filesink.Sink {
	t.Helper()
	r, err := filesink.New(context.Background(), filesink.Options{Dir: dir, Positions: true, MaxBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func openStore(t testing.TB, dir string) *engine.OffsetStore {
	t.Helper()
	s, err := engine.OpenOffsetStore(context.Background(), vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var idSeq atomic.Uint64

func mkBatch(n int) sink.Batch {
	recs := make([]sink.Record, n)
	for i := range recs {
		k := idSeq.Add(1)
		var id sink.RecordID
		for j := 0; j < 8; j++ {
			id[j] = byte(k >> (8 * j))
		}
		id[15] = 0x5a
		recs[i] = sink.Record{ID: id, Payload: fmt.Appendf(nil, `{"n":%d}`, k), Received: time.Now(), Source: "test"}
	}
	return sink.NewBatch(recs)
}

// rawIDs reads every record of raw.
func rawIDs(t testing.TB, r sink.RawReader) []sink.Positioned {
	t.Helper()
	ctx := context.Background()
	end, _ := r.End(ctx)
	var out []sink.Positioned
	for from := uint64(0); from < end; {
		got, err := r.ReadFrom(ctx, from, 5000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		out = append(out, got...)
		from = got[len(got)-1].Pos + 1
	}
	return out
}

// waitCaughtUp waits until every secondary covers all of raw.
func waitCaughtUp(t testing.TB, f *engine.Fanout, d time.Duration) engine.FanoutStats {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st := f.Stats()
		done := true
		for _, s := range st.Sinks {
			if s.CoveredPrefix < st.RawEnd {
				done = false
			}
		}
		if done {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("secondaries not caught up after %v: %+v", d, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// coverageChecker asserts, while the fan-out runs, that coverage never
// claims a position whose record the sink does not hold. Coverage is read
// first, then the sink: the sink only grows, so any claim missing from it
// at that moment was made before the sink had the record.
type coverageChecker struct {
	t       testing.TB
	store   *engine.OffsetStore
	raw     sink.RawReader
	name    string
	has     func() (func(sink.RecordID) bool, error)
	poison  map[sink.RecordID]bool
	stop    chan struct{}
	done    chan struct{}
	checks  atomic.Int64
	failure atomic.Pointer[string]
}

func startChecker(t testing.TB, store *engine.OffsetStore, raw sink.RawReader, name string, has func() (func(sink.RecordID) bool, error), rejected ...sink.RecordID) *coverageChecker {
	c := &coverageChecker{t: t, store: store, raw: raw, name: name, has: has, stop: make(chan struct{}), done: make(chan struct{}),
		poison: map[sink.RecordID]bool{}}
	for _, id := range rejected {
		c.poison[id] = true // rejected by the sink: covered, but never stored
	}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			if msg := c.check(); msg != "" {
				c.failure.Store(&msg)
				return
			}
		}
	}()
	return c
}

func (c *coverageChecker) check() string {
	cov := c.store.Coverage(c.name)
	has, err := c.has()
	if err != nil {
		return err.Error()
	}
	ctx := context.Background()
	for _, sp := range cov.Spans() {
		for from := sp.Lo; from < sp.Hi; {
			recs, err := c.raw.ReadFrom(ctx, from, int(min(sp.Hi-from, 5000)), 0)
			if err != nil {
				return err.Error()
			}
			if len(recs) == 0 {
				return fmt.Sprintf("%s: coverage %v claims positions from %d past raw's end", c.name, sp, from)
			}
			for _, r := range recs {
				if r.Pos >= sp.Hi {
					break
				}
				if !has(r.Record.ID) && !c.poison[r.Record.ID] {
					return fmt.Sprintf("%s: coverage leads: position %d (id %s) covered but not in the sink", c.name, r.Pos, r.Record.ID)
				}
			}
			from = recs[len(recs)-1].Pos + 1
		}
	}
	c.checks.Add(1)
	return ""
}

func (c *coverageChecker) finish() {
	c.t.Helper()
	close(c.stop)
	<-c.done
	if msg := c.check(); msg != "" {
		c.t.Fatal(msg)
	}
	if p := c.failure.Load(); p != nil {
		c.t.Fatal(*p)
	}
	c.t.Logf("%s: coverage checked against the sink's contents %d times", c.name, c.checks.Load())
}

func memHas(m *memSink) func() (func(sink.RecordID) bool, error) {
	return func() (func(sink.RecordID) bool, error) { return m.has, nil }
}

// fileHas reads a file sink's directory, open file included.
func fileHas(dir string) func() (func(sink.RecordID) bool, error) {
	return func() (func(sink.RecordID) bool, error) {
		lines, err := filesink.ReadDirFS(vfs.OS, dir, true)
		if err != nil {
			return nil, err
		}
		set := make(map[sink.RecordID]bool, len(lines))
		for _, l := range lines {
			set[l.ID] = true
		}
		return func(id sink.RecordID) bool { return set[id] }, nil
	}
}

func TestFanoutLiveDelivery(t *testing.T) {
	rawDir, secDir := t.TempDir(), t.TempDir()
	raw := openRaw(t, rawDir)
	fsec, err := filesink.New(context.Background(), filesink.Options{Dir: secDir})
	if err != nil {
		t.Fatal(err)
	}
	mem := newMemSink("mem")
	store := openStore(t, rawDir)
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: store, FlushInterval: 20 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: fsec, Name: "files"}, {Sink: mem}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c1 := startChecker(t, store, raw, "files", fileHas(secDir))
	c2 := startChecker(t, store, raw, "mem", memHas(mem))
	for i := 0; i < 200; i++ {
		if _, err := f.Commit(context.Background(), mkBatch(50)); err != nil {
			t.Fatal(err)
		}
	}
	st := waitCaughtUp(t, f, 20*time.Second)
	c1.finish()
	c2.finish()
	if st.RawEnd != 10000 || st.Backlog != 0 {
		t.Fatalf("stats %+v", st)
	}
	for _, id := range rawIDs(t, raw) {
		if !mem.has(id.Record.ID) {
			t.Fatalf("position %d missing from mem", id.Pos)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Coverage is on disk after Close.
	s2 := openStore(t, rawDir)
	if cov := s2.Coverage("files"); cov.Prefix() != 10000 {
		t.Fatalf("coverage on disk %v", &cov)
	}
}

// A slow secondary with a tiny queue drops live batches; Commit does not
// slow down, and recovery fills the gaps from raw. Rejected records go to
// the quarantine lane with the sink's reason.
func TestFanoutOverflowRecoversAndQuarantines(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	slow := newMemSink("slow")
	slow.delay = 5 * time.Millisecond
	// The secondary accepts nothing until every Commit has returned: if
	// the fan-out waited for it, the loop below would never finish.
	slow.hold = make(chan struct{})
	var qmu sync.Mutex
	quarantined := map[sink.RecordID]record.Rejection{}
	q := lane.Func(func(_ context.Context, recs []lane.Rejected) error {
		qmu.Lock()
		defer qmu.Unlock()
		for _, r := range recs {
			quarantined[r.Record.ID] = r.Reject
		}
		return nil
	})
	store := openStore(t, rawDir)
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: store, FlushInterval: 20 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		WindowRecords: 700,
		Secondaries:   []engine.SecondaryConfig{{Sink: slow, QueueBatches: 2, Quarantine: q}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var poison []sink.RecordID
	batches := make([]sink.Batch, 300)
	for i := range batches {
		batches[i] = mkBatch(20)
		if i%30 == 7 {
			slow.mu.Lock()
			slow.poison[batches[i].Records[3].ID] = true
			slow.mu.Unlock()
			poison = append(poison, batches[i].Records[3].ID)
		}
	}
	checker := startChecker(t, store, raw, "slow", memHas(slow), poison...)
	start := time.Now()
	commitWithin(t, f, batches, 30*time.Second, "a secondary that accepts nothing")
	elapsed := time.Since(start)
	st := f.Stats()
	close(slow.hold)
	if st.Sinks[0].LiveDropped == 0 {
		t.Fatalf("no live drops with a 2-batch queue and a held sink: %+v", st)
	}
	st = waitCaughtUp(t, f, 30*time.Second)
	checker.finish()
	t.Logf("commits took %v; stats %+v", elapsed, st.Sinks[0])
	if slow.count() != 6000-len(poison) {
		t.Fatalf("slow has %d records, want %d", slow.count(), 6000-len(poison))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		qmu.Lock()
		n := len(quarantined)
		qmu.Unlock()
		if n == len(poison) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quarantined %d, want %d", n, len(poison))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, id := range poison {
		rj := quarantined[id]
		if rj.Error != "poison" || rj.Code != record.CodeSinkRefused || rj.Stage != record.StageSecondary ||
			rj.Component != "slow" || rj.Attempts != 1 || rj.FirstSeen < start.UnixNano() {
			t.Fatalf("quarantined %+v", rj)
		}
	}
}

// commitWithin commits batches in order and fails the test unless every
// Commit has returned within d: the live path waits for nothing (named by
// what, for the message).
func commitWithin(t *testing.T, f *engine.Fanout, batches []sink.Batch, d time.Duration, what string) {
	t.Helper()
	committed := make(chan error, 1)
	go func() {
		for _, b := range batches {
			if _, err := f.Commit(context.Background(), b); err != nil {
				committed <- err
				return
			}
		}
		committed <- nil
	}()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("Commit waited for %s", what)
	}
}

// scriptSink answers each Commit with the next of its answers (the last
// one repeats).
type scriptSink struct {
	name    string
	mu      sync.Mutex
	answers []func(b sink.Batch) (sink.CommitResult, error)
	calls   int
}

func (s *scriptSink) Name() string                       { return s.name }
func (s *scriptSink) MaxBatchSize() int                  { return 1000 }
func (s *scriptSink) Close() error                       { return nil }
func (s *scriptSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }

func (s *scriptSink) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	return a(b)
}

// codeObserver counts Quarantined by code.
type codeObserver struct {
	engine.NopObserver
	mu    sync.Mutex
	codes map[record.Code]int
}

func (o *codeObserver) Quarantined(_ string, code record.Code, n int, _ bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.codes[code] += n
}

// A secondary's rejections reach its quarantine with the reason code the
// sink gave (sink-refused when it gave none, and for a permanent batch
// error), stage secondary, the sink as component and every commit of the
// chunk counted as an attempt; the observer counts them by code.
func TestFanoutQuarantineReasonCodes(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	transient := func(sink.Batch) (sink.CommitResult, error) {
		return sink.CommitResult{}, sink.Transient(errors.New("busy"))
	}
	sec := &scriptSink{name: "sec", answers: []func(sink.Batch) (sink.CommitResult, error){
		transient, transient,
		func(sink.Batch) (sink.CommitResult, error) {
			return sink.CommitResult{Rejected: []sink.Rejection{{Index: 0, Reason: "not json", Code: sink.CodeDecode},
				{Index: 1, Reason: "big", Code: sink.CodeOversize}, {Index: 2, Reason: "no"}, {Index: 99, Reason: "nothing"}}}, nil
		},
		func(sink.Batch) (sink.CommitResult, error) { return sink.CommitResult{}, errors.New("table dropped") },
	}}
	q := &laneRecorder{}
	obs := &codeObserver{codes: map[record.Code]int{}}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Observer: obs, RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: sec, Quarantine: q}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b1, b2 := mkBatch(4), mkBatch(2)
	for _, b := range []sink.Batch{b1, b2} {
		if _, err := f.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, f, 10*time.Second)
	want := []struct {
		id       sink.RecordID
		pos      uint64
		code     record.Code
		err      string
		attempts int
	}{
		{b1.Records[0].ID, 0, record.CodeDecode, "not json", 3},
		{b1.Records[1].ID, 1, record.CodeOversize, "big", 3},
		{b1.Records[2].ID, 2, record.CodeSinkRefused, "no", 3},
		{b2.Records[0].ID, 4, record.CodeSinkRefused, "table dropped", 1},
		{b2.Records[1].ID, 5, record.CodeSinkRefused, "table dropped", 1},
	}
	got := q.waitFor(len(want))
	if len(got) != len(want) {
		t.Fatalf("quarantined %d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		rj := g.Reject
		if g.Record.ID != w.id || g.Pos != w.pos || g.Sink != "sec" || rj.Code != w.code || rj.Error != w.err ||
			rj.Attempts != w.attempts || rj.Stage != record.StageSecondary || rj.Component != "sec" || rj.FirstSeen == 0 {
			t.Errorf("quarantined %d: pos %d %+v, want %+v", i, g.Pos, rj, w)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if wc := map[record.Code]int{record.CodeDecode: 1, record.CodeOversize: 1, record.CodeSinkRefused: 3}; !reflect.DeepEqual(obs.codes, wc) {
		t.Errorf("observed by code %v, want %v", obs.codes, wc)
	}
}

// In skip-quarantine mode, recovery does not re-quarantine rejected
// records; it counts them.
func TestFanoutSkipQuarantine(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	var ids []sink.RecordID
	for i := 0; i < 10; i++ {
		b := mkBatch(10)
		ids = append(ids, b.Records[0].ID)
		if _, _, err := raw.CommitRaw(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	mem := newMemSink("mem")
	for _, id := range ids {
		mem.poison[id] = true
	}
	var quarantined atomic.Int64
	q := lane.Func(func(_ context.Context, recs []lane.Rejected) error {
		quarantined.Add(int64(len(recs)))
		return nil
	})
	audit := &recoveryAudit{}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Mode: engine.RecoverySkipQuarantine, RecoveryInterval: 10 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, Quarantine: q}}, Audit: audit,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := waitCaughtUp(t, f, 10*time.Second)
	if st.Sinks[0].QuarantineSkipped != 10 || quarantined.Load() != 0 || mem.count() != 90 {
		t.Fatalf("skip mode: %+v, quarantined %d, sink %d", st.Sinks[0], quarantined.Load(), mem.count())
	}
	// The audit hook heard every recovered position, in skip mode.
	if got := audit.covered("mem", "skip-quarantine"); got != 100 {
		t.Fatalf("audit heard %d positions recovered in skip-quarantine mode, want 100 (%v)", got, audit.windows)
	}
}

// recoveryAudit keeps what engine.RecoveryAudit hears.
type recoveryAudit struct {
	mu      sync.Mutex
	windows []string
	n       map[string]uint64
}

func (a *recoveryAudit) Recovered(sinkName string, lo, hi uint64, mode string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]uint64{}
	}
	a.windows = append(a.windows, fmt.Sprintf("%s[%d,%d)%s", sinkName, lo, hi, mode))
	a.n[sinkName+" "+mode] += hi - lo
}

func (a *recoveryAudit) covered(sinkName, mode string) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[sinkName+" "+mode]
}

// A quarantine lane that cannot keep up sheds (counted) and never holds
// back the clean path.
func TestFanoutQuarantineSheds(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem, memB := newMemSink("mem"), newMemSink("mem")
	rec0 := mkBatch(1).Records[0]
	block := make(chan struct{})
	q := lane.Func(func(ctx context.Context, _ []lane.Rejected) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	})
	// A lane of 5 records, or of bytes for about 3 (each record holds
	// its payload and sink.Record's own size): both bounds shed.
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), RecoveryInterval: 10 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{
			{Sink: mem, Quarantine: q, QuarantineBuffer: 5},
			{Sink: memB, Name: "bytes", Quarantine: q, QuarantineBytes: 3 * rec0.MemSize()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b := mkBatch(10)
		for _, m := range []*memSink{mem, memB} {
			m.mu.Lock()
			for _, r := range b.Records[:5] {
				m.poison[r.ID] = true
			}
			m.mu.Unlock()
		}
		if _, err := f.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	st := waitCaughtUp(t, f, 10*time.Second)
	close(block)
	for i, m := range []*memSink{mem, memB} {
		// Delivery is at least once: a window recovery replays while its
		// live batch is in flight counts its rejects again.
		if m.count() != 100 || st.Sinks[i].QuarantineShed == 0 || st.Sinks[i].Quarantined < 100 {
			t.Fatalf("shedding (%d): sink %d, %+v", i, m.count(), st.Sinks[i])
		}
	}
	// The byte bound held the lane to about 3 records: at least 90 of
	// the 100 rejects were shed (one waits, one is being written).
	if st.Sinks[1].QuarantineShed < 90 {
		t.Errorf("byte-bounded lane shed %d of 100", st.Sinks[1].QuarantineShed)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Stopping the engine mid-recovery and starting again from the offset
// store on disk resumes recovery where the store says, and ends with the
// secondary holding all of raw. The store file is taken as it was at a
// moment during recovery (what a crash would leave: coverage lagging the
// sink).
func TestFanoutRecoveryResumesAfterCrash(t *testing.T) {
	rawDir, secDir := t.TempDir(), t.TempDir()
	raw := openRaw(t, rawDir)
	const total = 20000
	for i := 0; i < total/500; i++ {
		if _, _, err := raw.CommitRaw(context.Background(), mkBatch(500)); err != nil {
			t.Fatal(err)
		}
	}
	openSec := func() *filesink.Sink {
		s, err := filesink.New(context.Background(), filesink.Options{Dir: secDir, MaxBatchSize: 250})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	store := openStore(t, rawDir)
	opts := engine.FanoutOptions{Raw: raw, Store: store, WindowRecords: 1000, FlushInterval: 5 * time.Millisecond,
		RecoveryInterval: 10 * time.Millisecond,
		Secondaries:      []engine.SecondaryConfig{{Sink: openSec(), Name: "files"}}}
	f, err := engine.NewFanout(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	checker := startChecker(t, store, raw, "files", fileHas(secDir))
	var snapshot []byte
	var snapAt uint64
	for {
		st := f.Stats()
		p := st.Sinks[0].CoveredPrefix
		if p > total/3 {
			b, err := os.ReadFile(filepath.Join(rawDir, engine.DefaultOffsetFile))
			if err != nil {
				t.Fatal(err)
			}
			snapshot, snapAt = b, p
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Let it run on a little, then stop.
	time.Sleep(20 * time.Millisecond)
	checker.finish()
	f.Close() // closes raw too
	if err := os.WriteFile(filepath.Join(rawDir, engine.DefaultOffsetFile), snapshot, 0o600); err != nil {
		t.Fatal(err)
	}
	raw = openRaw(t, rawDir)
	store = openStore(t, rawDir)
	resumeAt := store.Coverage("files")
	if resumeAt.Prefix() == 0 || resumeAt.Prefix() >= total {
		t.Fatalf("snapshot coverage %v (taken at %d)", &resumeAt, snapAt)
	}
	opts.Raw, opts.Store = raw, store
	opts.Secondaries = []engine.SecondaryConfig{{Sink: openSec(), Name: "files"}}
	f, err = engine.NewFanout(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checker = startChecker(t, store, raw, "files", fileHas(secDir))
	st := waitCaughtUp(t, f, 30*time.Second)
	checker.finish()
	if st.Sinks[0].Recovered > int64(total-resumeAt.Prefix())+1000 {
		t.Fatalf("after restart recovered %d records; resume point was %d of %d (recovery restarted from scratch?)",
			st.Sinks[0].Recovered, resumeAt.Prefix(), total)
	}
	t.Logf("resumed from %d of %d; recovered %d more", resumeAt.Prefix(), total, st.Sinks[0].Recovered)
	has, _ := fileHas(secDir)()
	for _, p := range rawIDs(t, raw) {
		if !has(p.Record.ID) {
			t.Fatalf("position %d missing from the secondary after recovery", p.Pos)
		}
	}
}

// Roles: an ingest node delivers live but never recovers; a recovery node
// on the same raw and offset store fills the gaps.
func TestFanoutRoles(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	mem.down.Store(true)
	ingest, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, FlushInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, QueueBatches: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ingest.Close()
	for i := 0; i < 50; i++ {
		if _, err := ingest.Commit(context.Background(), mkBatch(10)); err != nil {
			t.Fatal(err)
		}
	}
	mem.down.Store(false)
	time.Sleep(200 * time.Millisecond)
	st := ingest.Stats()
	if st.Sinks[0].Recovered != 0 || st.Backlog == 0 {
		t.Fatalf("ingest role recovered or has no backlog: %+v", st)
	}
	rec := newMemSink("mem")
	var backlog atomic.Uint64
	backlog.Store(1 << 62)
	recovery, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: nil, Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery,
		FlushInterval: 10 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		Observer:    backlogObserver{v: &backlog},
		Secondaries: []engine.SecondaryConfig{{Sink: rec, Name: "mem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer recovery.Close()
	waitCaughtUp(t, recovery, 10*time.Second)
	// The recovery node delivered what the ingest node dropped (and, since
	// it shares nothing in memory with it, possibly more).
	if rec.count()+mem.count() < 500 {
		t.Fatalf("recovery node delivered %d, ingest %d", rec.count(), mem.count())
	}
	deadline := time.Now().Add(5 * time.Second)
	for backlog.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog observed %d after catching up", backlog.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type backlogObserver struct {
	engine.NopObserver
	v *atomic.Uint64
}

func (o backlogObserver) RecoveryBacklog(n uint64) { o.v.Store(n) }

func TestFanoutRejectsBadTopology(t *testing.T) {
	dir := t.TempDir()
	notRaw, err := filesink.New(context.Background(), filesink.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewFanout(context.Background(), engine.FanoutOptions{Raw: notRaw, Store: openStore(t, dir)}); err == nil {
		t.Fatal("a non-replayable sink accepted as primary raw")
	}
	raw := openRaw(t, dir)
	m := newMemSink("a")
	if _, err := engine.NewFanout(context.Background(), engine.FanoutOptions{Raw: raw, Store: openStore(t, dir),
		Secondaries: []engine.SecondaryConfig{{Sink: m}, {Sink: m}}}); err == nil {
		t.Fatal("two secondaries with one name accepted")
	}
	for _, s := range []string{"both", "ingest", "recovery", ""} {
		if _, err := engine.ParseRole(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := engine.ParseRole("leader"); err == nil {
		t.Fatal("bad role accepted")
	}
	if _, err := engine.ParseRecoveryMode("drop"); err == nil {
		t.Fatal("bad mode accepted")
	}
}

// A secondary that is down while its queue still has room is behind: the
// backlog counts what it has not durably received, queued or not, so an
// outage shows from its first second, not only once the queue overflows.
func TestFanoutBacklogCountsQueued(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	mem.down.Store(true)
	var backlog atomic.Uint64
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), FlushInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, QueueBatches: 1024}},
		Observer:    backlogObserver{v: &backlog},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 20; i++ {
		if _, err := f.Commit(context.Background(), mkBatch(50)); err != nil {
			t.Fatal(err)
		}
	}
	st := f.Stats()
	s := st.Sinks[0]
	if s.LiveDropped != 0 {
		t.Fatalf("the queue overflowed; the test needs room in it: %+v", s)
	}
	if st.Backlog != 1000 || s.Lag != 1000 || s.Missing != 0 || s.Queued != 1000 {
		t.Fatalf("down secondary with everything queued: stats %+v, want backlog = lag = queued = 1000, missing 0", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for backlog.Load() != 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("observed backlog %d, want 1000", backlog.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	mem.down.Store(false)
	if st := waitCaughtUp(t, f, 10*time.Second); st.Backlog != 0 {
		t.Fatalf("caught up with backlog %d", st.Backlog)
	}
	for backlog.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("observed backlog %d after catching up", backlog.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With ExternalRaw the fan-out never writes raw: the writer (a source
// that is its own raw) reports each durable batch with Appended, which is
// offered live; what was written before the fan-out started, or never
// reported, is recovered from the reader.
func TestFanoutExternalRaw(t *testing.T) {
	ctx := context.Background()
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir) // stands for the origin: written outside the fan-out
	write := func(n int) (uint64, []sink.Record) {
		b := mkBatch(n)
		_, first, err := raw.CommitRaw(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		return first, b.Records
	}
	write(300) // before the fan-out: recovered
	mem := newMemSink("mem")
	store := openStore(t, rawDir)
	f, err := engine.NewFanout(ctx, engine.FanoutOptions{
		Reader: raw, ExternalRaw: true, Store: store, FlushInterval: 20 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: mem}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(ctx, mkBatch(1)); err == nil {
		t.Fatal("Commit accepted with an external raw")
	}
	for i := 0; i < 40; i++ {
		first, recs := write(50)
		if i%10 != 3 { // a few batches are never reported: recovery finds them once reported ones pass them
			f.Appended(first, recs)
		}
	}
	st := waitCaughtUp(t, f, 20*time.Second)
	if st.RawEnd != 300+40*50 {
		t.Fatalf("raw end %d, want %d", st.RawEnd, 300+40*50)
	}
	for _, p := range rawIDs(t, raw) {
		if !mem.has(p.Record.ID) {
			t.Fatalf("position %d missing from the secondary", p.Pos)
		}
	}
	if st.Sinks[0].Recovered == 0 || st.Sinks[0].LiveDelivered == 0 {
		t.Fatalf("want both live and recovered deliveries: %+v", st.Sinks[0])
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewFanout(ctx, engine.FanoutOptions{Raw: raw, Reader: raw, ExternalRaw: true, Store: openStore(t, rawDir)}); err == nil {
		t.Fatal("ExternalRaw with a Raw sink accepted")
	}
}

// goneReader reports every position below goneBelow as no longer kept.
type goneReader struct {
	sink.RawReader
	goneBelow uint64
}

func (g goneReader) ReadFrom(ctx context.Context, from uint64, max int, maxBytes int64) ([]sink.Positioned, error) {
	if from < g.goneBelow {
		return nil, fmt.Errorf("test raw: %w", &sink.GoneError{From: from, To: g.goneBelow, Why: "removed by the test"})
	}
	return g.RawReader.ReadFrom(ctx, from, max, maxBytes)
}

// Positions raw no longer keeps are stepped over, counted as
// unrecoverable, and recovery goes on with what raw still holds (it used
// to ask for the lost span forever and never recover anything after it).
func TestFanoutStepsOverGonePositions(t *testing.T) {
	ctx := context.Background()
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	var later []sink.Record
	for i := 0; i < 3; i++ {
		b := mkBatch(10)
		if _, _, err := raw.CommitRaw(ctx, b); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			later = b.Records
		}
	}
	mem := newMemSink("mem")
	f, err := engine.NewFanout(ctx, engine.FanoutOptions{
		Reader: goneReader{raw, 20}, ExternalRaw: true, Store: openStore(t, rawDir), FlushInterval: 20 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: mem}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := waitCaughtUp(t, f, 10*time.Second)
	for _, r := range later {
		if !mem.has(r.ID) {
			t.Fatalf("a record raw still keeps (after the gone span) was not recovered")
		}
	}
	if got := st.Sinks[0]; got.Unrecoverable != 20 || mem.count() != 10 || st.Backlog != 0 {
		t.Fatalf("unrecoverable %d, delivered %d, backlog %d; want 20, 10, 0", got.Unrecoverable, mem.count(), st.Backlog)
	}
}

// A secondary that keeps failing on a record with a transient error gives
// up after max_attempts commits: the record goes to the quarantine lane
// with code retry-exhausted and the attempts made, coverage moves past
// it, and the records around it are delivered.
func TestFanoutSecondaryRetryExhausted(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	sec := newMemSink("flaky")
	q := &laneRecorder{}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), FlushInterval: 10 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond,
		Secondaries: []engine.SecondaryConfig{{Sink: sec, Quarantine: q, MaxAttempts: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, stuck, after := mkBatch(5), mkBatch(1), mkBatch(5)
	sec.mu.Lock()
	sec.stuck[stuck.Records[0].ID] = true
	sec.mu.Unlock()
	start := time.Now()
	for _, b := range []sink.Batch{before, stuck, after} {
		if _, err := f.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, f, 10*time.Second)
	if n := sec.count(); n != 10 {
		t.Fatalf("secondary holds %d records, want the 10 around the stuck one", n)
	}
	got := q.waitFor(1)
	if len(got) != 1 {
		t.Fatalf("quarantined %d records, want 1", len(got))
	}
	r := got[0]
	rj := r.Reject
	if r.Record.ID != stuck.Records[0].ID || rj.Code != record.CodeRetryExhausted || rj.Stage != record.StageSecondary ||
		rj.Component != "flaky" || rj.Attempts != 3 || rj.FirstSeen < start.UnixNano() ||
		!strings.Contains(rj.Error, "memsink: stuck") {
		t.Fatalf("quarantined %+v", r)
	}
}
