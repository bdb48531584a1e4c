package systest

import (
	"context"
	"fmt"
	"github.com/jackc/pgx/v5"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// shutdownTimeout is the shutdown_timeout TestShutdownBoundedWhenPeersStall
// gives the daemon; it must exit within it plus shutdownSlack.
const (
	shutdownTimeout = 3 * time.Second
	shutdownSlack   = time.Second
)

// TestShutdownBoundedWhenPeersStall: Run promises the whole shutdown
// within shutdown_timeout. A daemon with a Postgres primary raw, a
// Postgres secondary, a JetStream source and coordination on an external
// etcd — each reached through its own proxy — takes pushes and messages;
// then every proxy stalls at once (connections stay open, no byte moves)
// while the drain, the secondary, the source and the coordination client
// are busy, and SIGTERM must end the process within shutdown_timeout + 1s.
// After the proxies forward again a restarted daemon delivers every acked
// record to raw and the secondary.
func TestShutdownBoundedWhenPeersStall(t *testing.T) {
	dsn := testenv.Postgres(t)
	natsURL, js := jetStream(t)
	natsTarget, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)

	rawVia, pRaw := pgBehind(t, dsn, proxyForward)
	secVia, pSec := pgBehind(t, dsn, proxyForward)
	pNATS := newStallProxy(t, natsTarget.Host, proxyForward)
	pEtcd := newStallProxy(t, strings.TrimPrefix(etcd.Endpoint, "http://"), proxyForward)
	proxies := []*stallProxy{pRaw, pSec, pNATS, pEtcd}

	conn := pgConn(t, dsn)
	rawTbl := pgRaw(t, conn)
	secTbl := testenv.PostgresTable(t, dsn, "weir_stall_sec")
	sfx := testenv.Suffix()
	stream, subject := "WEIRSTALL_"+sfx, "weirstall."+sfx
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })

	cfg := writeConfig(t, fmt.Sprintf(`
shutdown_timeout = %q

[sink]
type = "postgres"
[sink.postgres]
dsn = %q
table = %q
batch_records = 200

[[source]]
name = "events"
type = "nats"
[source.nats]
url = "nats://%s"
stream = %q
consumer = "weir"
fetch_batch = 100
fetch_max_wait = "500ms"
ack_wait = "5s"

[coordination]
mode = 1
node = "stall-0"
endpoints = [%q]
`, shutdownTimeout, rawVia, rawTbl, pNATS.Addr(), stream, pEtcd.Addr())+
		pgSecondaryTOML(secVia, secTbl, "", "batch_records = 200"))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms", "--segment-max-age", "100ms")
	d.start()
	d.waitScrape("coordination on the external etcd", 15*time.Second, func(m map[string]float64) bool {
		return sum(m, "weir_coordination_members") > 0
	})

	// Producers on the socket and publishers on the stream, until told to
	// stop.
	l := newLedger()
	var jsMu sync.Mutex
	published := map[string]bool{}
	pctx, stopProducing := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			produce(pctx, t, d.socket, fmt.Sprintf("sock%04d", i), 200, 50, client.Durable, l, 5*time.Second)
			sleepCtx(pctx, 50*time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			payload := fmt.Sprintf("js-%07d", i)
			if _, err := js.Publish(pctx, subject, []byte(payload)); err != nil {
				if pctx.Err() == nil {
					t.Errorf("publish: %v", err)
				}
				return
			}
			jsMu.Lock()
			published[payload] = true
			jsMu.Unlock()
			if i%50 == 49 {
				sleepCtx(pctx, 20*time.Millisecond)
			}
		}
	}()
	// Everything is connected and moving: raw and the secondary have rows
	// from both the socket and the stream.
	t.Cleanup(func() { stopProducing(); wg.Wait() }) // before the test ends, whatever fails
	waitFor(t, d, "rows from the socket and the stream in raw and the secondary", 30*time.Second, func() bool {
		if !pgTableExists(t, conn, rawTbl) || !pgTableExists(t, conn, secTbl) {
			return false // the sinks open in the background
		}
		_, raw := rawTable(t, conn, rawTbl)
		return hasPrefix(raw, "sock") && hasPrefix(raw, "js-") && len(tableIDs(t, conn, secTbl)) > 0
	})
	time.Sleep(time.Second)

	stallAll(proxies...)
	stalled := time.Now()
	// Pushes still go into the buffer (acked) while every peer stalls, so
	// the drain, the secondary and the source are mid-call when SIGTERM
	// comes.
	time.Sleep(time.Second)
	stopProducing()
	wg.Wait()
	acked := l.snapshot()
	jsMu.Lock()
	for p := range published {
		acked[p] = true
	}
	jsMu.Unlock()
	t.Logf("%d records acked (socket and stream) before SIGTERM; peers stalled for %v", len(acked), time.Since(stalled).Round(time.Millisecond))

	exit, exitErr := sigtermExit(d, 60*time.Second)
	t.Logf("SIGTERM with every peer stalled: the process exited after %v (%v); shutdown_timeout %v", exit.Round(time.Millisecond), exitErr, shutdownTimeout)
	if exit > shutdownTimeout+shutdownSlack {
		t.Errorf("the process took %v to exit after SIGTERM; want within shutdown_timeout (%v) + %v\n--- daemon log (tail) ---\n%s",
			exit.Round(time.Millisecond), shutdownTimeout, shutdownSlack, tail(d.log.String(), 6000))
	}

	forwardAll(proxies...)
	d.start()
	waitRawAndSecondary(t, d, conn, secTbl, acked, func() (map[sink.RecordID]bool, map[string]int) { return rawTable(t, conn, rawTbl) }, 90*time.Second)
	if err := d.stop(30 * time.Second); err != nil {
		t.Errorf("stop after the restart: %v", err)
	}
}

// sigtermExit sends SIGTERM and returns how long the process took to
// exit, and its exit error; past limit it kills the process and returns
// the time until the kill.
func sigtermExit(d *daemon, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	err := d.stop(limit)
	return time.Since(start), err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func hasPrefix(payloads map[string]int, prefix string) bool {
	for p := range payloads {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing after timeout with the
// daemon's log.
func waitFor(t *testing.T, d *daemon, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s\n--- daemon log (tail) ---\n%s", timeout, what, tail(d.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pgTableExists reports whether table exists yet.
func pgTableExists(t *testing.T, conn *pgx.Conn, table string) bool {
	t.Helper()
	var reg *string
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass($1)::text", pgx.Identifier{table}.Sanitize()).Scan(&reg); err != nil {
		t.Fatal(err)
	}
	return reg != nil
}
