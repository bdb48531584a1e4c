// Package mysqlsink is weir's MySQL and MariaDB sink: every committed
// record becomes one row of an InnoDB table.
//
// # Table
//
//	weir_record_id BINARY(16) PRIMARY KEY
//	payload        LONGBLOB | JSON NOT NULL
//	source         VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL
//	durability     VARCHAR(16) NOT NULL       -- 'durable' or 'buffered'
//	received_at    DATETIME(6) NOT NULL       -- UTC
//	committed_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)  -- UTC
//
// The table ("name" or "database.name") is created when missing, and an
// existing one is checked at New: a missing or mistyped column, a primary
// key that is not weir_record_id alone, a non-InnoDB engine, or an extra
// NOT NULL column without a default is reported by name.
//
// With MetadataColumns (metadata_columns = true) each row also keeps the
// record's key, headers and event time:
//
//	weir_key        LONGBLOB NULL      -- NULL: no key ('' is an empty key)
//	weir_headers    JSON NULL          -- NULL: none; else an array in order,
//	                                   -- [{"key":…,"value":…,"value_encoding":…}]
//	weir_event_time DATETIME(6) NULL   -- UTC; NULL: none
//
// (the headers' form is package recjson's). The option is off by default,
// and then the sink neither writes nor needs these columns: a table made
// before they existed keeps working unchanged. With it on, a table
// without them gets the missing ones added at New (ALTER TABLE … ADD
// COLUMN, nullable; old rows read as having none) — the sink creates its
// table anyway, so it may also extend it. A record whose event time falls
// outside DATETIME's range is rejected like one with such a receive time.
//
// # Commit
//
// A batch is one multi-row
//
//	INSERT INTO t (…) VALUES (…),(…),…
//	ON DUPLICATE KEY UPDATE weir_record_id = weir_record_id
//
// and one COMMIT: N records → 1 INSERT → 1 commit. The statement is split
// only when it would not fit in the server's max_allowed_packet, read at
// New; Stats counts statements and commits so that this can be watched.
// The arguments are interpolated by the driver, so an INSERT is a single
// round trip.
//
// ON DUPLICATE KEY UPDATE, not INSERT IGNORE: IGNORE turns every data
// error into a warning and stores a truncated or zeroed value, which would
// be silent loss. Each connection runs with STRICT_ALL_TABLES added to its
// sql_mode and time_zone '+00:00', so a bad value is an error.
//
// # Poison records
//
// Checked in Go before sending: the payload size (MaxPayloadBytes, and
// what fits in max_allowed_packet), valid JSON and UTF-8 for a JSON
// payload, a valid UTF-8 source of at most 255 characters, and a receive
// time within DATETIME's range. A data error the server still raises
// (a CHECK constraint, JSON nested deeper than the server allows) fails
// only that statement — the transaction stays open — so the batch is
// bisected in the same transaction: halves are retried, failing halves are
// split, and a single failing row is rejected with the server's message.
// Bisection is bounded by MaxProbes statements; past that the rows in
// doubt are tried one at a time.
//
// # Errors
//
// Deadlocks (1213), lock wait timeouts (1205), a server gone away or a lost
// connection (2006, 2013), a killed connection (1927), driver.ErrBadConn,
// network errors and timeouts are transient. Authentication, privileges, a
// dropped table or column are permanent, with a hint.
//
// # Durability
//
// Commit returns after COMMIT succeeded. Whether that is on disk depends
// on the server: innodb_flush_log_at_trx_commit must be 1 (the default);
// New logs a warning when it is not.
package mysqlsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBatchSize    = 4096
	DefaultTimeout         = 30 * time.Second
	DefaultHealthTimeout   = 2 * time.Second
	DefaultMaxPayloadBytes = 64 << 20
	DefaultMaxProbes       = 128
)

// Payload column types.
const (
	PayloadBlob = "blob"
	PayloadJSON = "json"
)

const maxSourceChars = 255

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("mysqlsink: sink is closed")

// Options configure a Sink.
type Options struct {
	// DSN is a go-sql-driver DSN: user:password@tcp(host:port)/database.
	DSN string
	// Table to write to: "name" or "database.name".
	Table string
	// PayloadType is PayloadBlob (LONGBLOB, default) or PayloadJSON.
	PayloadType string
	// MaxBatchSize is what MaxBatchSize reports; zero means
	// DefaultMaxBatchSize. Larger batches are still accepted.
	MaxBatchSize int
	// Timeout bounds one Commit and New's checks. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// HealthTimeout bounds Health's ping. Zero means DefaultHealthTimeout.
	HealthTimeout time.Duration
	// MaxPayloadBytes rejects larger payloads before sending (as does
	// max_allowed_packet). Zero means DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxProbes bounds bisection. Zero means DefaultMaxProbes.
	MaxProbes int
	// MetadataColumns also writes each record's key, headers and event
	// time into weir_key, weir_headers and weir_event_time (see the
	// package documentation).
	MetadataColumns bool
	// Logger receives lifecycle events and rejections; nil discards.
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
	Probes     int64 // statements spent isolating poison records
	Failures   int64 // Commit calls that returned an error
	// The last successful Commit: records → statements → 1 commit.
	LastRecords, LastStatements int64
	// MaxStatementBytes is the statement size limit derived from
	// max_allowed_packet.
	MaxStatementBytes int64
}

// Sink writes records to a MySQL or MariaDB table. It implements sink.Sink.
type Sink struct {
	opts     Options
	table    string // quoted
	db       *sql.DB
	log      *slog.Logger
	maxStmt  int // bytes
	prefix   string
	suffix   string
	rowPlace string

	scratch []any // insert's arguments, reused under the Commit lock

	// core runs Commit, Health and Close and keeps the counters.
	core                        *sinkcore.Core
	lastRecords, lastStatements atomic.Int64
}

var _ sink.Sink = (*Sink)(nil)

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func parseTable(name string) (db, table string, err error) {
	parts := strings.Split(name, ".")
	if name == "" || len(parts) > 2 {
		return "", "", fmt.Errorf("mysqlsink: table %q: want table or database.table", name)
	}
	for _, p := range parts {
		if p == "" || len(p) > 64 || strings.ContainsRune(p, 0) {
			return "", "", fmt.Errorf("mysqlsink: table %q: identifiers must be 1 to 64 bytes, without NUL", name)
		}
	}
	if len(parts) == 2 {
		return parts[0], parts[1], nil
	}
	return "", parts[0], nil
}

// newConnector is the connector of opts.DSN with the session settings
// every connection of the sink has (strict SQL mode, UTC), its dial
// bounded by opts.Timeout.
func newConnector(opts Options) (*mysql.Config, driver.Connector, error) {
	cfg, err := mysql.ParseDSN(opts.DSN)
	if err != nil {
		return nil, nil, errors.New("mysqlsink: the DSN does not parse (want user:password@tcp(host:port)/database)")
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["sql_mode"] = "CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')"
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	if opts.Timeout > 0 && (cfg.Timeout == 0 || cfg.Timeout > opts.Timeout) {
		cfg.Timeout = opts.Timeout // dial timeout
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("mysqlsink: %w", err)
	}
	return cfg, connector, nil
}

// Probe connects to the server of opts.DSN as the sink does — the same
// session settings — and pings it; it creates and checks no table (weir
// validate --connect). ctx bounds it.
func Probe(ctx context.Context, opts Options) error {
	_, connector, err := newConnector(opts)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("mysqlsink: connect: %w", err)
	}
	return nil
}

// New connects, reads max_allowed_packet, creates or checks the table and
// returns the sink.
func New(ctx context.Context, opts Options) (*Sink, error) {
	if opts.PayloadType == "" {
		opts.PayloadType = PayloadBlob
	}
	if opts.PayloadType != PayloadBlob && opts.PayloadType != PayloadJSON {
		return nil, fmt.Errorf("mysqlsink: payload type %q: want %q or %q", opts.PayloadType, PayloadBlob, PayloadJSON)
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
	if opts.MaxProbes <= 0 {
		opts.MaxProbes = DefaultMaxProbes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dbName, tblName, err := parseTable(opts.Table)
	if err != nil {
		return nil, err
	}
	cfg, connector, err := newConnector(opts)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2) // one commits; one answers Health
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(5 * time.Minute)

	s := &Sink{opts: opts, db: db}
	s.table = quoteIdent(tblName)
	if dbName != "" {
		s.table = quoteIdent(dbName) + "." + s.table
	}
	s.log = opts.Logger.With("sink", "mysql", "table", s.table)
	s.core = sinkcore.New(sinkcore.Config{
		Name: "mysqlsink", Server: "mysql", ErrClosed: ErrClosed,
		Timeout: opts.Timeout, MaxProbes: opts.MaxProbes, Log: s.log,
		Check: s.check, CommitRows: s.commitRows, IsDataError: isDataError,
		Ping: s.ping, Close: s.db.Close,
	})
	s.prefix = "INSERT INTO " + s.table + " (weir_record_id, payload, source, durability, received_at) VALUES "
	s.suffix = " ON DUPLICATE KEY UPDATE weir_record_id = weir_record_id"
	s.rowPlace = "(?,?,?,?,?)"
	if opts.MetadataColumns {
		s.prefix = "INSERT INTO " + s.table + " (weir_record_id, payload, source, durability, received_at, weir_key, weir_headers, weir_event_time) VALUES "
		s.rowPlace = "(?,?,?,?,?,?,?,?)"
	}

	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := s.open(ctx, cfg, dbName, tblName); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sink) open(ctx context.Context, cfg *mysql.Config, dbName, tblName string) error {
	var packet int64
	var flush sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT @@max_allowed_packet, @@innodb_flush_log_at_trx_commit").Scan(&packet, &flush); err != nil {
		return classify("connect", err)
	}
	if flush.Valid && flush.Int64 != 1 {
		s.log.Warn("innodb_flush_log_at_trx_commit is not 1: a committed batch may be lost if the server's machine loses power",
			"innodb_flush_log_at_trx_commit", flush.Int64)
	}
	limit := packet
	if cfg.MaxAllowedPacket > 0 && int64(cfg.MaxAllowedPacket) < limit {
		limit = int64(cfg.MaxAllowedPacket)
	}
	s.maxStmt = int(limit) - 1024 // packet header and slack
	if err := s.prepareTable(ctx, dbName, tblName); err != nil {
		return err
	}
	return nil
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return "mysql" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// Table is the quoted table name.
func (s *Sink) Table() string { return s.table }

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	c := s.core
	return Stats{
		Batches: c.Batches.Load(), Records: c.Records.Load(), Committed: c.Committed.Load(),
		Rejected: c.Rejected.Load(), Statements: c.Statements.Load(), Commits: c.Commits.Load(),
		Probes: c.Probes.Load(), Failures: c.Failures.Load(),
		LastRecords: s.lastRecords.Load(), LastStatements: s.lastStatements.Load(),
		MaxStatementBytes: int64(s.maxStmt),
	}
}

// Health implements sink.Sink: Down when the server does not answer a ping
// within HealthTimeout, Degraded while the last Commit failed.
func (s *Sink) Health(ctx context.Context) sink.Health { return s.core.Health(ctx) }

func (s *Sink) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.HealthTimeout)
	defer cancel()
	return s.db.PingContext(ctx)
}

// Close closes the connections. Committed data is already durable.
func (s *Sink) Close() error { return s.core.Close() }

// rowBytes bounds a row's size in the interpolated statement: every byte
// of a string may be escaped to two.
func rowBytes(r *sink.Record) int {
	n := 2*(len(r.Payload)+len(r.Source)) + 2*16 + 96
	if r.Key != nil || len(r.Headers) > 0 || !r.EventTime.IsZero() {
		n += metaBytes(r)
	}
	return n
}

// check pre-validates a record: "" means it may be sent.
func (s *Sink) check(r *sink.Record) (string, sink.Code) {
	if len(r.Payload) > s.opts.MaxPayloadBytes {
		return fmt.Sprintf("mysqlsink: payload of %d bytes exceeds the limit of %d", len(r.Payload), s.opts.MaxPayloadBytes), sink.CodeOversize
	}
	if n := rowBytes(r) + len(s.prefix) + len(s.suffix); n > s.maxStmt {
		return fmt.Sprintf("mysqlsink: record of %d bytes cannot fit in one statement under max_allowed_packet (%d bytes)", len(r.Payload), s.maxStmt+1024), sink.CodeOversize
	}
	if !utf8.ValidString(r.Source) {
		return "mysqlsink: source is not valid UTF-8", sink.CodeDecode
	}
	if utf8.RuneCountInString(r.Source) > maxSourceChars {
		return fmt.Sprintf("mysqlsink: source is longer than %d characters", maxSourceChars), sink.CodeSinkRefused
	}
	if y := r.Received.UTC().Year(); y < 1000 || y > 9999 {
		return fmt.Sprintf("mysqlsink: received time %s is outside DATETIME's range", r.Received.UTC().Format(time.RFC3339Nano)), sink.CodeSinkRefused
	}
	if y := r.EventTime.UTC().Year(); s.opts.MetadataColumns && !r.EventTime.IsZero() && (y < 1000 || y > 9999) {
		return fmt.Sprintf("mysqlsink: event time %s is outside DATETIME's range", r.EventTime.UTC().Format(time.RFC3339Nano)), sink.CodeSinkRefused
	}
	if s.opts.PayloadType == PayloadJSON {
		if !utf8.Valid(r.Payload) {
			return "mysqlsink: payload is not valid UTF-8, so not JSON for the JSON column", sink.CodeDecode
		}
		if !json.Valid(r.Payload) {
			return "mysqlsink: payload is not valid JSON for the JSON column", sink.CodeDecode
		}
	}
	return "", 0
}

// Commit implements sink.Sink; see the package documentation.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	return s.core.Commit(ctx, b)
}

// commitRows is the sinkcore.Config's CommitRows: it commits recs[idx...]
// and, on success, records the batch's records → statements for Stats.
func (s *Sink) commitRows(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	before := s.core.Statements.Load()
	bad, err := s.commitTx(ctx, recs, idx)
	if err != nil {
		return nil, err
	}
	s.lastRecords.Store(int64(len(recs)))
	s.lastStatements.Store(s.core.Statements.Load() - before)
	return bad, nil
}

// commitTx inserts recs[idx...] in one transaction and commits it,
// isolating data errors to their rows.
func (s *Sink) commitTx(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify("begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	var bad []sink.Rejection
	for _, c := range s.chunks(recs, idx) {
		err := s.insert(ctx, tx, recs, c)
		if err != nil && isDataError(err) && ctx.Err() == nil {
			s.log.Info("statement refused with a data error; isolating the bad rows", "rows", len(c), "err", err)
			var cbad []sink.Rejection
			cbad, err = s.isolate(ctx, tx, recs, c)
			bad = append(bad, cbad...)
		}
		if err != nil {
			return nil, classify("insert", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, classify("commit", err)
	}
	return bad, nil
}

// chunks splits idx so that each INSERT fits in max_allowed_packet.
func (s *Sink) chunks(recs []sink.Record, idx []int) [][]int {
	var out [][]int
	start := 0
	size := len(s.prefix) + len(s.suffix)
	for i, j := range idx {
		n := rowBytes(&recs[j])
		if i > start && size+n > s.maxStmt {
			out = append(out, idx[start:i])
			start, size = i, len(s.prefix)+len(s.suffix)
		}
		size += n
	}
	return append(out, idx[start:])
}

func (s *Sink) insert(ctx context.Context, tx *sql.Tx, recs []sink.Record, idx []int) error {
	var q strings.Builder
	q.Grow(len(s.prefix) + len(idx)*(len(s.rowPlace)+1) + len(s.suffix))
	q.WriteString(s.prefix)
	args := s.scratch[:0]
	for k, j := range idx {
		if k > 0 {
			q.WriteByte(',')
		}
		q.WriteString(s.rowPlace)
		r := &recs[j]
		var p any = r.Payload
		if r.Payload == nil {
			p = []byte{}
		}
		if s.opts.PayloadType == PayloadJSON {
			p = string(r.Payload)
		}
		args = append(args, r.ID[:], p, r.Source, r.Durability.String(), r.Received.UTC())
		if s.opts.MetadataColumns {
			args = appendMetaArgs(args, r)
		}
	}
	q.WriteString(s.suffix)
	s.core.Statements.Add(1)
	_, err := tx.ExecContext(ctx, q.String(), args...)
	clear(args)
	s.scratch = args[:0]
	return err
}

// isolate bisects a chunk the server refused. A failed statement leaves
// the transaction open, so every probe runs in tx.
func (s *Sink) isolate(ctx context.Context, tx *sql.Tx, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	return s.core.Bisect([][]int{idx}, func(g []int) error { return s.insert(ctx, tx, recs, g) })
}
