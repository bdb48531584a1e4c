package mysqlsink

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// Server error numbers the sink treats specially.
var (
	// dataErrors refuse a row's data; under strict mode the failed
	// statement is rolled back and the transaction stays usable, so
	// bisection can go on in the same transaction.
	dataErrors = map[uint16]bool{
		1048: true, // column cannot be null
		1264: true, // out of range value
		1265: true, // data truncated
		1292: true, // incorrect (date/time) value
		1300: true, // invalid string for the character set
		1366: true, // incorrect string value (bad UTF-8)
		1367: true, // illegal value
		1406: true, // data too long for column
		1411: true, // incorrect value for function
		1452: true, // foreign key
		1690: true, // value out of range
		3140: true, // invalid JSON text (MySQL)
		3819: true, // check constraint violated (MySQL)
		4025: true, // CONSTRAINT failed (MariaDB CHECK, JSON_VALID of a JSON column)
	}
	// transientErrors can succeed on a retry of the whole batch; the
	// server rolled the transaction back or the connection is gone.
	transientErrors = map[uint16]bool{
		1021: true,                                     // disk full
		1040: true,                                     // too many connections
		1053: true,                                     // server shutdown in progress
		1114: true,                                     // table is full
		1152: true,                                     // aborted connection
		1158: true, 1159: true, 1160: true, 1161: true, // network read/write errors
		1180: true,                                     // error during commit
		1203: true,                                     // max_user_connections
		1205: true,                                     // lock wait timeout
		1213: true,                                     // deadlock
		1290: true,                                     // server is read-only (a failover)
		1317: true,                                     // query interrupted
		1792: true,                                     // read-only transaction
		1927: true,                                     // connection killed (MariaDB)
		1969: true,                                     // statement timeout (MariaDB)
		2002: true, 2003: true, 2006: true, 2013: true, // cannot connect, gone away, lost connection
		3024: true, // max execution time exceeded (MySQL)
	}
)

func isDataError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && dataErrors[me.Number]
}

// classify marks err for the drain; see the package documentation.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("mysqlsink: %s: %w", op, err)
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if transientErrors[me.Number] {
			return sink.Transient(wrapped)
		}
		return sink.Permanent(fmt.Errorf("%w%s", wrapped, hint(me.Number)))
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || sinkcore.IsTransportError(err) {
		return sink.Transient(wrapped)
	}
	return sink.Permanent(wrapped)
}

func hint(n uint16) string {
	switch n {
	case 1045:
		return " (authentication failed: check the DSN's user and password)"
	case 1044, 1142, 1143:
		return " (the database user lacks a privilege on the table)"
	case 1146:
		return " (the table no longer exists: was it dropped while the sink was running?)"
	case 1054:
		return " (a column no longer exists: was the table altered while the sink was running?)"
	case 1049:
		return " (the database in the DSN does not exist)"
	case 1153:
		return " (a statement exceeded max_allowed_packet: was it lowered while the sink was running?)"
	}
	return ""
}
