package pgsink

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// isDataError reports whether err is the server refusing the data of some
// row rather than the statement or the connection: SQLSTATE class 22 (data
// exception: bad encoding, invalid JSON, a value out of range), 23
// (integrity constraint violation: NOT NULL, CHECK, a foreign key, a second
// unique key) or 54 (program limit exceeded: a value too large for an index
// row, an array too large). These are the errors bisection isolates.
func isDataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// transientCodes are SQLSTATEs (full codes, or classes of two characters)
// that a retry of the same batch can get past.
var transientCodes = []string{
	"08",    // connection exception
	"40001", // serialization failure
	"40P01", // deadlock detected
	"53",    // insufficient resources (disk full, out of memory, too many connections)
	"55P03", // lock not available
	"57014", // query cancelled (statement_timeout, our own cancellation)
	"57P01", // admin shutdown (pg_terminate_backend, a fast shutdown)
	"57P02", // crash shutdown
	"57P03", // cannot connect now (starting up, in recovery)
	"58",    // system error (I/O error on the server)
	"25006", // read-only transaction: a standby after a failover
}

func isTransientCode(code string) bool {
	for _, c := range transientCodes {
		if strings.HasPrefix(code, c) {
			return true
		}
	}
	return false
}

// classify marks err for the drain: transient when retrying the same batch
// can succeed (the connection broke, the server is restarting or
// overloaded, a deadlock, a timeout), permanent otherwise (authentication,
// a missing table or privilege, a statement the server will never accept).
// Data errors never reach here: they are isolated to their rows.
func classify(op string, err error, connClosed bool) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("pgsink: %s: %w", op, err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if isTransientCode(pe.Code) {
			return sink.Transient(wrapped)
		}
		return sink.Permanent(fmt.Errorf("%w%s", wrapped, hint(pe.Code)))
	}
	if connClosed || pgconn.Timeout(err) || pgconn.SafeToRetry(err) || sinkcore.IsTransportError(err) {
		return sink.Transient(wrapped)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// A connection attempt that failed without a server error: DNS,
		// routing, TLS handshake. The server may come back.
		return sink.Transient(wrapped)
	}
	if strings.Contains(err.Error(), "conn closed") {
		return sink.Transient(wrapped)
	}
	return sink.Permanent(wrapped)
}

// hint explains the permanent errors operators meet most.
func hint(code string) string {
	switch {
	case code == "42P01":
		return " (the table no longer exists: was it dropped while the sink was running?)"
	case code == "42703":
		return " (a column no longer exists: was the table altered while the sink was running?)"
	case code == "42501":
		return " (the database user lacks a privilege on the table)"
	case strings.HasPrefix(code, "28"):
		return " (authentication failed: check the DSN's user and password)"
	case code == "3D000":
		return " (the database in the DSN does not exist)"
	}
	return ""
}
