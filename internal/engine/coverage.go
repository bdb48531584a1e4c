package engine

import (
	"context"
	"time"
)

// storeRetryLogEvery spaces the log lines about failed offset store
// writes.
const storeRetryLogEvery = 10 * time.Second

// flusher writes coverage and reports gauges every FlushInterval.
func (f *Fanout) flusher(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.opts.FlushInterval)
	defer t.Stop()
	var lastErrLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f.opts.Role == RoleRecovery {
			if err := f.store.Reload(ctx); err == nil {
				if re, err := f.reader.End(ctx); err == nil {
					e := min(re, f.store.RawEnd())
					if e > f.end.Load() {
						f.end.Store(e)
					}
				}
			}
		}
		if err := f.store.Flush(ctx); err != nil && ctx.Err() == nil && time.Since(lastErrLog) > storeRetryLogEvery {
			lastErrLog = time.Now()
			f.log.Error("offset store write failed; coverage lags until it succeeds", "err", err)
		}
		f.report(ctx)
	}
}

func (f *Fanout) report(ctx context.Context) {
	var backlog uint64
	for _, st := range f.Stats().Sinks {
		f.obs.Coverage(st.Name, st.CoveredPrefix, st.Lag, st.Missing)
		backlog = max(backlog, st.Lag)
	}
	f.obs.RecoveryBacklog(backlog)
	if f.opts.Claims != nil {
		for _, s := range f.secs {
			s.reportWindows(ctx)
		}
	}
}
