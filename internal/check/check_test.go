package check_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/check"
	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/internal/dedup"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is the inner sink: it keeps what it was given and can be told
// to fail its next commits.
type recorder struct {
	mu      sync.Mutex
	got     [][]sink.Record
	fail    []error // returned by the next commits, in order
	rejects []sink.Rejection
}

func (r *recorder) Name() string                       { return "rec" }
func (r *recorder) MaxBatchSize() int                  { return 1000 }
func (r *recorder) Close() error                       { return nil }
func (r *recorder) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (r *recorder) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fail) > 0 {
		err := r.fail[0]
		r.fail = r.fail[1:]
		return sink.CommitResult{}, err
	}
	r.got = append(r.got, b.Records)
	res := sink.CommitResult{Rejected: r.rejects}
	r.rejects = nil
	return res, nil
}

func (r *recorder) payloads() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, b := range r.got {
		for _, rec := range b {
			out = append(out, string(rec.Payload))
		}
	}
	return out
}

// audit counts what the trail is given.
type audit struct {
	mu    sync.Mutex
	calls int
	by    map[dqaudit.Outcome]int
}

func (a *audit) Append(_ context.Context, bs []dqaudit.Batch) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.by == nil {
		a.by = map[dqaudit.Outcome]int{}
	}
	for _, b := range bs {
		for _, o := range b.Obs {
			a.by[o.Outcome]++
		}
	}
	return nil
}

func orders(t *testing.T, mod func(*contract.Spec)) *contract.Contract {
	t.Helper()
	schema, err := os.ReadFile("testdata/order.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	spec := contract.Spec{Stream: "orders", Version: "3", Schema: schema, SchemaPath: "order.schema.json",
		NaturalKey: []string{"/order_id"}, Unique: true,
		Rules: []contract.Rule{
			{Name: "positive_amount", Expr: "record.amount > 0", Severity: contract.Fail},
			{Name: "small_amount", Expr: "record.amount < 1000", Severity: contract.Warn},
		}}
	if mod != nil {
		mod(&spec)
	}
	c, err := contract.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rec(src string, id byte, payload string) sink.Record {
	return sink.Record{ID: sink.RecordID{id}, Source: src, Payload: []byte(payload)}
}

func newChecks(t *testing.T, a check.Audit, streams ...*check.Stream) *check.Checks {
	t.Helper()
	c, err := check.New(check.Options{Streams: streams, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestVerdictsOfAMixedBatch(t *testing.T) {
	a := &audit{}
	c := newChecks(t, a, &check.Stream{Name: "orders", Contract: orders(t, nil)})
	inner := &recorder{}
	s := c.Wrap(inner, "pg")
	batch := sink.NewBatch([]sink.Record{
		rec("orders", 1, `{"order_id":"a","amount":5}`),
		rec("orders", 2, `not json`),
		rec("orders", 3, `{"order_id":"c","amount":"five"}`),
		rec("orders", 4, `{"order_id":"d","amount":-1}`),
		rec("orders", 5, `{"order_id":"e","amount":5000}`), // warn only
		rec("other", 6, `not json either`),                 // no contract: passes
	})
	res, err := s.Commit(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		index int
		code  record.Code
		rule  string
	}{{1, record.CodeDecode, "decode"}, {2, record.CodeContract, "schema"}, {3, record.CodeDQ, "positive_amount"}}
	if len(res.Rejected) != len(want) {
		t.Fatalf("rejected %+v, want %d", res.Rejected, len(want))
	}
	for i, w := range want {
		r := res.Rejected[i]
		if r.Index != w.index || r.Code != w.code || r.Rule != w.rule || r.Contract != "orders@3" || r.Reason == "" {
			t.Errorf("rejection %d = %+v, want index %d code %v rule %q contract orders@3 and a reason", i, r, w.index, w.code, w.rule)
		}
	}
	if got, want := fmt.Sprint(inner.payloads()), fmt.Sprint([]string{`{"order_id":"a","amount":5}`, `{"order_id":"e","amount":5000}`, `not json either`}); got != want {
		t.Errorf("inner sink got %s, want %s", got, want)
	}
	if a.by[dqaudit.Passed] != 1 || a.by[dqaudit.Warned] != 1 || a.by[dqaudit.Rejected] != 3 {
		t.Errorf("audit outcomes %v, want 1 pass, 1 warn, 3 reject", a.by)
	}
}

func TestRetryReusesVerdicts(t *testing.T) {
	a := &audit{}
	store := dedup.NewMemory(dedup.MemoryOptions{MaxBytes: 1 << 20, Window: time.Minute})
	defer store.Close()
	c := newChecks(t, a, &check.Stream{Name: "orders", Contract: orders(t, nil), Dedup: dedup.New(store, dedup.Options{Stream: "orders"})})
	inner := &recorder{fail: []error{sink.Transient(errors.New("busy")), sink.Transient(errors.New("busy"))}}
	s := c.Wrap(inner, "pg")
	batch := sink.NewBatch([]sink.Record{rec("orders", 1, `{"order_id":"a","amount":5}`), rec("orders", 2, `{"order_id":"b","amount":0}`)})
	for i := 0; ; i++ {
		res, err := s.Commit(context.Background(), batch)
		if err == nil {
			if len(res.Rejected) != 1 || res.Rejected[0].Index != 1 {
				t.Fatalf("rejected %+v, want record 1", res.Rejected)
			}
			break
		}
		if !sink.IsTransient(err) || i > 2 {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if a.calls != 1 {
		t.Errorf("the audit trail was given the batch %d times, want once (a retry reuses its verdicts)", a.calls)
	}
	if got := inner.payloads(); len(got) != 1 {
		t.Errorf("inner got %v", got)
	}
}

func TestPermanentInnerErrorKeepsCheckCodes(t *testing.T) {
	c := newChecks(t, nil, &check.Stream{Name: "orders", Contract: orders(t, nil)})
	inner := &recorder{fail: []error{errors.New("table is gone")}}
	res, err := c.Wrap(inner, "pg").Commit(context.Background(), sink.NewBatch([]sink.Record{
		rec("orders", 1, `nope`), rec("orders", 2, `{"order_id":"b","amount":1}`)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 2 || res.Rejected[0].Code != record.CodeDecode || res.Rejected[1].Code != sink.CodeSinkRefused ||
		res.Rejected[1].Index != 1 || res.Rejected[1].Contract != "" {
		t.Fatalf("rejected %+v, want decode for 0 and sink-refused (no contract) for 1", res.Rejected)
	}
}

func TestInnerRejectionsMapToTheBatch(t *testing.T) {
	c := newChecks(t, nil, &check.Stream{Name: "orders", Contract: orders(t, nil)})
	inner := &recorder{rejects: []sink.Rejection{{Index: 1, Reason: "constraint", Code: sink.CodeSinkRefused}, {Index: 7, Reason: "names no record"}}}
	res, err := c.Wrap(inner, "pg").Commit(context.Background(), sink.NewBatch([]sink.Record{
		rec("orders", 1, `{"order_id":"a","amount":1}`), rec("orders", 2, `bad`), rec("orders", 3, `{"order_id":"c","amount":1}`)}))
	if err != nil {
		t.Fatal(err)
	}
	// The inner sink saw records 0 and 2; its index 1 is the batch's 2.
	if len(res.Rejected) != 2 || res.Rejected[0].Index != 1 || res.Rejected[0].Code != record.CodeDecode ||
		res.Rejected[1].Index != 2 || res.Rejected[1].Reason != "constraint" {
		t.Fatalf("rejected %+v", res.Rejected)
	}
}

func TestDedupDropsAnotherIDAndPassesARedelivery(t *testing.T) {
	store := dedup.NewMemory(dedup.MemoryOptions{MaxBytes: 1 << 20, Window: time.Minute})
	defer store.Close()
	a := &audit{}
	c := newChecks(t, a, &check.Stream{Name: "orders", Contract: orders(t, nil), Dedup: dedup.New(store, dedup.Options{Stream: "orders"})})
	inner := &recorder{}
	s := c.Wrap(inner, "pg")
	ctx := context.Background()
	steps := []struct {
		recs []sink.Record
		want int // records the inner sink gets
	}{
		{[]sink.Record{rec("orders", 1, `{"order_id":"a","amount":1}`)}, 1},
		// A producer's retry: the same order under a new id.
		{[]sink.Record{rec("orders", 2, `{"order_id":"a","amount":1}`)}, 0},
		// The first record again (a recovery replay): never its own duplicate.
		{[]sink.Record{rec("orders", 1, `{"order_id":"a","amount":1}`)}, 1},
		// Inside one batch: the second of two ids is dropped.
		{[]sink.Record{rec("orders", 3, `{"order_id":"b","amount":1}`), rec("orders", 4, `{"order_id":"b","amount":1}`)}, 1},
	}
	for i, st := range steps {
		before := len(inner.payloads())
		res, err := s.Commit(ctx, sink.NewBatch(st.recs))
		if err != nil || len(res.Rejected) != 0 {
			t.Fatalf("step %d: %+v, %v", i, res, err)
		}
		if got := len(inner.payloads()) - before; got != st.want {
			t.Errorf("step %d: inner sink got %d records, want %d", i, got, st.want)
		}
	}
	if a.by[dqaudit.Duplicate] != 2 {
		t.Errorf("audit duplicates = %d, want 2", a.by[dqaudit.Duplicate])
	}
}

func TestSocketContractNarrowedByHeader(t *testing.T) {
	c := newChecks(t, nil, &check.Stream{Name: "socket", Contract: orders(t, func(s *contract.Spec) {
		s.Stream, s.Header, s.HeaderValue = "socket", "type", "order"
	})})
	inner := &recorder{}
	order := rec("socket", 1, `bad`)
	order.Headers = []sink.Header{{Key: "type", Value: []byte("order")}}
	res, err := c.Wrap(inner, "pg").Commit(context.Background(), sink.NewBatch([]sink.Record{order, rec("socket", 2, `bad too`)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].Index != 0 {
		t.Fatalf("rejected %+v, want only the record with the header", res.Rejected)
	}
}

func TestThresholdAndBreaker(t *testing.T) {
	tripped := make(chan bool, 4)
	st := &check.Stream{Name: "orders", Contract: orders(t, nil),
		Limits: check.Limits{Window: time.Minute, MinRecords: 10, DegradedRatio: 0.2, BreakerRatio: 0.5, BreakerCooldown: time.Second},
		OnTrip: func(paused bool, why string) { tripped <- paused }}
	c := newChecks(t, nil, st)
	s := c.Wrap(&recorder{}, "pg")
	ctx := context.Background()
	commit := func(good, bad int) {
		var recs []sink.Record
		for i := range good {
			recs = append(recs, rec("orders", byte(i), fmt.Sprintf(`{"order_id":"g%d","amount":1}`, i)))
		}
		for i := range bad {
			recs = append(recs, rec("orders", byte(100+i), `bad`))
		}
		if _, err := s.Commit(ctx, sink.NewBatch(recs)); err != nil {
			t.Fatal(err)
		}
	}
	commit(8, 2) // 20 %: not above the threshold
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Fatalf("health at 20%% = %+v, want healthy", h)
	}
	commit(6, 4) // 30 % over the window
	if h := s.Health(ctx); h.State != sink.Degraded {
		t.Fatalf("health at 30%% = %+v, want degraded", h)
	}
	if st.Tripped() {
		t.Fatal("breaker tripped at 30%")
	}
	commit(0, 20) // 65 %
	if p := <-tripped; !p || !st.Tripped() {
		t.Fatal("breaker did not trip at 65%")
	}
	select {
	case p := <-tripped:
		if p {
			t.Fatal("tripped twice")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("breaker's cool-down never ended")
	}
	if st.Tripped() {
		t.Fatal("breaker still open after its cool-down")
	}
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Errorf("health after the cool-down = %+v, want healthy (the window starts afresh)", h)
	}
}

// A stream over its threshold that then goes quiet is healthy again once
// its bad records have left the window.
func TestDegradedEndsWithTheWindow(t *testing.T) {
	clock := testenv.NewClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	st := &check.Stream{Name: "orders", Contract: orders(t, nil),
		Limits: check.Limits{Window: time.Minute, MinRecords: 1, DegradedRatio: 0.2}}
	obs := &ratios{}
	c, err := check.New(check.Options{Streams: []*check.Stream{st}, Now: clock.Now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Wrap(&recorder{}, "pg")
	ctx := context.Background()
	if _, err := s.Commit(ctx, sink.NewBatch([]sink.Record{rec("orders", 1, `bad`), rec("orders", 2, `bad`)})); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(ctx); h.State != sink.Degraded {
		t.Fatalf("health after a bad batch = %+v, want degraded", h)
	}
	clock.Advance(2 * time.Minute) // nothing judged since
	if h := s.Health(ctx); h.State != sink.Healthy {
		t.Fatalf("health a window after the last bad record = %+v, want healthy", h)
	}
	if obs.last != -1 {
		t.Fatalf("reject ratio reported a window later = %v, want -1 (the window is empty)", obs.last)
	}
}

// ratios keeps the last reject ratio reported.
type ratios struct {
	check.NopObserver
	last float64
}

func (r *ratios) FailRatio(_ string, ratio float64) { r.last = ratio }
