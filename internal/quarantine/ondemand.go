package quarantine

import (
	"context"
	"errors"
	"sync"

	"github.com/weir-io/weir/internal/lane"
)

// OnDemand is a quarantine lane that holds nothing open between batches:
// each Quarantine opens a Writer on the directory (sizing what it holds),
// writes and fdatasyncs the batch into a new file, and closes it. It is
// for a lane that is written rarely and has no owner to close it — the
// buffer gate's, which only records the write-ahead buffer cannot hold
// ever reach. A failed write or fdatasync fails that batch only: the next
// one starts a new file (the failed one is never synced again). The same
// format, bound (MaxBytes) and ErrFull as a Writer's; safe for concurrent
// use.
type OnDemand struct {
	opts Options
	mu   sync.Mutex
}

var _ lane.Lane = (*OnDemand)(nil)

// NewOnDemand returns a lane writing to opts.Dir; nothing is touched
// before the first batch.
func NewOnDemand(opts Options) *OnDemand { return &OnDemand{opts: opts} }

// Reject implements lane.Lane: it returns once recs are
// fdatasynced in a new file of the directory, or refuses them whole.
func (o *OnDemand) Reject(ctx context.Context, recs []lane.Rejected) error {
	if len(recs) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	w, err := Open(o.opts)
	if err != nil {
		return err
	}
	err = w.Reject(ctx, recs)
	return errors.Join(err, w.Close())
}
