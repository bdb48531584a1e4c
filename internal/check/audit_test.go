package check_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/check"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
)

// auditBatches are two batches of orders and what their outcomes are.
func auditBatches() ([]sink.Batch, map[dqaudit.Outcome]int64) {
	return []sink.Batch{
			sink.NewBatch([]sink.Record{
				rec("orders", 1, `{"order_id":"a","amount":5}`),
				rec("orders", 2, `not json`),
				rec("orders", 3, `{"order_id":"c","amount":5000}`), // warn only
			}),
			sink.NewBatch([]sink.Record{
				rec("orders", 4, `{"order_id":"d","amount":-1}`),
				rec("orders", 5, `{"order_id":"e","amount":"five"}`),
				rec("orders", 6, `{"order_id":"f","amount":7}`),
			}),
		}, map[dqaudit.Outcome]int64{
			dqaudit.Passed: 2, dqaudit.Warned: 1, dqaudit.Rejected: 3,
		}
}

// survived is the trail as a crash would leave it on fsys: only what
// was fdatasynced.
func survived(t *testing.T, fsys *memfs.FS) dqaudit.StreamSummary {
	t.Helper()
	es, err := dqaudit.ReadDir(fsys.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}), "/dq")
	if err != nil {
		t.Fatal(err)
	}
	s := dqaudit.Summarise(es)
	if len(s.Streams) == 0 {
		return dqaudit.StreamSummary{}
	}
	return s.Streams[0]
}

// The outcomes of a batch are durable in the trail once the wrapped
// sink's Commit returns — before the caller records the progress that
// covers the batch — so a crash right after it loses none of them, even
// with a window that would not close for an hour. A batch judged again
// after the crash counts once by record id.
func TestCommittedOutcomesSurviveACrash(t *testing.T) {
	fsys := memfs.New()
	open := func(fsys *memfs.FS) (*dqaudit.Trail, *check.Sink) {
		w, err := dqaudit.OpenDir(fsys, "/dq")
		if err != nil {
			t.Fatal(err)
		}
		tr := dqaudit.New(dqaudit.Options{Writer: w, Window: time.Hour})
		return tr, newChecks(t, tr, &check.Stream{Name: "orders", Contract: orders(t, nil)}).Wrap(&recorder{}, "pg")
	}
	tr, s := open(fsys)
	batches, want := auditBatches()
	got := map[dqaudit.Outcome]int64{}
	for i, b := range batches {
		if _, err := s.Commit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		// Here the caller would record its progress: a crash now must
		// find every outcome of the batch in the trail.
		st := survived(t, fsys)
		got = st.Outcomes
		if sum(st.Outcomes) != int64(3*(i+1)) {
			t.Fatalf("after batch %d a crash leaves %v in the trail, want all %d outcomes so far", i, st.Outcomes, 3*(i+1))
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the trail holds %v, want %v", got, want)
	}

	// The crash: the trail on what survived, and the second batch — not
	// covered yet — judged again.
	crashed := fsys.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
	tr2, s2 := open(crashed)
	if _, err := s2.Commit(context.Background(), batches[1]); err != nil {
		t.Fatal(err)
	}
	closeTrailOf(t, tr2)
	closeTrailOf(t, tr)
	st := survived(t, crashed)
	if !maps.Equal(st.Outcomes, want) || st.Rejudged != 3 || sum(st.Judged) != 9 {
		t.Fatalf("after the batch was judged again: outcomes %v (want %v), judged %v, rejudged %d (want 3)",
			st.Outcomes, want, st.Judged, st.Rejudged)
	}
}

func sum(m map[dqaudit.Outcome]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func closeTrailOf(t *testing.T, tr *dqaudit.Trail) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingAudit fails its first fails Appends.
type failingAudit struct {
	audit
	fails int
}

func (a *failingAudit) Append(ctx context.Context, bs []dqaudit.Batch) error {
	a.mu.Lock()
	if a.fails > 0 {
		a.fails--
		a.calls++
		a.mu.Unlock()
		return errors.New("trail down")
	}
	a.mu.Unlock()
	return a.audit.Append(ctx, bs)
}

// A trail that cannot take the outcomes fails the commit transiently —
// the inner sink may hold the batch, the caller must not move its
// progress past it — and the retry appends them, reusing the verdicts.
func TestTrailFailureFailsTheCommit(t *testing.T) {
	a := &failingAudit{fails: 1}
	c := newChecks(t, a, &check.Stream{Name: "orders", Contract: orders(t, nil)})
	inner := &recorder{}
	s := c.Wrap(inner, "pg")
	batches, _ := auditBatches()
	_, err := s.Commit(context.Background(), batches[0])
	if !sink.IsTransient(err) {
		t.Fatalf("commit with the trail down: %v, want a transient error", err)
	}
	res, err := s.Commit(context.Background(), batches[0])
	if err != nil || len(res.Rejected) != 1 {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if a.calls != 2 || a.by[dqaudit.Passed] != 1 || a.by[dqaudit.Rejected] != 1 || a.by[dqaudit.Warned] != 1 {
		t.Fatalf("trail given %d appends, holding %v; want the batch's 3 outcomes once, on the second", a.calls, a.by)
	}
	// An inner failure after the trail took the outcomes: the retry does
	// not append them again.
	inner.fail = []error{sink.Transient(errors.New("busy"))}
	if _, err := s.Commit(context.Background(), batches[1]); !sink.IsTransient(err) {
		t.Fatalf("commit with the sink busy: %v", err)
	}
	if _, err := s.Commit(context.Background(), batches[1]); err != nil {
		t.Fatal(err)
	}
	if a.calls != 3 {
		t.Fatalf("trail given %d appends, want 3 (the sink's retry reuses the appended verdicts)", a.calls)
	}
}
