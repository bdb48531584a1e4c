package daemon

import (
	"fmt"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/wab"
)

// admitProducers sets what flow control asks of the producer listeners:
// every frame reserves its memory from the budget (with flow.admission
// on; then conn_max_inflight_bytes caps each connection too), waits for
// it at most flow.admission_wait, and is refused Overloaded with the
// flow.retry_after hint — at once while the controller throttles.
func (f *flowControl) admitProducers(cfg *config.Config, o *server.Options) {
	if f.on {
		o.Budget = f.budget
	}
	o.Throttle = f.ctl
	o.ConnMaxInflightBytes = cfg.ConnMaxInflightBytes
	o.AdmissionWait = cfg.Flow.AdmissionWait
	o.RetryAfter = cfg.Flow.RetryAfter
}

// watchShardQueues makes every shard queue's fill (the fuller of its
// queue_capacity and queue_capacity_bytes shares) a signal of the
// backpressure machine.
func (f *flowControl) watchShardQueues(l *wab.Log) {
	for i := range l.Shards() {
		f.ctl.AddQueue(fmt.Sprintf("shard-%d", i), func() float64 { return l.QueueFill(i) })
	}
}
