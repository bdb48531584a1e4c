package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/check"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/internal/dedup"
	"github.com/weir-io/weir/internal/dqaudit"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// quality is the node's data contracts (docs/data_quality.md): the
// checks in front of the sinks, the streams' dedup stores and the
// dq-audit trail. A nil *quality — no [[contract]] — wraps nothing.
type quality struct {
	checks *check.Checks
	trail  *dqaudit.Trail
	stores []streamStore
	m      *metrics.Quality
	log    *slog.Logger

	mu     sync.Mutex
	pauses map[string]source.Pausable // the breaker's voter of each [[source]] stream
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// streamStore is a stream's dedup store.
type streamStore struct {
	stream string
	store  dedup.Store
}

// openQuality compiles every [[contract]], opens the dedup stores and
// the dq-audit trail; nil when there is no contract.
func openQuality(ctx context.Context, cfg *config.Config, fs vfs.FS, m *metrics.Metrics, log *slog.Logger) (*quality, error) {
	if len(cfg.Contracts) == 0 {
		return nil, nil
	}
	log = log.With("component", "contracts")
	q := &quality{m: m.Quality(), log: log, pauses: map[string]source.Pausable{}}
	w, err := openAuditWriter(ctx, cfg, fs, log)
	if err != nil {
		return nil, fmt.Errorf("dq-audit trail: %w", err)
	}
	q.trail = dqaudit.New(dqaudit.Options{Writer: w, Window: cfg.DQAudit.Window, Sample: cfg.DQAudit.Sample, Logger: log.With("component", "dq-audit")})
	var streams []*check.Stream
	for i := range cfg.Contracts {
		st, err := q.stream(ctx, &cfg.Contracts[i])
		if err != nil {
			return nil, errors.Join(err, q.close(ctx))
		}
		streams = append(streams, st)
	}
	q.checks, err = check.New(check.Options{Streams: streams, Audit: q.trail, Observer: q.m})
	if err != nil {
		return nil, errors.Join(err, q.close(ctx))
	}
	q.watch()
	return q, nil
}

// openAuditWriter opens where the trail is kept: dq_audit.postgres_url's
// table, else dq_audit.dir.
// A table whose server is down at start is opened at the trail's next
// write, and the node starts: until it opens, the checked sinks' commits
// fail as transient (their progress waits, nothing is lost) and the
// recovery entries wait (dqaudit.MaxPending).
func openAuditWriter(ctx context.Context, cfg *config.Config, fs vfs.FS, log *slog.Logger) (dqaudit.Writer, error) {
	if cfg.DQAudit.PostgresURL == "" {
		return dqaudit.OpenDir(fs, cfg.DQAudit.Dir)
	}
	open := func(ctx context.Context) (dqaudit.Writer, error) {
		return dqaudit.OpenPostgres(ctx, cfg.DQAudit.PostgresURL, cfg.DQAudit.Table)
	}
	w, err := open(ctx)
	if err == nil {
		return w, nil
	}
	log.Warn("dq-audit table cannot be opened; the trail keeps its entries and opens it at the next write", "table", cfg.DQAudit.Table, "err", err)
	return &lazyAudit{open: open}, nil
}

// lazyAudit is a dq-audit table opened at its first write that succeeds.
type lazyAudit struct {
	open func(context.Context) (dqaudit.Writer, error)
	w    dqaudit.Writer // touched only by the trail's writes and Close, which it serialises
}

func (l *lazyAudit) Write(ctx context.Context, entries []dqaudit.Entry) error {
	if l.w == nil {
		w, err := l.open(ctx)
		if err != nil {
			return fmt.Errorf("open dq-audit table: %w", err)
		}
		l.w = w
	}
	return l.w.Write(ctx, entries)
}

func (l *lazyAudit) Close() error {
	if l.w == nil {
		return nil
	}
	return l.w.Close()
}

// stream builds one contract's checks.
func (q *quality) stream(ctx context.Context, cc *config.ContractConfig) (*check.Stream, error) {
	c, err := contract.Compile(cc.Spec())
	if err != nil {
		return nil, err
	}
	st := &check.Stream{Name: cc.Source, Contract: c, Limits: check.Limits{
		Window: cc.Window, MinRecords: int64(cc.MinRecords), DegradedRatio: float64(cc.DegradedPercent) / 100,
		BreakerRatio: float64(cc.BreakerPercent) / 100, BreakerCooldown: cc.BreakerCooldown}}
	if cc.BreakerPercent > 0 {
		st.OnTrip = func(paused bool, why string) { q.trip(cc.Source, paused, why) }
	}
	q.m.Stream(cc.Source, cc.Dedup != nil)
	if cc.Dedup == nil {
		return st, nil
	}
	store, err := q.openStore(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("contract for stream %q: dedup: %w", cc.Source, err)
	}
	q.stores = append(q.stores, streamStore{cc.Source, store})
	st.Dedup = dedup.New(store, dedup.Options{Stream: cc.Source, Observer: q.m, Logger: q.log.With("stream", cc.Source)})
	return st, nil
}

func (q *quality) openStore(ctx context.Context, cc *config.ContractConfig) (dedup.Store, error) {
	d := cc.Dedup
	if strings.EqualFold(d.Store, "redis") {
		return dedup.NewRedis(ctx, dedup.RedisOptions{URL: d.RedisURL, Prefix: d.Prefix, Window: d.Window, Timeout: d.Timeout, Logger: q.log})
	}
	return dedup.NewMemory(dedup.MemoryOptions{MaxBytes: d.MaxBytes, Window: d.Window}), nil
}

// trip pauses or resumes a [[source]] stream for its breaker, loudly.
func (q *quality) trip(stream string, paused bool, why string) {
	q.mu.Lock()
	p := q.pauses[stream]
	q.mu.Unlock()
	q.m.Breaker(stream, paused)
	if paused {
		q.log.Error("contract breaker tripped: the stream's source is paused; records already read are still judged and quarantined",
			"stream", stream, "why", why)
	} else {
		q.log.Warn("contract breaker cool-down over: the stream's source resumes", "stream", stream)
	}
	if p == nil {
		return
	}
	if paused {
		p.Pause()
	} else {
		p.Resume()
	}
}

// bindSource gives a [[source]] stream's breaker its source's voter.
func (q *quality) bindSource(name string, p source.Pausable) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.pauses[name] = p
	q.mu.Unlock()
}

// wrap puts s, called name, behind the checks.
func (q *quality) wrap(s sink.Sink, name string) sink.Sink {
	if q == nil {
		return s
	}
	return q.checks.Wrap(s, name)
}

// audit is the fan-out's recovery audit hook (nil without contracts).
func (q *quality) audit() engine.RecoveryAudit {
	if q == nil {
		return nil
	}
	return q.trail
}

// watch reports the seen-sets' sizes and the trail's counts every few
// seconds, until close.
func (q *quality) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	q.stop = cancel
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			q.report()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (q *quality) report() {
	for _, s := range q.stores {
		keys, bytes := s.store.Held()
		q.m.Held(s.stream, keys, bytes)
	}
	st := q.trail.Stats()
	q.m.Audit(int64(st.Pending), st.Written, st.Dropped, st.WriteErrors)
}

// close flushes the trail and closes the stores; call it after the sinks
// are closed.
func (q *quality) close(ctx context.Context) error {
	if q == nil {
		return nil
	}
	if q.stop != nil {
		q.stop()
		q.wg.Wait()
	}
	var errs []error
	if q.checks != nil {
		q.checks.Close()
	}
	if q.trail != nil {
		errs = append(errs, q.trail.Close(ctx))
	}
	for _, s := range q.stores {
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}
