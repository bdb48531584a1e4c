package quarantine_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustRaw(t *testing.T, dir string) *filesink.Sink {
	t.Helper()
	r, err := filesink.New(context.Background(), filesink.Options{Dir: dir, Positions: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rejectOdd refuses every record at an odd index of its batch.
type rejectOdd struct{}

func (*rejectOdd) Name() string                       { return "odd" }
func (*rejectOdd) MaxBatchSize() int                  { return 1000 }
func (*rejectOdd) Close() error                       { return nil }
func (*rejectOdd) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (*rejectOdd) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	var res sink.CommitResult
	for i := range b.Records {
		if i%2 == 1 {
			res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Reason: "odd record refused"})
		}
	}
	return res, nil
}
