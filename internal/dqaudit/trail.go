package dqaudit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/sink"
)

// Defaults and bounds of a Trail.
const (
	DefaultWindow = time.Minute
	DefaultSample = 16
	// MaxPending bounds the entries held for the Writer; past it the
	// oldest are dropped.
	MaxPending = 10_000
	// DefaultDirName is the trail's directory under data_dir, and
	// DefaultTable its PostgreSQL table.
	DefaultDirName = "dq-audit"
	DefaultTable   = "weir_dq_audit"
)

// Entry kinds.
const (
	KindOutcomes = "outcomes"
	KindRecovery = "recovery"
)

// Recovery modes, as engine.RecoveryMode names them.
const (
	ModeRehydrate      = "rehydrate"
	ModeSkipQuarantine = "skip-quarantine"
)

const (
	// writeChunk bounds the entries of one Writer.Write.
	writeChunk = 1000
	// writeTimeout bounds one write of the background goroutine.
	writeTimeout = 30 * time.Second
	// minTick is the shortest pause between two ticks.
	minTick = 5 * time.Millisecond
	// closeAttempts bounds Close's tries at the last flush.
	closeAttempts = 4
)

// Options configure a Trail. Zero fields take their defaults.
type Options struct {
	// Writer stores the entries; the Trail owns it and closes it in
	// Close. Required.
	Writer Writer
	// Window is the length of a window (DefaultWindow).
	Window time.Duration
	// Sample is how many rejected ids an outcomes entry keeps
	// (DefaultSample; negative: none).
	Sample int
	// Logger (slog.Default()).
	Logger *slog.Logger
	// Now is the clock that places records in windows (time.Now).
	Now func() time.Time
}

// Stats are a Trail's counters.
type Stats struct {
	Pending     int   // entries closed and not yet written
	Written     int64 // entries the Writer stored
	Dropped     int64 // entries dropped past MaxPending
	WriteErrors int64 // failed Writer.Write calls
}

type recKey struct{ sink, mode string }

// Trail aggregates outcomes and recovery windows and writes them, window
// by window, with its Writer. It is safe for concurrent use.
type Trail struct {
	o      Options
	stop   chan struct{} // closed by Close: the goroutine ends after its write
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	from, to  time.Time // the open window of recovery entries; from is zero when none is
	recs      []Entry
	lastRec   map[recKey]int // index in recs of the sink's last entry in the mode
	pending   []Entry
	inflight  int // entries taken from pending by a write in progress
	written   int64
	dropped   int64
	writeErrs int64
	closed    bool

	flushMu sync.Mutex // one write at a time
	wclosed bool       // the Writer is closed; under flushMu
}

// New starts a Trail; Close stops it.
func New(o Options) *Trail {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Sample == 0 {
		o.Sample = DefaultSample
	}
	o.Sample = max(o.Sample, 0)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Trail{o: o, stop: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		lastRec: map[recKey]int{}}
	go t.run(ctx)
	return t
}

// ErrTrailClosed is returned by Append after Close.
var ErrTrailClosed = errors.New("dqaudit: trail closed")

// Append writes the outcomes of one judged batch: one outcomes entry per
// (stream, sink, contract) of bs, filed under the window of the Trail's
// clock, all in one Writer.Write — one fdatasync, or one transaction — and
// returns once they are durable. A caller records the progress that
// covers the batch's records (a secondary's coverage, the drain's
// progress) only after Append returned nil: so every record that progress
// covers has its outcome in the trail, and a crash can only make a
// record's outcome appear twice (the batch judged again), never not at
// all. An error leaves nothing to retry here: the caller sends the batch
// again. Appends are serialised with each other and with the background
// writes of recovery entries.
func (t *Trail) Append(ctx context.Context, bs []Batch) error {
	from := t.o.Now().Truncate(t.o.Window)
	to := from.Add(t.o.Window)
	es := make([]Entry, 0, len(bs))
	for i := range bs {
		if b := &bs[i]; len(b.Obs) > 0 {
			es = append(es, t.entry(b, from, to))
		}
	}
	if len(es) == 0 {
		return nil
	}
	t.flushMu.Lock()
	err := ErrTrailClosed
	if !t.wclosed {
		err = t.o.Writer.Write(ctx, es)
	}
	t.flushMu.Unlock()
	t.mu.Lock()
	if err == nil {
		t.written += int64(len(es))
	} else if !errors.Is(err, ErrTrailClosed) {
		t.writeErrs++
	}
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("dqaudit: append %d entries: %w", len(es), err)
	}
	return nil
}

// entry is b's outcomes entry for the window [from, to).
func (t *Trail) entry(b *Batch, from, to time.Time) Entry {
	e := Entry{Kind: KindOutcomes, Stream: b.Stream, Sink: b.Sink, Contract: b.Contract, From: from, To: to,
		Outcomes: map[Outcome]int64{}}
	type group struct {
		g   IDGroup
		ids []byte
	}
	var groups []group
	same := func(g *IDGroup, k *IDGroup) bool {
		return g.Outcome == k.Outcome && g.Code == k.Code && g.Rule == k.Rule && slices.Equal(g.Warned, k.Warned)
	}
	j := -1 // the last record's group: the next one's, most often
	for i := range b.Obs {
		o := &b.Obs[i]
		if o.Outcome == Rejected && len(e.Sample) < t.o.Sample {
			e.Sample = append(e.Sample, o.ID.String())
		}
		k := IDGroup{Outcome: o.Outcome, Warned: o.Warned}
		if o.Outcome == Rejected {
			k.Code, k.Rule = o.Code, o.Rule
		}
		if j < 0 || !same(&groups[j].g, &k) {
			j = 0
			for j < len(groups) && !same(&groups[j].g, &k) {
				j++
			}
			if j == len(groups) {
				groups = append(groups, group{g: k})
			}
		}
		groups[j].ids = append(groups[j].ids, o.ID[:]...)
	}
	e.Records = make([]IDGroup, len(groups))
	for i := range groups {
		g := &groups[i].g
		n := int64(len(groups[i].ids) / len(sink.RecordID{}))
		e.Outcomes[g.Outcome] += n
		for _, w := range g.Warned {
			bump(&e.Rules, w, n)
		}
		if g.Outcome == Rejected {
			if g.Code != "" {
				bump(&e.Codes, g.Code, n)
			}
			if g.Rule != "" {
				bump(&e.Rules, g.Rule, n)
			}
		}
		e.Records[i] = *g
		e.Records[i].IDs = base64.StdEncoding.EncodeToString(groups[i].ids)
	}
	return e
}

func bump(m *map[string]int64, k string, n int64) {
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[k] += n
}

// Recovered notes that raw positions [lo, hi) were recovered into sinkName
// in mode ("rehydrate" or "skip-quarantine"). It joins the window to the
// sink's previous one in the same mode and time window when they touch or
// overlap. It implements engine.RecoveryAudit.
func (t *Trail) Recovered(sinkName string, lo, hi uint64, mode string) {
	if hi <= lo {
		return
	}
	if !t.lockOpen() {
		return
	}
	defer t.mu.Unlock()
	k := recKey{sinkName, mode}
	if i, ok := t.lastRec[k]; ok {
		if e := &t.recs[i]; lo <= e.Hi && hi >= e.Lo {
			e.Lo, e.Hi = min(e.Lo, lo), max(e.Hi, hi)
			return
		}
	}
	t.recs = append(t.recs, Entry{Kind: KindRecovery, Sink: sinkName, Lo: lo, Hi: hi, Mode: mode})
	t.lastRec[k] = len(t.recs) - 1
}

// lockOpen takes t.mu and opens the window of now (open); after Close it
// reports false and leaves t.mu unlocked.
func (t *Trail) lockOpen() bool {
	now := t.o.Now()
	t.mu.Lock()
	if !t.open(now) {
		t.mu.Unlock()
		return false
	}
	return true
}

// open closes the window if now is past it and opens the one holding now
// when none is; it reports false after Close. t.mu is held.
func (t *Trail) open(now time.Time) bool {
	if t.closed {
		return false
	}
	if !t.from.IsZero() && !now.Before(t.to) {
		t.roll(t.to)
	}
	if t.from.IsZero() {
		t.from = now.Truncate(t.o.Window)
		t.to = t.from.Add(t.o.Window)
	}
	return true
}

// roll moves the open window's entries, ending at end, to pending. t.mu
// is held.
func (t *Trail) roll(end time.Time) {
	if t.from.IsZero() {
		return
	}
	out := t.recs
	for i := range out {
		out[i].From, out[i].To = t.from, end
	}
	clear(t.lastRec)
	t.recs = nil
	t.from, t.to = time.Time{}, time.Time{}
	t.keep(out, false)
}

// keep adds es to pending — at the front when they come back from a failed
// write — and drops the oldest past MaxPending. t.mu is held.
func (t *Trail) keep(es []Entry, front bool) {
	if front {
		t.pending = append(es, t.pending...)
	} else {
		t.pending = append(t.pending, es...)
	}
	over := len(t.pending) + t.inflight - MaxPending
	if over <= 0 {
		return
	}
	over = min(over, len(t.pending))
	t.pending = slices.Delete(t.pending, 0, over)
	t.dropped += int64(over)
	t.o.Logger.Error("dq-audit entries dropped: the trail's writer has been failing and the pending entries passed their bound",
		"dropped", over, "dropped_total", t.dropped, "max_pending", MaxPending)
}

// Stats returns the trail's counters.
func (t *Trail) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Pending: len(t.pending) + t.inflight, Written: t.written, Dropped: t.dropped, WriteErrors: t.writeErrs}
}

// Flush closes the open window if its time has passed and writes every
// pending entry. The background goroutine does this every tick; Flush is
// for callers that want it now (tests with a fake clock, a shutdown).
func (t *Trail) Flush(ctx context.Context) error { return t.flush(ctx, false) }

// flush writes pending entries, in chunks, after closing the open window
// when it is due, or at once with force. Entries of a failed write go back
// to pending.
func (t *Trail) flush(ctx context.Context, force bool) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	if now := t.o.Now(); force || (!t.from.IsZero() && !now.Before(t.to)) {
		if now.After(t.to) {
			now = t.to
		}
		t.roll(now)
	}
	for len(t.pending) > 0 {
		batch := t.pending[:min(len(t.pending), writeChunk):min(len(t.pending), writeChunk)]
		t.pending = t.pending[len(batch):]
		t.inflight = len(batch)
		t.mu.Unlock()
		err := t.o.Writer.Write(ctx, batch)
		t.mu.Lock()
		t.inflight = 0
		if err != nil {
			t.writeErrs++
			t.keep(batch, true)
			n := len(t.pending)
			t.mu.Unlock()
			t.o.Logger.Warn("dq-audit write failed; the entries are kept and written again next tick",
				"pending", n, "err", err)
			return fmt.Errorf("dqaudit: write %d entries: %w", len(batch), err)
		}
		t.written += int64(len(batch))
	}
	if len(t.pending) == 0 {
		t.pending = nil // let a large backlog's array go
	}
	t.mu.Unlock()
	return nil
}

// run closes windows and writes them until Close; ctx cancels a write in
// progress.
func (t *Trail) run(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTimer(t.nextTick())
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		_ = t.flush(wctx, false) // logged and counted; retried next tick
		cancel()
		tick.Reset(t.nextTick())
	}
}

// nextTick is the pause until the open window ends, at most a Window.
func (t *Trail) nextTick() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.from.IsZero() {
		return t.o.Window
	}
	return min(max(t.to.Sub(t.o.Now()), minTick), t.o.Window)
}

// Close stops the goroutine — letting a write in progress finish unless
// ctx ends first, since a cancelled write may still have been stored and
// would be written again — then writes every pending entry and the open
// window (closed now), trying a few times while ctx lasts, and closes the
// Writer. It returns an error when entries remain unwritten. Add and
// Recovered do nothing after Close.
func (t *Trail) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	close(t.stop)
	select {
	case <-t.done:
	case <-ctx.Done():
		t.cancel()
		<-t.done
	}
	t.cancel()
	err := t.flush(ctx, true)
	b := backoff.Backoff{Policy: backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second}}
	for i := 1; err != nil && i < closeAttempts && backoff.Sleep(ctx, b.Next()); i++ {
		err = t.flush(ctx, true)
	}
	if err != nil {
		err = fmt.Errorf("dqaudit: close: %d entries not written: %w", t.Stats().Pending, err)
	}
	t.flushMu.Lock()
	t.wclosed = true
	cerr := t.o.Writer.Close()
	t.flushMu.Unlock()
	return errors.Join(err, cerr)
}
