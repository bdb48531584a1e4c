package sinkcore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

var errData = errors.New("data error")

func testCore(maxProbes int) *Core {
	return New(Config{
		Name: "testsink", Server: "testdb", ErrClosed: errors.New("testsink: closed"),
		Timeout: time.Second, MaxProbes: maxProbes, Log: slog.New(slog.DiscardHandler),
		IsDataError: func(err error) bool { return errors.Is(err, errData) },
		Check:       func(r *sink.Record) (string, sink.Code) { return "", 0 },
		Ping:        func(context.Context) error { return nil },
		Close:       func() error { return nil },
	})
}

func span(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// TestBisect checks that bisection rejects exactly the bad rows, within
// MaxProbes + n probes, also once the budget runs out.
func TestBisect(t *testing.T) {
	for _, tc := range []struct {
		n, probes int
		bad       []int
	}{
		{1, 128, []int{0}},
		{2, 128, []int{1}},
		{1000, 128, []int{3, 500, 999}},
		{1000, 4, []int{0, 1, 2, 700}},
		{100, 128, nil},
	} {
		t.Run(fmt.Sprintf("n=%d,probes=%d,bad=%v", tc.n, tc.probes, tc.bad), func(t *testing.T) {
			c := testCore(tc.probes)
			probe := func(g []int) error {
				for _, j := range g {
					if slices.Contains(tc.bad, j) {
						return fmt.Errorf("row %d: %w", j, errData)
					}
				}
				return nil
			}
			rej, err := c.Bisect([][]int{span(tc.n)}, probe)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, r := range rej {
				got = append(got, r.Index)
				if !strings.HasPrefix(r.Reason, "testdb refused the row: ") {
					t.Errorf("reason %q", r.Reason)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.bad) {
				t.Fatalf("rejected %v, want %v", got, tc.bad)
			}
			if p := c.Probes.Load(); p > int64(tc.probes+tc.n) {
				t.Fatalf("%d probes for %d rows, want at most %d", p, tc.n, tc.probes+tc.n)
			}
		})
	}
}

func TestBisectOtherError(t *testing.T) {
	c := testCore(128)
	boom := errors.New("connection lost")
	_, err := c.Bisect([][]int{span(10)}, func([]int) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
}

// TestCommitBookkeeping checks the Commit skeleton: pre-check rejections,
// counters, the failure seen by Health, and Close.
func TestCommitBookkeeping(t *testing.T) {
	c := testCore(128)
	var fail error
	c.cfg.Check = func(r *sink.Record) (string, sink.Code) {
		if r.Source == "bad" {
			return "testsink: bad source", sink.CodeDecode
		}
		return "", 0
	}
	c.cfg.CommitRows = func(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("CommitRows without a deadline")
		}
		if fail != nil {
			return nil, fail
		}
		return []sink.Rejection{{Index: idx[0], Reason: "testdb refused the row"}}, nil
	}
	ctx := context.Background()
	recs := []sink.Record{{Source: "a"}, {Source: "bad"}, {Source: "b"}, {Source: "c"}}
	res, err := c.Commit(ctx, sink.NewBatch(recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 2 || res.Rejected[0].Index != 1 || res.Rejected[1].Index != 0 ||
		res.Rejected[0].Code != sink.CodeDecode || res.Rejected[1].Code != sink.CodeUnknown {
		t.Fatalf("rejected %+v", res.Rejected)
	}
	if c.Batches.Load() != 1 || c.Records.Load() != 4 || c.Committed.Load() != 2 ||
		c.Rejected.Load() != 2 || c.Commits.Load() != 1 || c.Failures.Load() != 0 {
		t.Fatalf("counters after a success: %+v", c)
	}

	fail = sink.Transient(errors.New("testsink: insert: gone"))
	if _, err := c.Commit(ctx, sink.NewBatch(recs)); !sink.IsTransient(err) {
		t.Fatalf("err %v, want transient", err)
	}
	if h := c.Health(ctx); h.State != sink.Degraded || h.Reason != "testsink: insert: gone" {
		t.Fatalf("health %+v after a failure", h)
	}
	fail = nil
	if _, err := c.Commit(ctx, sink.NewBatch(recs)); err != nil {
		t.Fatal(err)
	}
	if h := c.Health(ctx); h.State != sink.Healthy {
		t.Fatalf("health %+v after a success", h)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Commit(cctx, sink.NewBatch(recs)); !sink.IsTransient(err) || !strings.HasPrefix(err.Error(), "testsink: commit: ") {
		t.Fatalf("cancelled: err %v", err)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(ctx, sink.NewBatch(recs)); err == nil || sink.IsTransient(err) {
		t.Fatalf("after Close: err %v, want permanent", err)
	}
	if h := c.Health(ctx); h.State != sink.Down {
		t.Fatalf("health %+v after Close", h)
	}
}
