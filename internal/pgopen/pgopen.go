// Package pgopen opens the PostgreSQL connections of weir's small
// PostgreSQL writers (the dq-audit trail, the quarantine table): a table
// name checked and quoted, and a pool whose connections keep
// synchronous_commit on, so that a COMMIT that returned is on the server's
// disk. Its Pool, whose Close is bounded against a stalled server, is the
// PostgreSQL sink's pool too (NewPool).
package pgopen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ApplicationName is the connections' application_name unless the DSN
// sets one.
const ApplicationName = "weir"

// ParseTable splits "table" or "schema.table" into its identifier parts,
// each used verbatim (case kept) and quoted by Sanitize.
func ParseTable(name string) (pgx.Identifier, error) {
	if name == "" {
		return nil, errors.New("no table name")
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("table %q: want table or schema.table", name)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) || len(p) > 63 {
			return nil, fmt.Errorf("table %q: an identifier is empty, holds a NUL byte or is longer than 63 bytes", name)
		}
	}
	return pgx.Identifier(parts), nil
}

// Config parses dsn for a pool of at most maxConns connections that
// connect within timeout and turn synchronous_commit on where the server
// or role default is off. A DSN that does not parse is reported without
// quoting it (it may hold a password).
func Config(dsn string, maxConns int32, timeout time.Duration) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("the DSN does not parse (see the libpq connection string format)")
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > timeout {
		cfg.ConnConfig.ConnectTimeout = timeout
	}
	cfg.MaxConns, cfg.MinConns = maxConns, 0
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', false)
			WHERE current_setting('synchronous_commit') = 'off'`)
		return err
	}
	return cfg, nil
}

// Open connects a pool (Config) and runs each of ddl on it, all within
// timeout. Its Close is bounded (Pool).
func Open(ctx context.Context, dsn string, maxConns int32, timeout time.Duration, ddl ...string) (*Pool, error) {
	cfg, err := Config(dsn, maxConns, timeout)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := NewPool(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	for _, q := range ddl {
		if _, err := pool.Exec(ctx, q); err != nil {
			pool.Close()
			return nil, fmt.Errorf("%s: %w", firstLine(q), err)
		}
	}
	return pool, nil
}

// Ping connects to dsn as Open does (Config), within timeout, and pings
// the server; it runs no statement of its own (weir validate
// --connect).
func Ping(ctx context.Context, dsn string, timeout time.Duration) error {
	cfg, err := Config(dsn, 1, timeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := NewPool(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}

// NewPool connects a pool of cfg whose Close is bounded (Pool): every
// socket it dials is tracked. The PostgreSQL sink opens its pools here
// too, with its own configuration.
func NewPool(ctx context.Context, cfg *pgxpool.Config) (*Pool, error) {
	cs := &conns{open: map[*conn]struct{}{}}
	cfg.ConnConfig.DialFunc = cs.track(cfg.ConnConfig.DialFunc)
	pp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Pool{Pool: pp, conns: cs}, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
