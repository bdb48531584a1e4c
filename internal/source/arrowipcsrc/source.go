package arrowipcsrc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/source"
)

// Defaults for Options.
const (
	DefaultPollInterval     = 250 * time.Millisecond
	DefaultMaxBatchRecords  = 1024
	DefaultMaxBatchBytes    = 4 << 20
	DefaultMaxMessageBytes  = 256 << 20
	DefaultMaxMetadataBytes = 16 << 20
	DefaultMaxBatchRows     = 1 << 22
	minMaxBatchBytes        = 64 << 10
	fingerprintBytes        = 1024
)

// Options configure New. Name and Glob are required.
type Options struct {
	// Name is the source's name and its key in the cursor store.
	Name string
	// Glob selects the files (filepath.Match syntax), e.g.
	// "/data/in/*.arrow*". They are read in name order.
	Glob string
	// PollInterval: how often the files are looked at when there was
	// nothing to read (default DefaultPollInterval).
	PollInterval time.Duration
	// MaxBatchRecords and MaxBatchBytes (payload bytes) bound one gate
	// write (defaults DefaultMaxBatchRecords, and DefaultMaxBatchBytes or,
	// with Prefetch, Prefetch ÷ the estimated expansion, at most
	// DefaultMaxBatchBytes).
	MaxBatchRecords int
	MaxBatchBytes   int
	// MaxMessageBytes bounds one IPC message's body (default
	// DefaultMaxMessageBytes): a message claiming more is corrupt, and the
	// rest of its file is quarantined.
	MaxMessageBytes int64
	// MaxBatchRows bounds one record batch's rows (default
	// DefaultMaxBatchRows): a batch claiming more is undecodable. Rows can
	// take no bytes at all (a null column; no column), so its bytes do
	// not bound them.
	MaxBatchRows int64
	// Columns are the columns that become each record's key, event time
	// and headers (arrowrec.Columns).
	Columns arrowrec.Columns
	// OnCommit, if set, is called before each cursor save for every file
	// whose position moved: the file's key (FileKey), the index of the
	// next record batch and how many of its rows are durable.
	OnCommit func(file string, batch, row int64)
	Logger   *slog.Logger
	// Prefetch, if > 0, bounds MaxBatchBytes by the source's share of
	// the memory budget; Estimator sizes it and is told every batch.
	Prefetch  int64
	Estimator *flow.Estimator
	// Metrics counts what was made durable; nil counts nothing.
	Metrics *Metrics
}

// Source reads a directory of Arrow IPC files and streams.
type Source struct {
	opts  Options
	log   *slog.Logger
	files []*file
	pause source.Pauser
}

var (
	_ source.Source   = (*Source)(nil)
	_ source.Pausable = (*Source)(nil)
)

// New checks opts and returns a source.
func New(opts Options) (*Source, error) {
	if opts.Name == "" || opts.Glob == "" {
		return nil, errors.New("arrowipcsrc: Name and Glob are required")
	}
	if _, err := filepath.Match(opts.Glob, ""); err != nil {
		return nil, fmt.Errorf("arrowipcsrc: bad glob %q: %w", opts.Glob, err)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxBatchRecords <= 0 {
		opts.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if opts.MaxBatchRows <= 0 {
		opts.MaxBatchRows = DefaultMaxBatchRows
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = DefaultMaxBatchBytes
		if opts.Prefetch > 0 {
			ratio := flow.DefaultColdRatio
			if opts.Estimator != nil {
				ratio = opts.Estimator.Ratio()
			}
			opts.MaxBatchBytes = int(max(min(int64(float64(opts.Prefetch)/max(ratio, 1)), DefaultMaxBatchBytes), minMaxBatchBytes))
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Source{opts: opts, log: opts.Logger.With("component", "source", "source", opts.Name)}
	s.pause.OnChange = func(paused bool) {
		s.log.Info("arrow_ipc source paused (reading stopped) or resumed", "paused", paused)
	}
	return s, nil
}

// Name implements source.Source.
func (s *Source) Name() string { return s.opts.Name }

// Regime is store-managed: the cursor lives in the offset store.
func (s *Source) Regime() source.Regime { return source.StoreManaged }

// Replayable is true: the files can be read again.
func (s *Source) Replayable() bool { return true }

// Pause stops reading; the batch in hand is still made durable.
func (s *Source) Pause() { s.pause.Pause() }

// Resume reads again.
func (s *Source) Resume() { s.pause.Resume() }

// FileKey names a file generation in positions and ids: "dev:ino:gen".
func FileKey(dev, ino uint64, gen uint32) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10) + ":" + strconv.FormatUint(uint64(gen), 10)
}

type cursor struct {
	Version int     `json:"v"`
	Files   []*file `json:"files"`
}

// Run reads until ctx ends (then it returns nil) or the gate or the cursor
// store fails. A failed gate write returns: the daemon runs the source
// again, from its saved cursor.
func (s *Source) Run(ctx context.Context, gate source.Gate, cursors source.CursorStore) error {
	if gate == nil || cursors == nil {
		return errors.New("arrowipcsrc: a gate and a cursor store are required")
	}
	defer s.closeAll()
	c, err := cursors.Load(ctx, s.opts.Name)
	if err != nil {
		return fmt.Errorf("arrowipcsrc: %s: load cursor: %w", s.opts.Name, err)
	}
	s.files = nil
	if len(c) > 0 {
		var cur cursor
		if err := json.Unmarshal(c, &cur); err != nil || cur.Version != 1 {
			return fmt.Errorf("arrowipcsrc: %s: unreadable cursor (%v): refusing to guess a position", s.opts.Name, err)
		}
		s.files = cur.Files
	}
	for {
		if err := s.pause.Wait(ctx); err != nil || ctx.Err() != nil {
			return nil
		}
		if err := s.scan(); err != nil {
			return err
		}
		recs, moves, err := s.collect()
		if err != nil {
			return err
		}
		if len(moves) == 0 {
			t := time.NewTimer(s.opts.PollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		if len(recs) > 0 {
			if e := s.opts.Estimator; e != nil {
				e.Observe(source.Sizes(recs))
			}
			if err := gate.Write(ctx, recs); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("arrowipcsrc: %s: gate: %w", s.opts.Name, err)
			}
		}
		if err := s.commit(ctx, cursors, moves); err != nil {
			return err
		}
	}
}

// commit moves every file's cursor to where the durable batch left it and
// saves the cursor.
func (s *Source) commit(ctx context.Context, cursors source.CursorStore, moves []move) error {
	for _, m := range moves {
		m.f.Off, m.f.Batch, m.f.Row, m.f.Done = m.to.off, m.to.batch, m.to.row, m.to.done
		s.fingerprint(m.f)
		if s.opts.OnCommit != nil {
			s.opts.OnCommit(m.f.key(), m.to.batch, m.to.row)
		}
		s.opts.Metrics.add(s.opts.Name, m)
		if m.to.done {
			s.log.Info("arrow file read to its end", "path", m.f.Path, "file", m.f.key(), "batches", m.to.batch)
			if fi, err := m.f.fd.Stat(); err == nil {
				m.f.DoneSize, m.f.DoneMTime = fi.Size(), fi.ModTime().UnixNano()
			}
			m.f.close()
		}
	}
	b, err := json.Marshal(cursor{Version: 1, Files: s.files})
	if err != nil {
		return fmt.Errorf("arrowipcsrc: %s: encode cursor: %w", s.opts.Name, err)
	}
	// The batch is durable: save even if ctx has just ended.
	if err := cursors.Save(context.WithoutCancel(ctx), s.opts.Name, b); err != nil {
		return fmt.Errorf("arrowipcsrc: %s: save cursor: %w", s.opts.Name, err)
	}
	return nil
}

func (s *Source) closeAll() {
	for _, f := range s.files {
		f.close()
	}
}
