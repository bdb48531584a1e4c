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
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/quarantine/pgquarantine"
	"github.com/weir-io/weir/internal/tap"
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

// delivery is what the drain (or, with gate = "raw", the sources'
// gate) delivers to, the offset store beside raw when there are
// secondaries, and where store-managed sources keep their cursors.
type delivery struct {
	snk  sink.Sink    // the pending sink, wrapped by the contracts when it is the only one
	pend *pendingSink // snk before the contracts

	// offsets is set, nil without secondaries, before pend opens.
	offsets *engine.OffsetStore
}

// primaryLogName is the name the [sink] goes by in the log (its sink
// attribute): its kind, or "raw" as the primary raw of secondaries.
func primaryLogName(cfg *config.Config) string {
	if len(cfg.Secondaries) > 0 {
		return "raw"
	}
	return cfg.Sink.Type
}

// openDelivery opens, in the background (pendingSink), what the node
// delivers to, and pushes its close on st. Without secondaries it is the
// [sink], exactly as configured. With secondaries the [sink] is primary
// raw, in its raw (positions) mode with the offset store beside it,
// behind a fan-out that feeds the secondaries after raw's durable ack.
func openDelivery(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, k kinds, log *slog.Logger, tel *telemetry) *delivery {
	d := &delivery{}
	name := primaryLogName(cfg)
	open := func(ctx context.Context) (sink.Sink, error) {
		return k.openSink(ctx, cfg.Sink, name, log.With("component", "sink", "sink", name))
	}
	if len(cfg.Secondaries) > 0 {
		open = func(ctx context.Context) (sink.Sink, error) {
			raw, err := k.openRaw(ctx, log.With("component", "sink", "sink", "raw"))
			if err != nil {
				return nil, err
			}
			fan, err := startFanout(ctx, cfg, k, log, tel.m.Topology(), engine.FanoutOptions{Raw: raw.Sink, Store: raw.Store})
			if err != nil {
				return nil, errors.Join(err, raw.Sink.Close())
			}
			d.offsets = raw.Store
			return fan, nil
		}
	}
	d.pend = openPending(name, k.maxBatch(cfg.Sink), open, log.With("component", "sink", "sink", name))
	st.PushClose("sink", d.pend.Close)
	tel.h.WatchDegraded(d.pend.degraded)
	d.snk = d.pend
	if len(cfg.Secondaries) == 0 {
		// The contracts' rejects go to the drain's dead letter, durably,
		// before the buffer lets go of them.
		d.snk = k.dq.wrap(d.pend, name)
	}
	return d
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

// openSecondaries opens every [[secondary]] with its quarantine lane.
// Each sink opens in the background (pendingSink): a secondary never
// gates the pipeline, not even at start — until it opens its commits fail
// transiently, its coverage lags, and recovery replays raw into it once
// it is open. A quarantine directory that cannot be opened (local disk,
// permissions) fails the start.
func openSecondaries(ctx context.Context, cfg *config.Config, k kinds, log *slog.Logger, topo *metrics.Topology) ([]engine.SecondaryConfig, error) {
	var secs []engine.SecondaryConfig
	for _, sc := range cfg.Secondaries {
		secLog := log.With("component", "sink", "sink", sc.Name, "secondary", true)
		if !sc.Sink.Durable {
			secLog.Warn("secondary is not durable (durable = false): its commits do not wait for stable storage, so a power loss or crash of its host may lose records it acknowledged, and recovery will not send them again")
		}
		s := openPending(sc.Name, k.maxBatch(sc.Sink), func(ctx context.Context) (sink.Sink, error) {
			return k.openSink(ctx, sc.Sink, sc.Name, secLog)
		}, secLog)
		secCfg := engine.SecondaryConfig{Sink: k.dq.wrap(s, sc.Name), Name: sc.Name, QueueBatches: sc.QueueBatches, QueueBytes: sc.QueueMaxBytes,
			QuarantineBuffer: sc.QuarantineBuffer, QuarantineBytes: sc.QuarantineBufferBytes, StartAtEnd: sc.StartAtEnd, MaxAttempts: sc.MaxAttempts,
			Tap: k.tap.Point(secondaryTap(sc.Name)), QuarantineTap: k.tap.Point(quarantineTap(sc.Name))}
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
// and count only) when quarantine_max_bytes is 0. The table is opened at
// the lane's first write, not at start: quarantine is a view, and its
// server being down or not answering must not stop or slow the node's
// start (the lane sheds, counted, meanwhile).
func openQuarantine(ctx context.Context, k kinds, sc config.SecondaryConfig, log *slog.Logger) (lane.Lane, error) {
	switch {
	case sc.QuarantinePostgresURL != "":
		log.Info("quarantine table opens at the lane's first write", "table", sc.QuarantineTable)
		return &lazyQuarantine{open: func(ctx context.Context) (*pgquarantine.Writer, error) {
			return pgquarantine.Open(ctx, pgquarantine.Options{DSN: sc.QuarantinePostgresURL, Table: sc.QuarantineTable})
		}}, nil
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

// countingGate counts what a source made durable, and shows what it
// writes at its tap point.
type countingGate struct {
	name string
	g    source.Gate
	topo *metrics.Topology
	tap  *tap.Point
}

func (c *countingGate) Write(ctx context.Context, recs []source.Record) error {
	if c.tap.Active() {
		c.tap.Offer(len(recs), func(i int) tap.Record { return tap.FromSource(&recs[i]) })
	}
	if err := c.g.Write(ctx, recs); err != nil {
		return err
	}
	c.topo.SourceWritten(c.name, len(recs))
	return nil
}

// startSources starts every source as a part of st: the producer
// listeners (the socket and the HTTP door, already bound; none with gate =
// "raw") and the [[source]]
// entries. Each writes through gate — the write-ahead buffer's, or with
// gate = "raw" the sink's — so a position is committed only after the
// gate's durable write, and is restarted with backoff when it stops with
// an error. Store-managed sources keep their cursors where openCursors
// says (one place whatever the secondaries); when that is beside raw,
// they wait for raw to open. Each [[source]] has its share of the memory
// budget and writes under admission, and the flow controller pauses the
// pausable ones (sourceflow.go). Stopping a source waits for it: the
// listeners answer what they read, a Kafka source still commits what is
// durable — all within the node's shutdown deadline. With gate = "raw"
// the [[source]]s start reading once the [sink] has opened: until then
// there is nowhere to make a record durable.
// listener is a producer listener (the socket, the HTTP door) and the
// gate it writes through.
type listener struct {
	src  source.Source
	gate source.Gate
}

func startSources(st *lifecycle.Stack, cfg *config.Config, k kinds, gate admittingGate, ingresses []listener, d *delivery, tel *telemetry, log *slog.Logger) error {
	topo := tel.m.Topology()
	type run struct {
		src   source.Source
		gate  source.Gate
		pause source.Pausable
	}
	var runs []run
	for _, in := range ingresses {
		runs = append(runs, run{src: in.src, gate: in.gate}) // an ingress counts per answer itself
	}
	var stored []string // store-managed sources
	for _, sc := range cfg.Sources {
		sf := tel.fc.sourceFlow(cfg, sc.Name, len(cfg.Sources), log.With("component", "flow"))
		o, err := k.newSource(context.Background(), sc, sf, log, topo) // each source names itself in its logs
		if err != nil {
			return fmt.Errorf("source %q: %w", sc.Name, err)
		}
		if o.Source.Regime() == source.StoreManaged {
			stored = append(stored, o.Source.Name())
		}
		g := &countingGate{name: o.Source.Name(), g: tel.fc.gateFor(gate, sf.Estimator), topo: topo, tap: tel.tap.Point(sourceTap(sc.Name))}
		runs = append(runs, run{src: o.Source, gate: g, pause: o.Pausable})
	}
	var cursors source.CursorStore
	if len(stored) > 0 {
		cs, err := sourceCursors(st, cfg, k, d, stored, log.With("component", "source"))
		if err != nil {
			return err
		}
		cursors = cs
	}
	for _, r := range runs {
		src := r.src
		l := log.With("component", "source", "source", src.Name())
		forget := tel.addSource(src.Name(), r.pause)
		st.Push("source "+src.Name(), goStop(func(ctx context.Context) error {
			defer forget()
			if cfg.Gate == "raw" {
				if err := d.pend.wait(ctx); err != nil {
					return nil // stopped before the sink opened
				}
			}
			return runSource(ctx, src, r.gate, cursors, topo, l)
		}))
	}
	return nil
}

// sourceCursors opens the store-managed sources' cursor store: at once
// when it is in data_dir alone (gate = "buffer" without secondaries),
// else once raw has opened (pendingCursors).
func sourceCursors(st *lifecycle.Stack, cfg *config.Config, k kinds, d *delivery, stored []string, log *slog.Logger) (source.CursorStore, error) {
	if cfg.Gate != "raw" && len(cfg.Secondaries) == 0 {
		return openCursors(context.Background(), cfg, k, nil, stored, log)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.PushClose("source cursor store", func() error { cancel(); return nil })
	return openCursorsWhen(ctx, d.pend.ready, func(ctx context.Context) (source.CursorStore, error) {
		return openCursors(ctx, cfg, k, d.offsets, stored, log)
	}, log), nil
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

// lazyQuarantine is a quarantine table opened at the lane's first write:
// each write first tries to open it, and fails (the lane sheds) until
// that succeeds.
type lazyQuarantine struct {
	open func(context.Context) (*pgquarantine.Writer, error)

	mu     sync.Mutex
	w      *pgquarantine.Writer
	closed bool
}

func (l *lazyQuarantine) Reject(ctx context.Context, recs []lane.Rejected) error {
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
	return w.Reject(ctx, recs)
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
