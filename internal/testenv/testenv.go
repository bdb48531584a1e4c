// Package testenv finds the real database servers that integration tests
// run against, and gives those tests a few shared tools: unique table
// names, a proxy (on a TCP port or a Unix socket) that can cut a server
// off or stall it, the crash hooks of the sink conformance suite (a power
// loss on memfs, connections killed by the server), a reader of a whole
// Kafka topic, and a private redis-server that a test may stop and start
// (StartRedis).
//
// A server is found through an environment variable naming its DSN, with a
// default for the machine's local server. When the server cannot be
// reached the test is skipped with a loud message — unless
// WEIR_REQUIRE_SERVICES=1, in which case it fails. CI sets that variable so
// that a missing server can never turn into a silently green run.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Environment variables and their defaults.
const (
	PostgresEnv     = "WEIR_TEST_POSTGRES_DSN"
	PostgresDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	MySQLEnv        = "WEIR_TEST_MYSQL_DSN"
	MySQLDefault    = "root@tcp(127.0.0.1:3306)/test"
	NATSEnv         = "WEIR_TEST_NATS_URL"
	NATSDefault     = "nats://127.0.0.1:4222"
	RedisEnv        = "WEIR_REDIS_ADDR"
	RedisDefault    = "127.0.0.1:6379"
	RequireEnv      = "WEIR_REQUIRE_SERVICES"
)

// probeTimeout bounds how long a reachability check may take.
const probeTimeout = 5 * time.Second

var (
	probeMu sync.Mutex
	probed  = map[string]error{} // dsn -> result of the first probe
)

// Postgres returns the DSN of the test PostgreSQL server, or skips (fails
// under WEIR_REQUIRE_SERVICES=1) when it cannot be reached.
func Postgres(t testing.TB) string {
	t.Helper()
	return service(t, "PostgreSQL", PostgresEnv, PostgresDefault, func(ctx context.Context, dsn string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.Ping(ctx)
	})
}

// MySQL returns the DSN (go-sql-driver form) of the test MySQL or MariaDB
// server, or skips (fails under WEIR_REQUIRE_SERVICES=1) when it cannot be
// reached.
func MySQL(t testing.TB) string {
	t.Helper()
	return service(t, "MySQL/MariaDB", MySQLEnv, MySQLDefault, func(ctx context.Context, dsn string) error {
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return err
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	})
}

// NATS returns the URL of the test NATS server with JetStream enabled, or
// skips (fails under WEIR_REQUIRE_SERVICES=1) when none answers there.
func NATS(t testing.TB) string {
	t.Helper()
	return service(t, "NATS JetStream", NATSEnv, NATSDefault, func(ctx context.Context, url string) error {
		nc, err := nats.Connect(url, nats.Timeout(probeTimeout))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	})
}

// Redis returns the address (host:port) of the test Redis server, or skips
// (fails under WEIR_REQUIRE_SERVICES=1) when it does not answer PING there.
// Its URL for a client is "redis://" + the address. Tests must keep to
// keys of their own (a unique prefix) and delete them; a test that stops
// Redis uses StartRedis, never this shared server.
func Redis(t testing.TB) string {
	t.Helper()
	return service(t, "Redis", RedisEnv, RedisDefault, pingRedis)
}

// Required reports whether WEIR_REQUIRE_SERVICES=1 is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

func service(t testing.TB, name, env, def string, probe func(context.Context, string) error) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		dsn = def
	}
	probeMu.Lock()
	err, done := probed[dsn]
	if !done {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		err = probe(ctx, dsn)
		cancel()
		probed[dsn] = err
	}
	probeMu.Unlock()
	if err != nil {
		Unavailable(t, fmt.Sprintf("%s is not reachable at %s=%q: %v (set %s to a reachable server)", name, env, dsn, err, env))
	}
	return dsn
}

// Suffix is a random lowercase hex string for unique object names.
func Suffix() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// TableName is a unique table name beginning with prefix.
func TableName(prefix string) string { return prefix + "_" + Suffix() }

// PostgresVia rewrites a PostgreSQL DSN (URL or keyword/value form) to
// connect to addr (host:port) instead.
func PostgresVia(dsn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = net.JoinHostPort(host, port)
		return u.String(), nil
	}
	// Keyword/value form: later settings win.
	return fmt.Sprintf("%s host=%s port=%s", dsn, host, port), nil
}

// PostgresTarget is the host:port a PostgreSQL DSN connects to.
func PostgresTarget(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// PostgresProxy starts a Proxy to the server of dsn, closed when the test
// ends, and returns it with dsn rewritten to connect through it.
func PostgresProxy(t testing.TB, dsn string) (via string, p *Proxy) {
	t.Helper()
	target, err := PostgresTarget(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p = NewProxy(t, target)
	if via, err = PostgresVia(dsn, p.Addr()); err != nil {
		t.Fatal(err)
	}
	return via, p
}

// PostgresUnixVia rewrites a PostgreSQL DSN (URL or keyword/value form) to
// connect to the Unix socket dir/.s.PGSQL.<port> instead.
func PostgresUnixVia(dsn, dir string, port int) (string, error) {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = ""
		q := u.Query()
		q.Set("host", dir)
		q.Set("port", strconv.Itoa(port))
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return fmt.Sprintf("%s host=%s port=%d", dsn, dir, port), nil
}

// PostgresUnixProxy is PostgresProxy listening on a Unix socket (in a
// directory of its own, removed when the test ends): a client in another
// network namespace reaches it through the file system.
func PostgresUnixProxy(t testing.TB, dsn string) (via string, p *Proxy) {
	t.Helper()
	target, err := PostgresTarget(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Socket paths are limited to 107 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "weir-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const port = 5432 // the socket's name only: .s.PGSQL.5432
	p = NewUnixProxy(t, filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port)), target)
	if via, err = PostgresUnixVia(dsn, dir, port); err != nil {
		t.Fatal(err)
	}
	return via, p
}

// MySQLVia rewrites a go-sql-driver DSN to connect over TCP to addr.
func MySQLVia(dsn, addr string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.Net, cfg.Addr = "tcp", addr
	return cfg.FormatDSN(), nil
}

// MySQLTarget is the host:port a go-sql-driver DSN connects to.
func MySQLTarget(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("testenv: DSN uses %q, not tcp", cfg.Net)
	}
	return cfg.Addr, nil
}

// PostgresTable is a unique table name beginning with prefix, dropped
// (with IF EXISTS) from the server at dsn when the test ends.
func PostgresTable(t testing.TB, dsn, prefix string) string {
	t.Helper()
	name := TableName(prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("testenv: drop table %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Errorf("testenv: drop table %s: %v", name, err)
		}
	})
	return name
}
