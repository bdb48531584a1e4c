package systest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Benchmarks of the coordination tier on the real binary
// (docs/coordination.md). Each iteration is a whole scenario, reported
// with b.ReportMetric (no BENCH lines, so benchstat reads the output):
// run them with -bench and -count, e.g.
//
//	go test -run '^$' -bench 'ModeOneStart|CoordinatedRecovery' -count 5 ./internal/systest
//
// Every node, the test and Postgres share the machine's cores.

// BenchmarkModeOneStart: `weir serve` in a fresh data directory with
// coordination off (mode 0) and with a single embedded etcd member (mode
// 1): the time from launch until /ready answers 200, and the resident set
// (VmRSS) 2 s after that. The difference between the two is what the
// embedded member costs a node.
func BenchmarkModeOneStart(b *testing.B) {
	for _, mode := range []int{0, 1} {
		b.Run(fmt.Sprintf("mode=%d", mode), func(b *testing.B) {
			var ready time.Duration
			var rss int64
			for range b.N {
				r, m := startToReady(b, mode)
				ready += r
				rss += m
			}
			ms := float64(ready.Microseconds()) / 1e3 / float64(b.N)
			mib := float64(rss) / (1 << 20) / float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms, "ms_to_ready")
			b.ReportMetric(mib, "rss_MiB")
		})
	}
}

// startToReady starts a node in mode and returns how long it took to be
// ready and its VmRSS 2 s later; it stops the node.
func startToReady(b *testing.B, mode int) (time.Duration, int64) {
	b.Helper()
	args := []string{"--log-level", "info"}
	if mode > 0 {
		args = append(args, "--coordination-mode", strconv.Itoa(mode), "--coordination-node", "weir-0",
			"--coordination-peer-listen", fmt.Sprintf("127.0.0.1:%d", freePort(b)),
			"--coordination-client-listen", fmt.Sprintf("127.0.0.1:%d", freePort(b)))
	}
	d := newDaemon(b, args...)
	start := time.Now()
	if err := d.launch(); err != nil {
		b.Fatal(err)
	}
	for {
		if code, _, err := d.httpGet("/ready"); err == nil && code == 200 {
			break
		}
		if d.exited() {
			b.Fatalf("weir exited before it was ready: %v\n%s", d.err, tail(d.log.String(), 3000))
		}
		if time.Since(start) > 60*time.Second {
			b.Fatalf("weir not ready after 60s\n%s", tail(d.log.String(), 3000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready := time.Since(start)
	time.Sleep(2 * time.Second)
	rss, _, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	if m := d.scrape(); mode > 0 && m[`weir_coordination_role{role="quorum"}`] != 1 {
		b.Fatalf("the mode-%d node holds no quorum role", mode)
	}
	if err := d.stop(30 * time.Second); err != nil {
		b.Fatalf("stop: %v\n%s", err, tail(d.log.String(), 3000))
	}
	return ready, rss
}

// BenchmarkCoordinatedRecovery: recovery throughput of one backlog shared
// by 1, 2 and 3 recovery nodes. An ingest node takes
// WEIR_RECOVERY_BENCH_RECORDS records (default 1,000,000: about 20 s a
// run, half of it producing) while its Postgres secondary is cut off;
// then k recovery nodes with recovery leases are started one after the
// other on its raw — in mode 1 for k = 1, in mode 3 for k = 2 (the second
// waits as a worker, which still claims windows) and k = 3 (1 → 3 while
// they recover) — and write the table directly. Reported: records/s from
// the moment all k nodes are ready until the table holds every record
// (the rows already recovered by then are not counted), the seconds from
// the first node's launch until then, and, for nodes=2 and 3, the factor
// over the median records/s of nodes=1 in this process (run -count 1
// several times to interleave the three). The backlog must outlast the
// nodes' start: one node recovers 40,000 records in well under a second,
// before a third node is ready.
func BenchmarkCoordinatedRecovery(b *testing.B) {
	n := envInt(b, "WEIR_RECOVERY_BENCH_RECORDS", 1000000)
	var one []float64 // records/s of nodes=1 in this run
	for _, k := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("nodes=%d", k), func(b *testing.B) {
			var r recoveryRun
			for range b.N {
				ri := recoverBacklog(b, k, n)
				r.records += ri.records
				r.took += ri.took
				r.total += ri.total
			}
			rate := float64(r.records) / r.took.Seconds()
			if k == 1 {
				one = append(one, rate)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(r.total.Seconds()/float64(b.N), "s_from_launch")
			if base := median(one); k > 1 && base > 0 {
				b.ReportMetric(rate/base, "x_vs_1")
				b.Logf("nodes=%d: %.0f records/s, %.2f× the median of nodes=1 (%.0f records/s)", k, rate, rate/base, base)
			}
		})
	}
}

// claimPositions is the benchmark's coordination.claim_positions: the
// default backlog is 245 windows to share.
const claimPositions = 4096

// recoveryRun is one backlog's recovery: the records recovered while all
// the nodes ran and how long that took; total is from the first launch.
type recoveryRun struct {
	records     int
	took, total time.Duration
}

// recoverBacklog runs one backlog of n records through k recovery nodes.
func recoverBacklog(b *testing.B, k, n int) recoveryRun {
	b.Helper()
	bl := newPGBacklog(b, "weir_recbench", n)
	deadline := time.Now().Add(60 * time.Second)
	for len(rawIDs(b, bl.ing)) < n {
		if time.Now().After(deadline) {
			b.Fatalf("raw holds fewer than %d records after 60s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mode := 1
	if k > 1 {
		mode = 3
	}
	nodes := newCoordNodes(b, "rec", k)
	launched := time.Now()
	for _, nd := range nodes {
		nd.daemon = bl.recoveryDaemon(b, bl.db.dsn, nd.coordTOML(mode, nodes[0], "recovery_leases = true",
			fmt.Sprintf("claim_positions = %d", claimPositions), `ready_timeout = "20s"`), "--log-level", "info")
		nd.startNoSocket()
	}
	up := time.Now()
	before := countRows(bl.db.conn, bl.db.table)
	if before >= n*9/10 {
		b.Fatalf("%d of %d records recovered before the %d nodes were ready: set WEIR_RECOVERY_BENCH_RECORDS higher", before, n, k)
	}
	limit := 60*time.Second + time.Duration(n)*time.Millisecond
	for rows := before; rows < n; rows = countRows(bl.db.conn, bl.db.table) {
		if time.Since(up) > limit {
			b.Fatalf("%d of %d rows in the table after %v", rows, n, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := recoveryRun{records: n - before, took: time.Since(up), total: time.Since(launched)}
	waitTableEqualsRaw(b, bl.ing, bl.db.conn, bl.db.table, n, 60*time.Second)
	var claims []string
	for _, nd := range nodes {
		claims = append(claims, fmt.Sprintf("%s %d", nd.name, strings.Count(nd.log.String(), `msg="recovery window claimed"`)))
		nd.kill()
	}
	b.Logf("nodes=%d: all ready %v after the first launch with %d of %d rows in; the other %d in %v; windows claimed: %s",
		k, up.Sub(launched).Round(time.Millisecond), before, n, r.records, r.took.Round(time.Millisecond), strings.Join(claims, ", "))
	bl.ing.kill()
	return r
}

// countRows is the table's row count (0 before the sink created it).
func countRows(conn *pgx.Conn, table string) int {
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		return 0
	}
	return n
}
