// Package pgsink is weir's PostgreSQL sink: every committed record becomes
// one row of a table.
//
// # Table
//
//	weir_record_id uuid PRIMARY KEY       -- the 16 id bytes, verbatim
//	payload        bytea | jsonb NOT NULL
//	source         text NOT NULL
//	durability     text NOT NULL          -- 'durable' or 'buffered'
//	received_at    timestamptz NOT NULL   -- when the daemon accepted it
//	committed_at   timestamptz NOT NULL DEFAULT now()
//
// The record id is stored as uuid rather than bytea: it is the same 16
// bytes, fixed width (no length header), compares faster in the primary key
// index, and prints as hex that matches the id's own form with dashes
// added. Ids are laid out as UUIDv7s (record.TimeOrdered: the record's
// time in the leading 48 bits), so the primary key grows at its right
// edge; ids written by versions before that are hashes whose version bits
// mean nothing, and sit in the same column unchanged.
//
// With MetadataColumns (metadata_columns = true) each row also keeps the
// record's key, headers and event time:
//
//	weir_key        bytea         -- NULL: no key ('' is an empty key)
//	weir_headers    jsonb         -- NULL: none; else an array in order,
//	                              -- [{"key":…,"value":…,"value_encoding":…}]
//	weir_event_time timestamptz   -- NULL: none; to the microsecond
//
// (the headers' form is package recjson's). The option is off by default,
// and then the sink neither writes nor needs these columns: a table made
// before they existed keeps working unchanged. With it on, an existing
// table without them gets them added at New when CreateTable is on
// (ALTER TABLE … ADD COLUMN IF NOT EXISTS: nullable, no rewrite, old rows
// read as having none); with CreateTable off New refuses the table and
// prints the ALTER TABLE to run. A raw table (below) always has them.
//
// The table may be schema-qualified ("ingest.events"); each part is used
// verbatim and quoted, so case matters. With CreateTable the table is
// created when missing; an existing table is checked at New and a missing
// or mistyped column, a missing primary key on weir_record_id, or an extra
// NOT NULL column without a default is reported by name.
//
// # Commit
//
// One transaction per batch, by one of two insert methods
// (Options.InsertMethod, insert_method). Either way a replayed record is
// skipped by the primary key, which makes every retry and replay
// idempotent, and the rows go in key order (sorted by id), so the
// primary-key index is filled in one ascending pass per batch.
//
// copy (the default): a batch is
//
//	BEGIN
//	COPY t (…) FROM STDIN (FORMAT binary)
//	COMMIT
//
// — the rows straight into the table, in COPY's binary row format, with
// no conflict clause, which is what makes it as fast as a bare COPY
// (docs/benchmarks_sinks.md): the server neither builds arrays nor
// inserts speculatively. A COPY that meets a row already stored (a unique
// violation, SQLSTATE 23505: a replay, or one id twice in the batch)
// fails as a whole and stores nothing, so the transaction is rolled back
// and the batch sent again by unnest (below), whose ON CONFLICT DO NOTHING
// skips the stored rows. Replays come in runs — a restarted drain
// re-sends the batches it had not recorded as done, a recovering
// secondary re-reads a window — so the following batches go by unnest too,
// until one of them stores every row it sends; then COPY again. A run of
// replays costs one failed COPY (Stats.Replays counts them). A duplicate
// on another unique index of the table is not a replay: unnest fails on
// it too, and it is isolated as a data error (below). COPY has no
// statement size limit, so a batch is never split. It keeps no state in
// the session, so it works through a pooler in any mode.
//
// Why not COPY into a temporary staging table and then INSERT … SELECT …
// ON CONFLICT DO NOTHING, on every batch: that was built and measured —
// 10–15% faster than unnest, about half as fast as a COPY straight into
// the table, since every row is written twice and goes through ON
// CONFLICT's speculative insertion — and it needs a temporary table per
// session, which a pooler in transaction mode does not keep.
//
// unnest: every batch is one statement,
//
//	INSERT INTO t (…) SELECT * FROM unnest($1::uuid[], $2::bytea[], …)
//	ON CONFLICT (weir_record_id) DO NOTHING
//
// its columns sent as binary array parameters of a cached prepared
// statement. A batch is split into several statements (same transaction)
// only when its bytes would pass MaxStatementBytes. Choose it for a server
// or proxy that does not pass COPY through, or to compare.
//
// Rules (CREATE RULE … ON INSERT) are not applied to COPY; triggers are.
//
// # Poison records
//
// What can be checked in Go is checked before sending: a payload over
// MaxPayloadBytes, invalid JSON (or invalid UTF-8) for a jsonb payload, and
// a source that is not valid UTF-8 or holds a NUL byte are rejected on
// their own. When the server still refuses the batch with a data error
// (SQLSTATE class 22, 23 or 54: a JSON value jsonb cannot hold, a CHECK
// constraint, a value too large for an index) — from COPY or from an
// INSERT — the transaction is started again and the batch is bisected
// under savepoints, with unnest statements whatever the insert method:
// each half is tried, halves that fail are split again, and a single row
// that fails is rejected with the server's message. Everything else of the batch is
// committed in the same transaction. Bisection takes about 2·k·log2(n)
// statements for k bad rows among n; after MaxProbes of them the rows
// still in doubt are tried one at a time, so a batch never costs more than
// MaxProbes + n statements and a good row is never dead-lettered.
//
// # Errors
//
// Connection failures, timeouts, serialization failures and deadlocks
// (40001, 40P01), an administrator's shutdown or pg_terminate_backend
// (57P01), a server starting up (57P03), insufficient resources (53…) and
// lock timeouts are transient: nothing of the batch was committed and the
// drain retries it. Authentication failures, a table or column dropped
// after New, missing privileges and the like are permanent, with a hint.
//
// # Raw mode
//
// With Options.Positions the table is primary raw (sink.Raw), the
// pipeline's system of record, and gains a column
//
//	weir_position  bigint PRIMARY KEY  -- the record's raw position
//	                                   -- (weir_record_id is then not unique)
//
// Positions come from the raw end row of the offsets table (OffsetsTable,
// beside the raw table): each commit's transaction raises that row by the
// number of rows it inserts and numbers them from its old value, so the
// rows and the end that counts them commit together, the row lock
// serialises writers, and an aborted transaction hands out nothing. Like
// the other raws the table is a log: the position is its primary key, and
// a replayed record is kept again at its new position (readers deduplicate
// on weir_record_id), so every position below the end holds a row. Rows
// the server refuses are found by bisection as above and the rest are
// inserted again with contiguous positions, because raw numbers only
// what it keeps. With the copy method the rows and their positions are
// copied into the raw table in the transaction that raised the raw end;
// raw has no conflict clause, so there is no replay fallback. The payload
// must be bytea: raw returns every payload
// byte for byte, which jsonb would not. A raw table always has the
// metadata columns, whatever MetadataColumns says, and ReadFrom returns
// them, so a secondary recovered from it gets each record's key, headers
// and event time; a raw table made before they existed gets them at New
// (as above). The same table also keeps the offset store (OffsetStore).
//
// # Durability
//
// Commit returns after COMMIT succeeded. Each connection turns
// synchronous_commit back on when the server or role default is off, so a
// committed batch is flushed to the server's WAL before Commit returns.
// With Options.AsyncCommit (a [[secondary]] with durable = false) each
// connection sets it off instead: the server stays consistent after a
// crash, but may have lost the last transactions it acknowledged.
package pgsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weir-io/weir/internal/pgopen"
	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBatchSize      = 4096
	DefaultTimeout           = 30 * time.Second
	DefaultHealthTimeout     = 2 * time.Second
	DefaultMaxPayloadBytes   = 64 << 20
	DefaultMaxStatementBytes = 64 << 20
	DefaultMaxProbes         = 128
	DefaultApplicationName   = "weir"
)

// Payload column types.
const (
	PayloadBytea = "bytea"
	PayloadJSONB = "jsonb"
)

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("pgsink: sink is closed")

// Options configure a Sink.
type Options struct {
	// DSN is a libpq connection string or URL.
	DSN string
	// Table to write to; "name" or "schema.name".
	Table string
	// PayloadType is PayloadBytea (default) or PayloadJSONB.
	PayloadType string
	// CreateTable creates the table when it does not exist.
	CreateTable bool
	// MaxBatchSize is what MaxBatchSize reports; zero means
	// DefaultMaxBatchSize. Larger batches are still accepted.
	MaxBatchSize int
	// Timeout bounds one Commit, including its bisection, and New's
	// connection and table checks. Zero means DefaultTimeout.
	Timeout time.Duration
	// HealthTimeout bounds the ping in Health. Zero means
	// DefaultHealthTimeout.
	HealthTimeout time.Duration
	// MaxPayloadBytes rejects larger payloads before sending. Zero means
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxStatementBytes splits a batch into several INSERTs (in the same
	// transaction) when its payloads add up to more. Zero means
	// DefaultMaxStatementBytes.
	MaxStatementBytes int
	// MaxProbes bounds bisection; see the package documentation. Zero
	// means DefaultMaxProbes.
	MaxProbes int
	// ApplicationName is the connections' application_name, unless the
	// DSN sets one. Empty means DefaultApplicationName.
	ApplicationName string
	// MetadataColumns also writes each record's key, headers and event
	// time into weir_key, weir_headers and weir_event_time (see the
	// package documentation). A raw table (Positions) always has them.
	MetadataColumns bool
	// Positions opens the table as primary raw (sink.Raw): every row gets
	// a weir_position, numbered by the raw end row of the offsets table in
	// the same transaction. The payload must be bytea.
	Positions bool
	// AsyncCommit runs the sink's transactions with synchronous_commit =
	// off (a [[secondary]] with durable = false): COMMIT returns before the
	// server flushed its WAL, so a crash of the server may lose the last
	// transactions it acknowledged (at most about three times its
	// wal_writer_delay). Not with Positions: raw is always durable.
	AsyncCommit bool
	// InsertMethod is InsertCopy (default) or InsertUnnest; see the
	// package documentation.
	InsertMethod string
	// Logger receives lifecycle events and rejected records; nil discards.
	Logger *slog.Logger
}

// Stats counts what the sink has done since New.
type Stats struct {
	Batches    int64 // Commit calls with at least one record
	Records    int64 // records in those batches
	Committed  int64 // records in committed transactions (replays included)
	Rejected   int64 // records rejected as poison
	Statements int64 // INSERT statements sent, bisection included
	Commits    int64 // transactions committed
	Probes     int64 // savepoint probes spent isolating poison records
	Failures   int64 // Commit calls that returned an error
	Replays    int64 // COPYs that met a stored row, after which batches went by unnest (copy method)
}

// Sink writes records to a PostgreSQL table. It implements sink.Sink.
type Sink struct {
	opts  Options
	ident pgx.Identifier
	table string // quoted, possibly schema-qualified
	pool  *pgopen.Pool
	log   *slog.Logger

	insertSQL string
	readSQL   string
	offsets   string // quoted offsets table (raw mode)

	// The copy method's (copy.go).
	copySQL   string       // COPY … FROM STDIN (FORMAT binary) of the columns a batch fills
	replaying bool         // batches go by unnest: a COPY met a stored row (commitRows is serialised)
	replays   atomic.Int64 // how often

	rawMu    sync.Mutex // one CommitRaw at a time: rawFirst
	rawFirst uint64     // the first position commitRows allocated

	// core runs Commit, Health and Close and keeps the counters.
	core *sinkcore.Core
}

var _ sink.Sink = (*Sink)(nil)

// Probe connects to the server of opts.DSN as the sink does — the same
// pool settings, application name and timeout — and pings it; it
// creates and checks no table (weir validate --connect). ctx bounds it.
func Probe(ctx context.Context, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	cfg, err := opts.poolConfig()
	if err != nil {
		return err
	}
	pool, err := pgopen.NewPool(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pgsink: connect: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgsink: connect: %w", err)
	}
	return nil
}

// New connects, creates or checks the table, and returns the sink.
func New(ctx context.Context, opts Options) (*Sink, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ident, err := parseTable(opts.Table)
	if err != nil {
		return nil, err
	}
	s := &Sink{opts: opts, ident: ident, table: ident.Sanitize(), offsets: offsetsIdent(ident).Sanitize()}
	s.log = opts.Logger.With("sink", "postgres", "table", s.table)
	s.core = sinkcore.New(sinkcore.Config{
		Name: "pgsink", Server: "postgres", ErrClosed: ErrClosed,
		Timeout: opts.Timeout, MaxProbes: opts.MaxProbes, Log: s.log,
		Check: s.check, CommitRows: s.commitRows, IsDataError: isDataError,
		Ping: s.pingTwice, Close: func() error { s.pool.Close(); return nil },
	})
	s.buildSQL()

	cfg, err := opts.poolConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	// Its Close is bounded: a server that stopped answering does not hold
	// the daemon's shutdown for pgx's 15 s per cancel request.
	pool, err := pgopen.NewPool(ctx, cfg)
	if err != nil {
		return nil, classify("connect", err, false)
	}
	if !opts.Positions {
		if err := s.stayRaw(ctx, pool.Pool); err != nil {
			pool.Close()
			return nil, err
		}
		opts = s.opts
	}
	if err := s.prepareTable(ctx, pool.Pool); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.Positions {
		if err := s.prepareRaw(ctx, pool.Pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	s.pool = pool
	return s, nil
}

// withDefaults fills in the defaults and refuses options that do not go
// together.
func (opts Options) withDefaults() (Options, error) {
	if opts.AsyncCommit && opts.Positions {
		return opts, errors.New("pgsink: a raw table is always durable (AsyncCommit with Positions)")
	}
	if opts.PayloadType == "" {
		opts.PayloadType = PayloadBytea
	}
	if opts.PayloadType != PayloadBytea && opts.PayloadType != PayloadJSONB {
		return opts, fmt.Errorf("pgsink: payload type %q: want %q or %q", opts.PayloadType, PayloadBytea, PayloadJSONB)
	}
	if opts.MaxBatchSize <= 0 {
		opts.MaxBatchSize = DefaultMaxBatchSize
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if opts.MaxStatementBytes <= 0 {
		opts.MaxStatementBytes = DefaultMaxStatementBytes
	}
	if opts.MaxProbes <= 0 {
		opts.MaxProbes = DefaultMaxProbes
	}
	if opts.ApplicationName == "" {
		opts.ApplicationName = DefaultApplicationName
	}
	if opts.InsertMethod == "" {
		opts.InsertMethod = InsertCopy
	}
	if opts.InsertMethod != InsertCopy && opts.InsertMethod != InsertUnnest {
		return opts, fmt.Errorf("pgsink: insert method %q: want %q or %q", opts.InsertMethod, InsertCopy, InsertUnnest)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Positions && opts.PayloadType != PayloadBytea {
		return opts, fmt.Errorf("pgsink: a raw table keeps payloads byte for byte, so its payload type must be %q, not %q", PayloadBytea, opts.PayloadType)
	}
	return opts, nil
}

// poolConfig is the connection pool for opts.DSN: the application name,
// a connect timeout within opts.Timeout, the pool's size, and each
// connection's synchronous_commit.
func (opts Options) poolConfig() (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		// The parse error can quote the DSN, password and all.
		return nil, errors.New("pgsink: the DSN does not parse (see the libpq connection string format)")
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = opts.ApplicationName
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > opts.Timeout {
		cfg.ConnConfig.ConnectTimeout = opts.Timeout
	}
	// One connection commits; a second keeps Health from queueing
	// behind a long Commit.
	cfg.MaxConns = 2
	if opts.Positions {
		// And the offset store and recovery's reads get their own.
		cfg.MaxConns = 4
	}
	cfg.MinConns = 0
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if opts.AsyncCommit {
			_, err := c.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', false)`)
			return err
		}
		_, err := c.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', false)
			WHERE current_setting('synchronous_commit') = 'off'`)
		return err
	}
	return cfg, nil
}

// buildSQL makes the insert statement (and, for raw, the read).
func (s *Sink) buildSQL() {
	cols := []string{"weir_record_id", "payload", "source", "durability", "received_at"}
	types := []string{"uuid", s.opts.PayloadType, "text", "text", "timestamptz"}
	if s.metadata() {
		cols = append(cols, "weir_key", "weir_headers", "weir_event_time")
		types = append(types, "bytea", "jsonb", "timestamptz")
	}
	conflict := "\nON CONFLICT (weir_record_id) DO NOTHING"
	if s.opts.Positions {
		cols, types = append(cols, "weir_position"), append(types, "bigint")
		conflict = "" // raw keeps a replayed record again, at its new position
		// The server sends no row past the byte bound $3: w.weir_run
		// sums, up to each row, $4 (what a record holds before its
		// bytes) and the payload, key and source — a lower bound of
		// sink.Positioned.MemSize, so every row ReadFrom takes is sent.
		// The first row is sent whatever its size (a run before it of 0).
		s.readSQL = fmt.Sprintf(`SELECT weir_position, weir_record_id, payload, source, durability, received_at,
	weir_key, weir_headers, weir_event_time
FROM (SELECT weir_position, weir_record_id, payload, source, durability, received_at,
		weir_key, weir_headers, weir_event_time,
		sum($4 + octet_length(payload) + coalesce(octet_length(weir_key), 0) + octet_length(source))
			OVER (ORDER BY weir_position ROWS UNBOUNDED PRECEDING) AS weir_run,
		$4 + octet_length(payload) + coalesce(octet_length(weir_key), 0) + octet_length(source) AS weir_size
	FROM %s WHERE weir_position >= $1 ORDER BY weir_position LIMIT $2) w
WHERE w.weir_run - w.weir_size < $3
ORDER BY weir_position`, s.table)
	}
	arrays := make([]string, len(types))
	for i, t := range types {
		arrays[i] = fmt.Sprintf("$%d::%s[]", i+1, t)
	}
	s.insertSQL = fmt.Sprintf("INSERT INTO %s (%s)\nSELECT * FROM unnest(%s)%s",
		s.table, strings.Join(cols, ", "), strings.Join(arrays, ", "), conflict)
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	s.copySQL = fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", s.table, strings.Join(quoted, ", "))
}

// metadata reports whether the sink writes key, headers and event time:
// with MetadataColumns, and always for a raw table, which recovery reads
// them back from.
func (s *Sink) metadata() bool { return s.opts.MetadataColumns || s.opts.Positions }

// Name implements sink.Sink.
func (s *Sink) Name() string { return "postgres" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// Table is the quoted table name the sink writes to.
func (s *Sink) Table() string { return s.table }

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	c := s.core
	return Stats{
		Batches: c.Batches.Load(), Records: c.Records.Load(), Committed: c.Committed.Load(),
		Rejected: c.Rejected.Load(), Statements: c.Statements.Load(), Commits: c.Commits.Load(),
		Probes: c.Probes.Load(), Failures: c.Failures.Load(), Replays: s.replays.Load(),
	}
}

// Health implements sink.Sink: Down when the server does not answer a ping
// within HealthTimeout, Degraded while the last Commit failed, Healthy
// otherwise.
func (s *Sink) Health(ctx context.Context) sink.Health { return s.core.Health(ctx) }

// pingTwice is Health's ping.
func (s *Sink) pingTwice(ctx context.Context) error {
	err := s.ping(ctx)
	if err != nil {
		// A pooled connection killed while idle fails the first ping;
		// the pool drops it, so try once more on a fresh one.
		err = s.ping(ctx)
	}
	return err
}

func (s *Sink) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.HealthTimeout)
	defer cancel()
	return s.pool.Ping(ctx)
}

// Close closes the connections. Committed data is already durable.
func (s *Sink) Close() error { return s.core.Close() }

// Commit implements sink.Sink; see the package documentation.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	if s.opts.Positions {
		res, _, err := s.CommitRaw(ctx, b)
		return res, err
	}
	return s.core.Commit(ctx, b)
}

// check pre-validates a record: "" means it may be sent.
func (s *Sink) check(r *sink.Record) (string, sink.Code) {
	if len(r.Payload) > s.opts.MaxPayloadBytes {
		return fmt.Sprintf("pgsink: payload of %d bytes exceeds the limit of %d", len(r.Payload), s.opts.MaxPayloadBytes), sink.CodeOversize
	}
	if !utf8.ValidString(r.Source) || containsNUL(r.Source) {
		return "pgsink: source is not valid UTF-8 text (or holds a NUL byte)", sink.CodeDecode
	}
	if s.opts.PayloadType == PayloadJSONB {
		if !utf8.Valid(r.Payload) {
			return "pgsink: payload is not valid UTF-8, so not JSON for the jsonb column", sink.CodeDecode
		}
		if !json.Valid(r.Payload) {
			return "pgsink: payload is not valid JSON for the jsonb column", sink.CodeDecode
		}
	}
	return "", 0
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// commitRows inserts recs[idx...] in one transaction and commits it,
// isolating data errors to their rows. The rejections it returns index
// recs. It is the sinkcore.Config's CommitRows.
func (s *Sink) commitRows(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, classify("connect", err, false)
	}
	defer conn.Release()
	closed := func() bool { return conn.Conn().IsClosed() }

	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, classify("begin", err, closed())
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// again rolls tx back and begins another on the same connection. tx
	// is replaced only by a transaction that began: the deferred Rollback
	// must never meet a nil one.
	again := func() error {
		_ = tx.Rollback(ctx)
		next, err := conn.Begin(ctx)
		if err != nil {
			return classify("begin", err, closed())
		}
		tx = next
		return nil
	}

	pos, err := s.number(ctx, tx, recs, idx)
	if err == nil {
		err = s.insertRows(ctx, tx, recs, idx, pos)
	}
	if err != nil && s.replayed(err) && ctx.Err() == nil {
		// Some row is stored already: again, skipping those.
		if err := again(); err != nil {
			return nil, err
		}
		err = s.insertRows(ctx, tx, recs, idx, pos)
	}
	var bad []sink.Rejection
	if err != nil && isDataError(err) && ctx.Err() == nil {
		s.log.Info("batch refused with a data error; isolating the bad rows", "rows", len(idx), "err", err)
		if err := again(); err != nil {
			return nil, err
		}
		if pos, err = s.number(ctx, tx, recs, idx); err == nil {
			bad, err = s.isolate(ctx, tx, recs, idx, pos)
		}
		if err == nil && s.opts.Positions && len(bad) > 0 {
			// Raw numbers only what it keeps, contiguously: insert
			// the good rows again with their own positions.
			if err := again(); err != nil {
				return nil, err
			}
			idx = without(idx, bad)
			if pos, err = s.number(ctx, tx, recs, idx); err == nil && len(idx) > 0 {
				err = s.insertRows(ctx, tx, recs, idx, pos)
			}
		}
	}
	if err != nil {
		return nil, classify("insert", err, closed())
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, classify("commit", err, closed())
	}
	if pos != nil && len(idx) > 0 {
		s.rawFirst = uint64(pos[idx[0]])
	}
	return bad, nil
}

// number gives recs[idx...] consecutive raw positions allocated in tx,
// indexed like recs; nil when the sink is not raw.
func (s *Sink) number(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int) ([]int64, error) {
	if !s.opts.Positions || len(idx) == 0 {
		return nil, nil
	}
	first, err := s.allocate(ctx, tx, len(idx))
	if err != nil {
		return nil, err
	}
	pos := make([]int64, len(recs))
	for k, j := range idx {
		pos[j] = int64(first) + int64(k)
	}
	return pos, nil
}

// without returns idx minus the rejected indexes.
func without(idx []int, bad []sink.Rejection) []int {
	drop := make(map[int]bool, len(bad))
	for _, r := range bad {
		drop[r.Index] = true
	}
	out := make([]int, 0, len(idx))
	for _, j := range idx {
		if !drop[j] {
			out = append(out, j)
		}
	}
	return out
}

// chunks splits idx so that no statement carries more than
// MaxStatementBytes of payload.
func (s *Sink) chunks(recs []sink.Record, idx []int) [][]int {
	var out [][]int
	start, size := 0, 0
	for i, j := range idx {
		n := len(recs[j].Payload) + len(recs[j].Source) + 64
		if s.metadata() {
			n += metaBytes(&recs[j])
		}
		if i > start && size+n > s.opts.MaxStatementBytes {
			out = append(out, idx[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, idx[start:])
}

// insertAll inserts recs[idx...] by unnest, returning how many rows were
// inserted (not skipped as stored already).
func (s *Sink) insertAll(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int, pos []int64) (int64, error) {
	var n int64
	for _, c := range s.chunks(recs, idx) {
		tag, err := s.insertUnnest(ctx, tx, recs, c, pos)
		if err != nil {
			return n, err
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// columnsOf builds the five column arrays for recs[idx...].
func columnsOf(recs []sink.Record, idx []int) (ids [][16]byte, payloads [][]byte, sources, durs []string, recv []time.Time) {
	ids = make([][16]byte, len(idx))
	payloads = make([][]byte, len(idx))
	sources = make([]string, len(idx))
	durs = make([]string, len(idx))
	recv = make([]time.Time, len(idx))
	for k, j := range idx {
		r := &recs[j]
		ids[k] = r.ID
		payloads[k] = r.Payload
		if payloads[k] == nil {
			payloads[k] = []byte{} // NULL would violate NOT NULL
		}
		sources[k] = r.Source
		durs[k] = r.Durability.String()
		recv[k] = r.Received
	}
	return
}

func (s *Sink) insertUnnest(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int, pos []int64) (pgconn.CommandTag, error) {
	s.core.Statements.Add(1)
	return tx.Exec(ctx, s.insertSQL, s.rowsOf(recs, idx, pos).args()...)
}

// isolate inserts recs[idx...] inside tx, which is fresh, bisecting under
// savepoints to find the rows the server refuses. It returns those rows'
// rejections; the rest are inserted.
func (s *Sink) isolate(ctx context.Context, tx pgx.Tx, recs []sink.Record, idx []int, pos []int64) ([]sink.Rejection, error) {
	return s.core.Bisect(s.chunks(recs, idx), func(g []int) error { return s.probe(ctx, tx, recs, g, pos) })
}

// probe inserts one group under a savepoint, rolling back to it on error.
func (s *Sink) probe(ctx context.Context, tx pgx.Tx, recs []sink.Record, g []int, pos []int64) error {
	if _, err := tx.Exec(ctx, "SAVEPOINT weir_probe"); err != nil {
		return err
	}
	_, err := s.insertUnnest(ctx, tx, recs, g, pos)
	if err != nil {
		if !isDataError(err) {
			return err
		}
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT weir_probe; RELEASE SAVEPOINT weir_probe"); rerr != nil {
			return rerr
		}
		return err
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT weir_probe")
	return err
}
