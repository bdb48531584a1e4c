// Package sinkcore is the destination-independent half of the sinks that
// write a batch in one transaction or one produce call — pgsink, mysqlsink
// and kafkasink: the Commit skeleton that implements the sink package's
// retry protocol, the bounded bisection that isolates poison records, the
// health and last-error bookkeeping, the counters behind each sink's
// Stats, and the transport errors every driver treats as transient.
//
// # What a sink package provides
//
// A sink package builds a Core with New and hands it, in Config:
//
//   - Check, the pre-validation of one record in Go ("" means it may be
//     sent; anything else is the rejection's reason, with its reason code:
//     sink.CodeOversize for a record too large, sink.CodeDecode for bytes
//     the column's type cannot take, sink.CodeSinkRefused otherwise);
//   - CommitRows, which writes recs[idx...] in exactly one transaction and
//     commits it, returning the rows the server refused with a data error
//     (usually through Core.Bisect) or an error already classified with
//     sink.Transient or sink.Permanent;
//   - IsDataError, which says whether the server refused some row's data
//     rather than the statement or the connection;
//   - Ping and Close, for Health and Close;
//   - its name for error messages, the server's name for rejections, and
//     its ErrClosed, Timeout, MaxProbes and logger.
//
// Everything that speaks the destination's language stays in the sink
// package: statements or produce requests, error codes, how a failed probe
// is undone (a savepoint, a statement rollback; nothing for Kafka, whose
// records are idempotent by id), statement splitting, and table or topic
// checks. The sink package counts Statements itself; Core counts the rest.
package sinkcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weir-io/weir/sink"
)

// Config is what a database package gives New. Every field is required.
type Config struct {
	// Name prefixes error messages: "pgsink".
	Name string
	// Server names the database in a rejected row's reason: "postgres"
	// gives "postgres refused the row: …".
	Server string
	// ErrClosed is returned, marked permanent, by Commit after Close.
	ErrClosed error
	// Timeout bounds one Commit, its bisection included.
	Timeout time.Duration
	// MaxProbes bounds the bisection of Bisect.
	MaxProbes int
	// Log receives the rejection summary of a Commit.
	Log *slog.Logger

	// Check pre-validates a record: "" means it may be sent; otherwise
	// why it may not, and the reason code.
	Check func(r *sink.Record) (string, sink.Code)
	// CommitRows writes recs[idx...] in one transaction and commits it;
	// see the package documentation.
	CommitRows func(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error)
	// IsDataError reports whether err is the server refusing a row's data.
	IsDataError func(err error) bool
	// Ping checks that the server answers, within its own time limit.
	Ping func(ctx context.Context) error
	// Close releases the connections; Core calls it at most once.
	Close func() error
}

// Core implements Commit, Health and Close of a SQL sink on top of a
// Config. Commit and Close are serialised; Health may run concurrently.
type Core struct {
	cfg Config

	mu      sync.Mutex // serialises Commit and Close
	closed  atomic.Bool
	lastErr atomic.Pointer[string] // last Commit failure, nil after a success

	// Counters behind the database package's Stats. Core updates all but
	// Statements, which the database package adds to per statement sent.
	Batches    atomic.Int64 // Commit calls with at least one record
	Records    atomic.Int64 // records in those batches
	Committed  atomic.Int64 // records in committed transactions
	Rejected   atomic.Int64 // records rejected as poison
	Statements atomic.Int64 // statements sent, bisection included
	Commits    atomic.Int64 // transactions committed
	Probes     atomic.Int64 // probes spent isolating poison records
	Failures   atomic.Int64 // Commit calls that returned an error
}

// New returns a Core for cfg.
func New(cfg Config) *Core { return &Core{cfg: cfg} }

// Commit implements sink.Sink's Commit: records that fail Check are
// rejected on their own, the rest go to CommitRows under Timeout, and a
// failure is recorded for Health.
func (c *Core) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return sink.CommitResult{}, sink.Permanent(c.cfg.ErrClosed)
	}
	if len(b.Records) == 0 {
		return sink.CommitResult{}, nil
	}
	c.Batches.Add(1)
	c.Records.Add(int64(len(b.Records)))
	if err := ctx.Err(); err != nil {
		return c.fail(sink.Transient(fmt.Errorf("%s: commit: %w", c.cfg.Name, err)))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()

	var res sink.CommitResult
	good := make([]int, 0, len(b.Records))
	for i := range b.Records {
		if why, code := c.cfg.Check(&b.Records[i]); why != "" {
			res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Reason: why, Code: code.OrRefused()})
			continue
		}
		good = append(good, i)
	}
	if len(good) > 0 {
		bad, err := c.cfg.CommitRows(ctx, b.Records, good)
		if err != nil {
			return c.fail(err)
		}
		c.Commits.Add(1)
		res.Rejected = append(res.Rejected, bad...)
		c.Committed.Add(int64(len(good) - len(bad)))
	}
	if len(res.Rejected) > 0 {
		c.Rejected.Add(int64(len(res.Rejected)))
		c.cfg.Log.Warn("records rejected", "batch", len(b.Records), "rejected", len(res.Rejected),
			"first_index", res.Rejected[0].Index, "first_reason", res.Rejected[0].Reason)
	}
	c.lastErr.Store(nil)
	return res, nil
}

func (c *Core) fail(err error) (sink.CommitResult, error) {
	c.Failures.Add(1)
	msg := err.Error()
	c.lastErr.Store(&msg)
	return sink.CommitResult{}, err
}

// Health implements sink.Sink's Health: Down when closed or when Ping
// fails, Degraded while the last Commit failed, Healthy otherwise.
func (c *Core) Health(ctx context.Context) sink.Health {
	if c.closed.Load() {
		return sink.Health{State: sink.Down, Reason: "sink is closed"}
	}
	if err := c.cfg.Ping(ctx); err != nil {
		return sink.Health{State: sink.Down, Reason: fmt.Sprintf("%s: ping: %v", c.cfg.Name, err)}
	}
	if p := c.lastErr.Load(); p != nil {
		return sink.Health{State: sink.Degraded, Reason: *p}
	}
	return sink.Health{State: sink.Healthy}
}

// Close implements sink.Sink's Close: it waits for a running Commit and
// calls Config.Close once.
func (c *Core) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	return c.cfg.Close()
}

// Bisect isolates the rows the server refuses. groups partition the rows
// in doubt; a single group of several rows is known to fail, so Bisect
// starts from its halves. probe writes one group, undoing its effect when
// it fails (the caller's savepoint or statement rollback); Bisect counts
// it in Probes. A group refused with a data error is split again and a
// single refused row is rejected with the server's message; any other
// error ends Bisect and is returned unclassified. After MaxProbes probes
// of several rows the rows still in doubt are tried one at a time, so
// bisection costs at most MaxProbes + n probes and never rejects a good
// row.
func (c *Core) Bisect(groups [][]int, probe func(g []int) error) ([]sink.Rejection, error) {
	var bad []sink.Rejection
	budget := c.cfg.MaxProbes
	pending := groups
	if len(pending) == 1 && len(pending[0]) > 1 {
		g := pending[0]
		h := len(g) / 2
		pending = [][]int{g[:h], g[h:]}
	}
	for len(pending) > 0 {
		g := pending[0]
		pending = pending[1:]
		if len(g) > 1 {
			if budget <= 0 {
				// Out of bisection budget: try the rest row by row.
				for _, j := range g {
					pending = append(pending, []int{j})
				}
				continue
			}
			budget--
		}
		c.Probes.Add(1)
		err := probe(g)
		if err == nil {
			continue
		}
		if !c.cfg.IsDataError(err) {
			return nil, err
		}
		if len(g) == 1 {
			bad = append(bad, sink.Rejection{Index: g[0], Reason: c.cfg.Server + " refused the row: " + err.Error(), Code: sink.CodeSinkRefused})
			continue
		}
		h := len(g) / 2
		pending = append([][]int{g[:h], g[h:]}, pending...)
	}
	return bad, nil
}

// IsTransportError reports whether err is a failure of the connection
// rather than of the statement — a cancelled or expired context, an EOF, a
// closed, refused or reset connection, a broken pipe, any net.Error — which
// a retry of the whole batch can get past.
func IsTransportError(err error) bool {
	switch {
	case errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
