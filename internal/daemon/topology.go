package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/quarantine/pgquarantine"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Source restart backoff: doubling from the first to the cap, reset once a
// run has lasted sourceBackoffReset.
const (
	sourceBackoffFirst = 100 * time.Millisecond
	sourceBackoffMax   = 30 * time.Second
	sourceBackoffReset = time.Minute
)

// delivery is what the drain delivers to, the offset store beside raw
// when there are secondaries, and where store-managed sources keep their
// cursors.
type delivery struct {
	snk     sink.Sink
	offsets *engine.OffsetStore // nil without secondaries
	cursors source.CursorStore  // nil until a source needs one (openCursors)
}

// openDelivery opens the drain's sink. Without secondaries it is the
// [sink], exactly as configured. With secondaries the [sink] is primary
// raw, in its raw (positions) mode with the offset store beside it,
// behind a fan-out that feeds the secondaries after raw's durable ack.
func openDelivery(ctx context.Context, cfg *config.Config, k kinds, log *slog.Logger, m *metrics.Metrics) (*delivery, error) {
	if len(cfg.Secondaries) == 0 {
		snk, err := k.openSink(ctx, cfg.Sink, cfg.Sink.Type, log.With("component", "sink", "sink", cfg.Sink.Type))
		if err != nil {
			return nil, err
		}
		// The contracts' rejects go to the drain's dead letter, durably,
		// before the buffer lets go of them.
		return &delivery{snk: k.dq.wrap(snk, cfg.Sink.Type)}, nil
	}
	raw, err := k.openRaw(ctx, log.With("component", "sink", "sink", "raw"))
	if err != nil {
		return nil, err
	}
	fan, err := startFanout(ctx, cfg, k, log, m.Topology(), engine.FanoutOptions{Raw: raw.Sink, Store: raw.Store})
	if err != nil {
		return nil, errors.Join(err, raw.Sink.Close())
	}
	return &delivery{snk: fan, offsets: raw.Store}, nil
}

// startFanout starts a fan-out over what the caller set in raw — Raw, or
// Reader (with ExternalRaw for a raw written outside it), and Store — with
// the rest taken from the configuration and every [[secondary]] opened.
// The caller keeps ownership of raw and its store when it fails.
func startFanout(ctx context.Context, cfg *config.Config, k kinds, log *slog.Logger, topo *metrics.Topology, raw engine.FanoutOptions) (*engine.Fanout, error) {
	role, err := engine.ParseRole(cfg.Role)
	if err != nil {
		return nil, fmt.Errorf("role: %w", err)
	}
	mode, err := engine.ParseRecoveryMode(cfg.RecoveryMode)
	if err != nil {
		return nil, fmt.Errorf("recovery_mode: %w", err)
	}
	secs, err := openSecondaries(ctx, cfg, k, log, topo)
	if err != nil {
		return nil, err
	}
	opts := engine.FanoutOptions{
		Raw: raw.Raw, Reader: raw.Reader, ExternalRaw: raw.ExternalRaw, Store: raw.Store,
		Secondaries:    secs,
		Role:           role,
		Mode:           mode,
		WindowRecords:  cfg.RecoveryWindowRecords,
		WindowTime:     cfg.RecoveryWindowTime,
		FlushInterval:  cfg.CoverageFlushInterval,
		HealthInterval: cfg.SinkHealthInterval,
		Observer:       topo,
		Logger:         log,
		Audit:          k.dq.audit(),
	}
	k.fc.fanoutOptions(cfg, &opts)       // admission, queue bytes, batch sizes, write results
	k.co.fanoutOptions(cfg, topo, &opts) // recovery windows claimed by lease
	fan, err := engine.NewFanout(ctx, opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start fan-out: %w", err), closeSecondaries(secs))
	}
	k.fc.watchQueues(fan)
	log.Info("raw-first topology", "offset_store", opts.Store.Where(), "secondaries", len(secs), "role", role.String())
	return fan, nil
}

// openSecondaries opens every [[secondary]] with its quarantine lane. A
// secondary that cannot be opened now is opened again at each delivery
// attempt; a quarantine directory that cannot be opened (local disk,
// permissions) fails the start.
func openSecondaries(ctx context.Context, cfg *config.Config, k kinds, log *slog.Logger, topo *metrics.Topology) ([]engine.SecondaryConfig, error) {
	var secs []engine.SecondaryConfig
	for _, sc := range cfg.Secondaries {
		secLog := log.With("component", "sink", "sink", sc.Name, "secondary", true)
		if !sc.Sink.Durable {
			secLog.Warn("secondary is not durable (durable = false): its commits do not wait for stable storage, so a power loss or crash of its host may lose records it acknowledged, and recovery will not send them again")
		}
		s, err := k.openSink(ctx, sc.Sink, sc.Name, secLog)
		if err != nil {
			// A secondary never gates the pipeline, not even at start: it
			// is opened again at each delivery attempt, and recovered from
			// raw once it opens.
			secLog.Warn("secondary cannot be opened; retrying at each delivery, recovering from raw once it opens", "err", err)
			s = &lazySink{name: sc.Sink.Type, maxBatch: k.maxBatch(sc.Sink), open: func(ctx context.Context) (sink.Sink, error) {
				return k.openSink(ctx, sc.Sink, sc.Name, secLog)
			}}
		}
		secCfg := engine.SecondaryConfig{Sink: k.dq.wrap(s, sc.Name), Name: sc.Name, QueueBatches: sc.QueueBatches, QueueBytes: sc.QueueMaxBytes,
			QuarantineBuffer: sc.QuarantineBuffer, QuarantineBytes: sc.QuarantineBufferBytes, StartAtEnd: sc.StartAtEnd}
		q, err := openQuarantine(ctx, k, sc, secLog)
		if err != nil {
			secs = append(secs, secCfg)
			return nil, errors.Join(fmt.Errorf("secondary %q: quarantine lane: %w", sc.Name, err), closeSecondaries(secs))
		}
		secCfg.Quarantine = q
		secs = append(secs, secCfg)
		topo.Secondary(sc.Name)
		topo.SecondaryDurable(sc.Name, sc.Sink.Durable)
	}
	return secs, nil
}

// openQuarantine opens a secondary's quarantine destination: a Postgres
// table (quarantine_postgres_url), else its NDJSON directory; nil (log
// and count only) when quarantine_max_bytes is 0. A table that cannot be
// opened now is opened at the lane's next write: quarantine is a view,
// and its server being down must not stop the node from starting (the
// lane sheds, counted, meanwhile).
func openQuarantine(ctx context.Context, k kinds, sc config.SecondaryConfig, log *slog.Logger) (engine.Quarantine, error) {
	switch {
	case sc.QuarantinePostgresURL != "":
		open := func(ctx context.Context) (*pgquarantine.Writer, error) {
			return pgquarantine.Open(ctx, pgquarantine.Options{DSN: sc.QuarantinePostgresURL, Table: sc.QuarantineTable})
		}
		w, err := open(ctx)
		if err == nil {
			return w, nil
		}
		log.Warn("quarantine table cannot be opened; opening it at the next write, shedding meanwhile", "table", sc.QuarantineTable, "err", err)
		return &lazyQuarantine{open: open}, nil
	case sc.QuarantineMaxBytes > 0 && sc.QuarantineDir != "":
		return quarantine.Open(quarantine.Options{FS: k.fs, Dir: sc.QuarantineDir, MaxBytes: sc.QuarantineMaxBytes})
	}
	return nil, nil
}

// closeSecondaries closes secondaries a fan-out never took over, with
// their quarantine lanes.
func closeSecondaries(secs []engine.SecondaryConfig) error {
	var errs []error
	for _, s := range secs {
		errs = append(errs, s.Sink.Close())
		if q, ok := s.Quarantine.(io.Closer); ok {
			errs = append(errs, q.Close())
		}
	}
	return errors.Join(errs...)
}

// countingGate counts what a source made durable.
type countingGate struct {
	name string
	g    source.Gate
	topo *metrics.Topology
}

func (c *countingGate) Write(ctx context.Context, recs []source.Record) error {
	if err := c.g.Write(ctx, recs); err != nil {
		return err
	}
	c.topo.SourceWritten(c.name, len(recs))
	return nil
}

// sources runs the producer listeners and the [[source]] entries under the
// write-ahead buffer's gate.
type sources struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	errs []error // errors of the last runs, returned by stop
}

// startSources starts every source: the producer listeners (already
// bound; nil when there are none) and the [[source]] entries. Each writes
// through gate — the write-ahead buffer's, or with gate = "raw" the
// sink's — so a position is committed only after the gate's durable
// write, and is restarted with backoff when it stops with an error.
// Store-managed sources keep their cursors in d.cursors, opened here
// (openCursors: one place whatever the secondaries). Each [[source]] has
// its share of the memory budget and writes under admission, and the
// flow controller pauses the pausable ones (sourceflow.go).
func startSources(cfg *config.Config, k kinds, gate admittingGate, ingress source.Source, d *delivery, tel *telemetry, log *slog.Logger) (*sources, error) {
	s := &sources{}
	topo := tel.m.Topology()
	type run struct {
		src   source.Source
		gate  source.Gate
		pause source.Pausable
	}
	var runs []run
	if ingress != nil {
		runs = append(runs, run{src: ingress, gate: gate}) // the ingress counts per answered frame itself
	}
	var stored []string // store-managed sources
	for _, sc := range cfg.Sources {
		sf := tel.fc.sourceFlow(cfg, sc.Name, len(cfg.Sources), log.With("component", "flow"))
		o, err := k.newSource(context.Background(), sc, sf, log, topo) // each source names itself in its logs
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", sc.Name, err)
		}
		if o.Source.Regime() == source.StoreManaged {
			stored = append(stored, o.Source.Name())
		}
		g := &countingGate{name: o.Source.Name(), g: tel.fc.gateFor(gate, sf.Estimator), topo: topo}
		runs = append(runs, run{src: o.Source, gate: g, pause: o.Pausable})
	}
	if len(stored) > 0 {
		cs, err := openCursors(context.Background(), cfg, k, d.offsets, stored, log.With("component", "source"))
		if err != nil {
			return nil, err
		}
		d.cursors = cs
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, r := range runs {
		src := r.src
		l := log.With("component", "source", "source", src.Name())
		forget := tel.addSource(src.Name(), r.pause)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer forget()
			if err := runSource(ctx, src, r.gate, d.cursors, topo, l); err != nil {
				s.mu.Lock()
				s.errs = append(s.errs, fmt.Errorf("source %q: %w", src.Name(), err))
				s.mu.Unlock()
			}
		}()
	}
	return s, nil
}

// runSource runs src until ctx ends, restarting it with capped exponential
// backoff whenever it stops on its own. It returns the error of the run
// that ctx ended (a shutdown cut short), if any.
func runSource(ctx context.Context, src source.Source, gate source.Gate, cursors source.CursorStore, topo *metrics.Topology, log *slog.Logger) error {
	pause := backoff.Backoff{Policy: backoff.Policy{Min: sourceBackoffFirst, Max: sourceBackoffMax}}
	for {
		topo.SourceStarted(src.Name())
		log.Info("source started", "regime", src.Regime().String())
		start := time.Now()
		err := src.Run(ctx, gate, cursors)
		topo.SourceStopped(src.Name())
		if ctx.Err() != nil {
			log.Info("source stopped")
			return err
		}
		if time.Since(start) >= sourceBackoffReset {
			pause.Reset()
		}
		if err == nil {
			err = errors.New("returned without an error")
		}
		d := pause.Next()
		log.Error("source stopped; restarting", "err", err, "backoff", d)
		topo.SourceRestarted(src.Name())
		if !backoff.Sleep(ctx, d) {
			return nil
		}
	}
}

// stop cancels every source and waits for them, at most until ctx ends
// (the listeners answer what they read, bounded by shutdown_timeout; a
// Kafka source still commits what is durable, bounded by its commit
// timeout). It must return before the write-ahead buffer closes.
func (s *sources) stop(ctx context.Context, log *slog.Logger) error {
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		log.Error("sources did not stop within shutdown_timeout")
		return fmt.Errorf("sources: %w", ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// lazyQuarantine is a quarantine table that could not be opened at
// start: each write first tries to open it, and fails (the lane sheds)
// until that succeeds.
type lazyQuarantine struct {
	open func(context.Context) (*pgquarantine.Writer, error)

	mu     sync.Mutex
	w      *pgquarantine.Writer
	closed bool
}

func (l *lazyQuarantine) Quarantine(ctx context.Context, recs []engine.QuarantinedRecord) error {
	l.mu.Lock()
	if l.w == nil && !l.closed {
		w, err := l.open(ctx)
		if err != nil {
			l.mu.Unlock()
			return fmt.Errorf("open quarantine table: %w", err)
		}
		l.w = w
	}
	w := l.w
	l.mu.Unlock()
	if w == nil {
		return errors.New("quarantine table is closed")
	}
	return w.Quarantine(ctx, recs)
}

func (l *lazyQuarantine) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.w == nil {
		return nil
	}
	return l.w.Close()
}

// lazySink is a secondary whose sink could not be opened at start. Every
// Commit first tries to open it; until that succeeds the Commit fails
// transiently, so the secondary's coverage lags and recovery replays raw
// into it later.
type lazySink struct {
	name     string
	maxBatch int
	open     func(context.Context) (sink.Sink, error)

	mu     sync.Mutex
	s      sink.Sink
	closed bool
}

func (l *lazySink) get(ctx context.Context) (sink.Sink, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	if l.closed {
		return nil, sink.Permanent(errors.New("sink is closed"))
	}
	s, err := l.open(ctx)
	if err != nil {
		return nil, sink.Transient(fmt.Errorf("open %s sink: %w", l.name, err))
	}
	l.s = s
	return s, nil
}

func (l *lazySink) Name() string { return l.name }

func (l *lazySink) MaxBatchSize() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s.MaxBatchSize()
	}
	return l.maxBatch
}

func (l *lazySink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	s, err := l.get(ctx)
	if err != nil {
		return sink.CommitResult{}, err
	}
	return s.Commit(ctx, b)
}

func (l *lazySink) Health(ctx context.Context) sink.Health {
	l.mu.Lock()
	s := l.s
	l.mu.Unlock()
	if s == nil {
		return sink.Health{State: sink.Down, Reason: "not opened yet"}
	}
	return s.Health(ctx)
}

func (l *lazySink) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.s == nil {
		return nil
	}
	return l.s.Close()
}
