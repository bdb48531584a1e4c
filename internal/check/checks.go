package check

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weir-io/weir/sink"
)

// Options configure New.
type Options struct {
	Streams []*Stream
	// Audit receives every judged batch's outcomes; nil keeps none.
	Audit    Audit
	Observer Observer
	// Now is the clock of the streams' windows; nil means time.Now.
	Now func() time.Time
}

// Checks are the node's streams' checks; Wrap puts them in front of a
// sink.
type Checks struct {
	streams  []*Stream
	bySource map[string][]*Stream
	audit    Audit
	obs      Observer
	now      func() time.Time
}

// New indexes the streams by source. Two contracts may share a source
// only when the source is the socket and each is narrowed by its own
// header (Contract.Matches decides; the first that matches wins, in
// configuration order).
func New(o Options) (*Checks, error) {
	c := &Checks{streams: o.Streams, bySource: map[string][]*Stream{}, audit: o.Audit, obs: o.Observer, now: o.Now}
	if c.obs == nil {
		c.obs = NopObserver{}
	}
	if c.now == nil {
		c.now = time.Now
	}
	for _, s := range o.Streams {
		if s.Contract == nil {
			return nil, fmt.Errorf("check: stream %q has no contract", s.Name)
		}
		c.bySource[s.Name] = append(c.bySource[s.Name], s)
	}
	return c, nil
}

// Close stops the streams' breaker timers.
func (c *Checks) Close() {
	for _, s := range c.streams {
		s.Close()
	}
}

// Wrap returns inner behind the checks, under inner's name: see the
// package documentation. sinkName names the sink in the audit trail (a
// secondary's configured name).
func (c *Checks) Wrap(inner sink.Sink, sinkName string) *Sink {
	return &Sink{c: c, inner: inner, name: sinkName}
}

// Sink is a sink behind the checks.
type Sink struct {
	c     *Checks
	inner sink.Sink
	name  string

	mu   sync.Mutex // last; Commit is never concurrent, Health may be
	last *verdicts  // the last batch's, kept for its retry
}

var _ sink.Sink = (*Sink)(nil)

// Name implements sink.Sink: the inner sink's.
func (s *Sink) Name() string { return s.inner.Name() }

// MaxBatchSize implements sink.Sink: the inner sink's.
func (s *Sink) MaxBatchSize() int { return s.inner.MaxBatchSize() }

// Close implements sink.Sink: it closes the inner sink.
func (s *Sink) Close() error { return s.inner.Close() }

// Health implements sink.Sink: the inner sink's, or Degraded when a
// stream's fail ratio is over its threshold, its breaker is open or its
// dedup store cannot be reached. It reports each stream's ratio to the
// observer too, its window moved on to now.
func (s *Sink) Health(ctx context.Context) sink.Health {
	h := s.inner.Health(ctx)
	for _, st := range s.c.streams {
		sh, bad, ratio := st.health(s.c.now())
		s.c.obs.FailRatio(st.Name, ratio) // moved on, for a stream gone quiet
		if bad && h.State == sink.Healthy {
			h = sh
		}
	}
	return h
}

// Commit implements sink.Sink: the batch is judged (or its verdicts
// reused, for a retry), its clean records committed to the inner sink,
// its rejects returned as rejections; see the package documentation.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	s.mu.Lock()
	v := s.last
	s.mu.Unlock()
	if v == nil || v.token != b.Token || v.n != len(b.Records) {
		v = s.c.judge(ctx, s.name, b)
		s.mu.Lock()
		s.last = v
		s.mu.Unlock()
	}
	// The outcomes are made durable in the trail while the inner sink
	// commits, and Commit succeeds only once both have: the caller
	// records the progress that covers the batch after that.
	var audited chan error
	if !v.audited && s.c.audit != nil && len(v.audit) > 0 {
		audited = make(chan error, 1)
		go func() { audited <- s.c.audit.Append(ctx, v.audit) }()
	}
	res, err := s.commit(ctx, b, v)
	if audited != nil {
		switch aerr := <-audited; {
		case aerr == nil:
			v.audited = true // a retry of the batch does not append it again
		case err == nil:
			// The sink holds the batch, the trail not its outcomes: the
			// batch is sent again (idempotent on record id), its
			// verdicts kept.
			return sink.CommitResult{}, sink.Transient(fmt.Errorf("check: dq-audit trail: %w", aerr))
		}
	}
	if err == nil {
		s.forget()
	}
	return res, err
}

// commit commits the clean records of b, judged v, to the inner sink and
// returns the batch's rejections.
func (s *Sink) commit(ctx context.Context, b sink.Batch, v *verdicts) (sink.CommitResult, error) {
	if v.dropped == nil {
		return s.inner.Commit(ctx, b)
	}
	clean, idx := make([]sink.Record, 0, v.clean), make([]int, 0, v.clean)
	for i := range b.Records {
		if !v.dropped[i] {
			clean = append(clean, b.Records[i])
			idx = append(idx, i)
		}
	}
	out := sink.CommitResult{Rejected: append([]sink.Rejection(nil), v.rejected...)}
	if len(clean) > 0 {
		res, err := s.inner.Commit(ctx, sink.NewBatch(clean))
		switch {
		case err != nil && (sink.IsTransient(err) || ctx.Err() != nil):
			return sink.CommitResult{}, err
		case err != nil:
			res.Rejected = res.Rejected[:0]
			for i := range clean {
				res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Reason: err.Error(), Code: sink.CodeSinkRefused})
			}
		}
		for _, r := range res.Rejected {
			if r.Index >= 0 && r.Index < len(idx) { // else it names no record: the lanes ignore it
				r.Index = idx[r.Index]
				out.Rejected = append(out.Rejected, r)
			}
		}
		slices.SortStableFunc(out.Rejected, func(a, b sink.Rejection) int { return a.Index - b.Index })
	}
	return out, nil
}

// forget drops the kept verdicts once their batch is accounted for.
func (s *Sink) forget() {
	s.mu.Lock()
	s.last = nil
	s.mu.Unlock()
}
