package dqaudit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memWriter keeps what it is given; its first fails Writes fail (all of
// them with fails < 0).
type memWriter struct {
	mu      sync.Mutex
	entries []dqaudit.Entry
	fails   int
	calls   int
	closed  bool
}

var errDown = errors.New("destination down")

func (w *memWriter) Write(_ context.Context, es []dqaudit.Entry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.fails != 0 {
		w.fails--
		return errDown
	}
	w.entries = append(w.entries, es...)
	return nil
}

func (w *memWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

func (w *memWriter) got() []dqaudit.Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]dqaudit.Entry(nil), w.entries...)
}

// newClock is a fake clock tests move by hand.
func newClock() *testenv.Clock { return testenv.NewClock(time.Date(2026, 3, 4, 5, 6, 30, 0, time.UTC)) }

func id(n int) sink.RecordID {
	var r sink.RecordID
	r[14], r[15] = byte(n>>8), byte(n)
	return r
}

func closeTrail(t *testing.T, tr *dqaudit.Trail) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
