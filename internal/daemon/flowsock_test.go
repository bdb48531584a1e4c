package daemon

import (
	"context"
	"testing"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/wab"
)

// TestAdmitProducers: the producer listeners reserve from the node's
// budget only with flow.admission on, and always answer Overloaded while
// the controller throttles; the knobs reach the server.
func TestAdmitProducers(t *testing.T) {
	cfg, err := config.Load([]string{"--data-dir", t.TempDir(), "--conn-max-inflight-bytes", "8MiB",
		"--flow-admission-wait", "30ms", "--flow-retry-after", "7ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 20})
	defer budget.Close()
	ctl := flow.NewController(flow.Options{Budget: budget})
	for _, on := range []bool{true, false} {
		f := &flowControl{budget: budget, ctl: ctl, on: on}
		var o server.Options
		f.admitProducers(cfg, &o)
		if (o.Budget == budget) != on || (o.Budget == nil) == on {
			t.Errorf("admission %v: budget %p", on, o.Budget)
		}
		if o.Throttle != ctl || o.ConnMaxInflightBytes != 8<<20 || o.AdmissionWait != cfg.Flow.AdmissionWait ||
			o.RetryAfter != cfg.Flow.RetryAfter || o.AdmissionWait == 0 || o.RetryAfter == 0 {
			t.Errorf("admission %v: %+v", on, o)
		}
	}
}

// TestWatchShardQueues: every shard queue is a signal of the controller.
func TestWatchShardQueues(t *testing.T) {
	l, err := wab.Open(context.Background(), wab.Options{Dir: t.TempDir(), Shards: 3, PreallocateBytes: -1, SegmentMaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	budget := flow.NewBudget(flow.BudgetOptions{Limit: 64 << 20})
	defer budget.Close()
	f := &flowControl{budget: budget, ctl: flow.NewController(flow.Options{Budget: budget})}
	f.watchShardQueues(l)
	s := f.ctl.Sample()
	for _, name := range []string{"shard-0", "shard-1", "shard-2"} {
		if fill, ok := s.Queues[name]; !ok || fill != 0 {
			t.Errorf("queue %s: %v, %v", name, fill, ok)
		}
	}
	if len(s.Queues) != 3 {
		t.Errorf("queues %v", s.Queues)
	}
}
