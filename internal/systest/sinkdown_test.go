package systest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sys/unix"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/sink/parquetsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/vfs"
)

// What a daemon whose sink is down must show an operator (issue #23), and
// how fast it must be ready when a sink cannot be reached.
const (
	// sinkDownReady is what /ready's body holds (with status 200: the
	// buffer accepts pushes) while the [sink] is down.
	sinkDownReady = "sink down"
	// readyBound is how long a daemon whose sink (or secondary) is down or
	// hangs may take from launch until its socket accepts.
	readyBound = 2 * time.Second
	// sinkDownRecords are pushed, Durable, while the sink is down.
	sinkDownRecords = 2000
)

// sinkDownCase is one [sink] kind started while its server is down.
type sinkDownCase struct {
	kind string   // sink.type, the sink label of weir_sink_health
	args []string // the daemon's sink flags
	// read returns every payload in the sink (an error while it is not
	// there yet: no table, no topic, no directory).
	read func() (map[string]int, error)
	// up brings the sink back.
	up func()
}

// runSinkDownAtStart starts a daemon whose [sink] cannot be reached,
// checks that it is ready within readyBound and says its sink is down,
// pushes sinkDownRecords Durable records (all acked), brings the sink up
// and checks that every acked record reaches it, logging how long the
// first one took.
func runSinkDownAtStart(t *testing.T, c sinkDownCase) {
	d := newDaemon(t, append([]string{"--sink-health-interval", "1s"}, c.args...)...)
	launched := time.Now()
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitReady(15 * time.Second); err != nil {
		t.Fatalf("%s sink down at start: %v\n--- daemon log (tail) ---\n%s", c.kind, err, tail(d.log.String(), 4000))
	}
	ready := time.Since(launched)
	t.Logf("%s sink down: socket accepting %v after launch", c.kind, ready.Round(time.Millisecond))
	if bound := scaledReadyBound(); ready > bound {
		t.Errorf("ready %v after launch with the %s sink down; want within %v", ready.Round(time.Millisecond), c.kind, bound)
	}

	acked := pushAllDurable(t, d, c.kind+"-down", sinkDownRecords)
	checkSinkDownReported(t, d, c.kind)
	if got, err := c.read(); err == nil && len(got) > 0 {
		t.Fatalf("%d records in the %s sink while it is down: the test does not cut it off", len(got), c.kind)
	}

	// Let the daemon's retries back off for a while, as in a real outage.
	time.Sleep(2 * time.Second)
	c.up()
	back := time.Now()
	deadline := back.Add(60 * time.Second)
	var first time.Duration
	for {
		got, err := c.read()
		if err == nil && len(got) > 0 && first == 0 {
			first = time.Since(back)
			t.Logf("%s sink back: first record in it %v after its return", c.kind, first.Round(time.Millisecond))
		}
		missing, example := 0, ""
		for p := range acked {
			if got[p] == 0 {
				missing, example = missing+1, p
			}
		}
		if err == nil && missing == 0 {
			t.Logf("%s sink back: all %d acked records in it %v after its return (first after %v)", c.kind, len(acked),
				time.Since(back).Round(time.Millisecond), first.Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sink back for 60s: %d of %d acked records not in it (e.g. %q; last read error: %v)\n--- daemon log (tail) ---\n%s",
				c.kind, missing, len(acked), example, err, tail(d.log.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkSinkUpReported(t, d, c.kind)
	if err := d.stop(20 * time.Second); err != nil {
		t.Errorf("stop: %v\n%s", err, tail(d.log.String(), 4000))
	}
}

// scaledReadyBound is readyBound, three times as long under the race
// detector.
func scaledReadyBound() time.Duration {
	if raceEnabled {
		return 3 * readyBound
	}
	return readyBound
}

// pushAllDurable pushes n Durable records named prefix-i and fails the
// test unless every one is acked.
func pushAllDurable(t *testing.T, d *daemon, prefix string, n int) map[string]bool {
	t.Helper()
	l := newLedger()
	produce(ctxTimeout(t, 30*time.Second), t, d.socket, prefix, n, 100, client.Durable, l, 10*time.Second)
	if got := l.ackedCount(); got != n {
		l.mu.Lock()
		why := fmt.Sprintf("nacked %v, other errors %d", l.nacked, l.other)
		l.mu.Unlock()
		t.Fatalf("%d of %d Durable pushes acked (%s)\n--- daemon log (tail) ---\n%s", got, n, why, tail(d.log.String(), 4000))
	}
	return l.snapshot()
}

// checkSinkDownReported waits (at most 10 s) until the daemon reports its
// [sink] of kind down everywhere an operator looks:
//   - /ready answers 200 (the buffer takes pushes) with a body holding
//     sinkDownReady and the sink's kind;
//   - weir_sink_health{sink=kind,state="down"} is 1;
//   - `weir status` exits 1 and prints the sink line "sink <kind>: down".
func checkSinkDownReported(t *testing.T, d *daemon, kind string) {
	t.Helper()
	statusLine := regexp.MustCompile(`(?m)^\s*sink\s+` + regexp.QuoteMeta(kind) + `:\s+down\s*$`)
	healthDown := fmt.Sprintf(`weir_sink_health{sink=%q,state="down"}`, kind)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var problems []string
		code, body, err := d.httpGet("/ready")
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("GET /ready: %v", err))
		case code != 200 || !strings.Contains(body, sinkDownReady) || !strings.Contains(body, kind):
			problems = append(problems, fmt.Sprintf("GET /ready answered %d %q; want 200 with a body holding %q and %q",
				code, strings.TrimSpace(body), sinkDownReady, kind))
		}
		if m, err := d.tryScrape(); err != nil {
			problems = append(problems, err.Error())
		} else if m[healthDown] != 1 {
			problems = append(problems, fmt.Sprintf("%s = %v, want 1", healthDown, m[healthDown]))
		}
		out, errOut, exit := weirCmd(t, nil, "status", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", d.metricsPort))
		if exit != 1 || !statusLine.MatchString(out) {
			problems = append(problems, fmt.Sprintf("weir status exited %d; want 1 and a line matching %q:\n%s%s", exit, statusLine, out, errOut))
		}
		if len(problems) == 0 {
			t.Logf("%s sink down: /ready answers 200 %q", kind, strings.TrimSpace(body))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s sink is down, but after 10s the daemon does not say so:\n%s\n--- daemon log (tail) ---\n%s",
				kind, strings.Join(problems, "\n"), tail(d.log.String(), 4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkSinkUpReported waits (at most 15 s) until /ready no longer holds
// sinkDownReady and weir_sink_health says the sink of kind is healthy.
func checkSinkUpReported(t *testing.T, d *daemon, kind string) {
	t.Helper()
	healthy := fmt.Sprintf(`weir_sink_health{sink=%q,state="healthy"}`, kind)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body, err := d.httpGet("/ready")
		m, serr := d.tryScrape()
		if err == nil && serr == nil && code == 200 && !strings.Contains(body, sinkDownReady) && m[healthy] == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s sink delivers again, but after 15s /ready answers %d %q (%v) and %s = %v",
				kind, code, strings.TrimSpace(body), err, healthy, m[healthy])
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestSinkDownAtStartPostgres: a Postgres [sink] refused (server down) or
// hanging (accepts, never answers; timeout 1s) when weir starts. weir
// starts at once, acks Durable pushes into its buffer, says the sink is
// down, and once the server answers creates the table and delivers every
// acked record.
func TestSinkDownAtStartPostgres(t *testing.T) {
	for _, mode := range []proxyMode{proxyRefuse, proxyBlackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			dsn := testenv.Postgres(t)
			via, p := pgBehind(t, dsn, mode)
			table := testenv.PostgresTable(t, dsn, "weir_down")
			runSinkDownAtStart(t, sinkDownCase{
				kind: "postgres",
				args: []string{"--sink-type", "postgres", "--sink-postgres-dsn", via, "--sink-postgres-table", table,
					"--sink-postgres-timeout", "1s"},
				read: func() (map[string]int, error) { return pgPayloads(dsn, table) },
				up:   func() { p.set(proxyForward) },
			})
		})
	}
}

// pgBehind starts a stallProxy in mode in front of the Postgres server of
// dsn and returns dsn rewritten to go through it.
func pgBehind(t *testing.T, dsn string, mode proxyMode) (string, *stallProxy) {
	t.Helper()
	target, err := testenv.PostgresTarget(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newStallProxy(t, target, mode)
	via, err := testenv.PostgresVia(dsn, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return via, p
}

// pgPayloads counts the payloads of table, reached directly.
func pgPayloads(dsn, table string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT payload FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return countPayloads(rows)
}

// payloadRows is a query's result of one bytes column: pgx's or
// database/sql's.
type payloadRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// countPayloads counts the payloads rows holds.
func countPayloads(rows payloadRows) (map[string]int, error) {
	out := map[string]int{}
	for rows.Next() {
		var p []byte
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out[string(p)]++
	}
	return out, rows.Err()
}

// TestSecondaryBlackholeStartsFast: a Postgres [[secondary]] whose server
// accepts connections and never answers (timeout = "5s") does not delay
// the start — the socket accepts within readyBound — and once the server
// answers, the secondary catches up with raw.
func TestSecondaryBlackholeStartsFast(t *testing.T) {
	dsn := testenv.Postgres(t)
	via, p := pgBehind(t, dsn, proxyBlackhole)
	conn := pgConn(t, dsn)
	table := testenv.PostgresTable(t, dsn, "weir_secbh")
	cfg := writeConfig(t, pgSecondaryTOML(via, table, "", `timeout = "5s"`))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	launched := time.Now()
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitReady(15 * time.Second); err != nil {
		t.Fatalf("%v\n--- daemon log (tail) ---\n%s", err, tail(d.log.String(), 4000))
	}
	ready := time.Since(launched)
	t.Logf("secondary behind a blackhole: socket accepting %v after launch", ready.Round(time.Millisecond))
	if bound := scaledReadyBound(); ready > bound {
		t.Errorf("ready %v after launch with the secondary's server hanging; want within %v (a secondary never gates the start)",
			ready.Round(time.Millisecond), bound)
	}
	acked := pushAllDurable(t, d, "secbh", sinkDownRecords)
	waitDelivered(t, d, acked, 30*time.Second) // raw does not wait for the secondary
	p.set(proxyForward)
	back := time.Now()
	waitTableEqualsRaw(t, d, conn, table, len(acked), 60*time.Second)
	t.Logf("the secondary caught up with raw %v after its server answered", time.Since(back).Round(time.Millisecond))
}

// pgConn is a connection to dsn, closed when the test ends (after the
// cleanups registered later, which may use it).
func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestSinkDownAtStartMySQL is TestSinkDownAtStartPostgres for a MySQL
// (MariaDB) [sink].
func TestSinkDownAtStartMySQL(t *testing.T) {
	for _, mode := range []proxyMode{proxyRefuse, proxyBlackhole} {
		t.Run(mode.String(), func(t *testing.T) {
			dsn := testenv.MySQL(t)
			target, err := testenv.MySQLTarget(dsn)
			if err != nil {
				t.Fatal(err)
			}
			p := newStallProxy(t, target, mode)
			via, err := testenv.MySQLVia(dsn, p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			table := testenv.TableName("weir_down")
			t.Cleanup(func() {
				db.Exec("DROP TABLE IF EXISTS `" + table + "`")
				db.Close()
			})
			runSinkDownAtStart(t, sinkDownCase{
				kind: "mysql",
				args: []string{"--sink-type", "mysql", "--sink-mysql-dsn", via, "--sink-mysql-table", table,
					"--sink-mysql-timeout", "1s"},
				read: func() (map[string]int, error) { return mysqlPayloads(db, table) },
				up:   func() { p.set(proxyForward) },
			})
		})
	}
}

// mysqlPayloads counts the payloads of table.
func mysqlPayloads(db *sql.DB, table string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SELECT payload FROM `"+table+"`")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return countPayloads(rows)
}

// TestSinkDownAtStartKafka: the Kafka [sink]'s cluster (kfake, behind a
// proxy it advertises as its own address) refuses connections when weir
// starts; once it answers, every acked record is in the topic.
func TestSinkDownAtStartKafka(t *testing.T) {
	topic := "weir-down-" + testenv.Suffix()
	p := kafkaBehindProxy(t, proxyRefuse, kfake.SeedTopics(3, topic))
	runSinkDownAtStart(t, sinkDownCase{
		kind: "kafka",
		args: []string{"--sink-type", "kafka", "--sink-kafka-brokers", p.Addr(), "--sink-kafka-topic", topic,
			"--sink-kafka-delivery-timeout", "2s"},
		read: func() (map[string]int, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			recs, err := testenv.ReadKafkaTopic(ctx, []string{p.Addr()}, topic)
			if err != nil {
				return nil, err
			}
			out := map[string]int{}
			for _, r := range recs {
				out[string(r.Value)]++
			}
			return out, nil
		},
		up: func() { p.set(proxyForward) },
	})
}

// kafkaBehindProxy starts a one-broker kfake cluster that advertises a
// stallProxy in mode as its address, so that every connection a client
// makes — the bootstrap and the ones its metadata names — goes through
// the proxy.
func kafkaBehindProxy(t *testing.T, mode proxyMode, opts ...kfake.Opt) *stallProxy {
	t.Helper()
	front, _, err := pickPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	frontAddr, err := net.ResolveTCPAddr("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	var real string
	listen := func(network, _ string) (net.Listener, error) {
		ln, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		real = ln.Addr().String()
		return advertisedListener{Listener: ln, addr: frontAddr}, nil
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(listen)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return newStallProxyAt(t, front, real, mode)
}

// advertisedListener is a listener that gives another address as its own.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// TestSinkDownAtStartParquet: the Parquet [sink]'s directory lies under a
// mount point that is read-only when weir starts (the volume is not
// mounted yet: nothing can be created there). Once the test "mounts" it
// (remounts it read-write), every acked record is in the Parquet sink.
func TestSinkDownAtStartParquet(t *testing.T) {
	mnt := readOnlyMount(t)
	dir := filepath.Join(mnt, "parquet")
	runSinkDownAtStart(t, sinkDownCase{
		kind: "parquet",
		args: []string{"--sink-type", "parquet", "--sink-parquet-dir", dir, "--sink-parquet-max-age", "1s"},
		read: func() (map[string]int, error) { return parquetPayloads(dir) },
		up: func() {
			if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_BIND, ""); err != nil {
				t.Fatalf("remount %s read-write: %v", mnt, err)
			}
		},
	})
}

// parquetPayloads counts the payloads in a Parquet sink's directory.
func parquetPayloads(dir string) (map[string]int, error) {
	recs, err := parquetsink.ReadDir(vfs.OS, dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range recs {
		out[string(r.Payload)]++
	}
	return out, nil
}

// readOnlyMount makes an empty directory and bind-mounts it read-only on
// itself; it is unmounted and removed when the test ends. Without the
// right to mount (not root, no CAP_SYS_ADMIN) the test is skipped loudly,
// or fails under WEIR_REQUIRE_NETNS=1 (which asks for the same rights).
func readOnlyMount(t *testing.T) string {
	t.Helper()
	mnt, err := os.MkdirTemp("", "weir-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mnt) })
	if err := unix.Mount(mnt, mnt, "", unix.MS_BIND, ""); err != nil {
		mountUnavailable(t, fmt.Sprintf("bind-mount %s: %v", mnt, err))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		mountUnavailable(t, fmt.Sprintf("remount %s read-only: %v", mnt, err))
	}
	if err := os.Mkdir(filepath.Join(mnt, "probe"), 0o700); err == nil {
		t.Fatalf("%s is mounted read-only, yet a directory could be made in it", mnt)
	}
	return mnt
}

func mountUnavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(requireNetnsEnv) == "1" {
		t.Fatalf("cannot mount: %s (%s=1: this is a failure)", why, requireNetnsEnv)
	}
	t.Skipf("\n*** SKIPPING: cannot mount: %s\n*** run as root with CAP_SYS_ADMIN, or set %s=1 to make this a failure", why, requireNetnsEnv)
}
