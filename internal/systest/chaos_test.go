package systest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/coord/backup"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/sink/pgsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// chaosIdleBound is what the chaos test allows beyond the lease TTL, for
// a claim to stay held and for recovery to make no progress while the
// secondary lags raw: a holder killed or cut off keeps its claim until
// its lease ends on the majority, and when it was the leader that takes
// an election and one more election timeout on top of the TTL — 8.5 s at
// TTL 3 s with a split vote (docs/coordination.md §"How long a lost
// claim lasts") — plus slack for the -race build on a loaded machine
// (9.2 s seen there).
const chaosIdleBound = 7 * time.Second

// TestCoordinationChaos: three recovery nodes, each in a network namespace
// of its own joined by a bridge, form a mode-3 coordination cluster and
// fill a Postgres secondary from a Postgres raw table that an ingest node
// keeps growing (live ingest at about 500 records a second on top of a
// backlog). Their database stays reachable from every namespace (a Unix
// socket proxy); only the coordination traffic is cut. First the nodes
// join one by one, and after each joins the ingest node takes a burst of
// records: recovery throughput with one, two and three nodes. Then, for WEIR_CHAOS_SECONDS (default 60), a schedule drawn from
// WEIR_CHAOS_SEED (logged; it replays the choices) disturbs one node at a
// time — kill -9 and restart, SIGTERM and restart, or a partition healed
// after a few seconds — the leader in about half the draws. Throughout:
// no over-claimed coverage (every position the secondary's coverage row
// in weir_offsets names is in the table, sampled every second), no claim
// held longer than the lease TTL + chaosIdleBound, and while the
// secondary lags raw it grows in every interval of that length. In the
// end the secondary equals raw, no window had two holders at once, and
// when all three nodes get SIGTERM at once the newest backup (encrypted)
// holds every coordination write committed before.
func TestCoordinationChaos(t *testing.T) {
	const (
		leaseTTL  = 3 * time.Second
		backlog   = 20000 // before the first node starts
		burst     = 60000 // for each throughput figure
		burstLag  = 5000
		liveEvery = 100 * time.Millisecond
		liveBatch = 50 // 500 records a second
		sinkName  = "pg"
	)
	chaosFor := envDuration(t, "WEIR_CHAOS_SECONDS", 60*time.Second)
	seed := envSeed(t, "WEIR_CHAOS_SEED", "chaos schedule seed")
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	nets := newTestBridge(t, 3)

	sec := newPGTable(t, "weir_chaos")
	raw := pgRaw(t, sec.conn)
	ing := newDaemon(t, "--config", writeConfig(t, pgRawTOML(sec.dsn, raw)+pgSecondaryTOML(sec.via, sec.table, "queue_batches = 1", `timeout = "2s"
create_table = true`)), "--role", "ingest", "--coverage-flush-interval", "50ms")
	sec.proxy.Cut()
	ing.start()
	l := newLedger()
	produce(ctxTimeout(t, 90*time.Second), t, ing.socket, "chaos", backlog, 200, client.Durable, l, 20*time.Second)
	if got := l.ackedCount(); got != backlog {
		t.Fatalf("%d of %d records acked", got, backlog)
	}

	// Live ingest for the rest of the test, at a steady rate.
	liveCtx, stopLive := context.WithCancel(context.Background())
	var liveWG sync.WaitGroup
	liveWG.Go(func() { produceSteady(liveCtx, t, ing.socket, "live", liveBatch, liveEvery, l) })
	defer func() { stopLive(); liveWG.Wait() }()

	// The recovery nodes' database: one Unix socket proxy, reached from
	// every namespace and never cut.
	via, recProxy := testenv.PostgresUnixProxy(t, sec.dsn)
	keyFile := filepath.Join(t.TempDir(), "backup.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bucket := "file://" + t.TempDir()
	nodes := make([]*coordNode, 3)
	for k := range nodes {
		nodes[k] = &coordNode{name: fmt.Sprintf("rec-%d", k), peer: nets[k].nsIP + ":2380", client: nets[k].nsIP + ":2379"}
	}
	for k, nd := range nodes {
		cfg := pgRawTOML(via, raw) + pgSecondaryTOML(via, sec.table, "", `timeout = "15s"`) + nd.coordTOML(3, nodes[0],
			"recovery_leases = true", fmt.Sprintf("lease_ttl = %q", leaseTTL.String()), `session_ttl = "3s"`,
			"claim_positions = 1024", `ready_timeout = "20s"`, `handoff_grace = "5s"`,
			fmt.Sprintf("backup_url = %q", bucket), `backup_interval = "1h"`, fmt.Sprintf("backup_key_file = %q", keyFile))
		nd.daemon = newDaemon(t, "--config", writeConfig(t, cfg), "--role", "recovery",
			"--recovery-window-records", "128", "--coverage-flush-interval", "50ms")
		nd.netns = nets[k]
	}
	dumpCoordLogs(t, nodes)
	// The logs of the processes a restart replaced, written beside the
	// last one's when the test fails.
	earlier := map[*coordNode]string{}
	t.Cleanup(func() {
		for nd, log := range earlier {
			if f := filepath.Join(nd.dir, "weir-earlier.log"); t.Failed() && os.WriteFile(f, []byte(log), 0o600) == nil {
				t.Logf("%s's earlier processes' logs: %s", nd.name, f)
			}
		}
	})

	// Samplers: the secondary's and raw's row counts every 250 ms, the
	// coverage row against the table every second.
	smp := startChaosSampler(t, sec.dsn, raw, sec.table, sinkName)
	defer smp.close()

	// Throughput with one, two and three nodes: each node joins, then
	// the ingest node takes a burst (faster than recovery works it off)
	// and the secondary's growth is measured while it lags by a lot.
	rates := make([]float64, 3)
	for k, nd := range nodes {
		nd.startNoSocket()
		switch k {
		case 0:
			nd.waitScrape("a one-member cluster", 60*time.Second, func(m map[string]float64) bool {
				return m["weir_coordination_members"] == 1 && m[`weir_coordination_role{role="quorum"}`] == 1
			})
		case 2:
			nodes[0].waitScrape("3 members", 60*time.Second, func(m map[string]float64) bool {
				return m["weir_coordination_members"] == 3
			})
		}
		nd.waitScrape(nd.name+" recovering", 60*time.Second, func(m map[string]float64) bool { return recovered(m) > 0 })
		// The burst reaches raw while the recovery nodes' database
		// holds still (a few seconds, within their commit timeout), so
		// the figure is recovery's and not the ingest node's drain.
		smp.waitLag(t, 1000, 60*time.Second)
		recProxy.Stall()
		rawBefore := smp.last().raw
		produce(ctxTimeout(t, 90*time.Second), t, ing.socket, fmt.Sprintf("burst%d", k), burst, 200, client.Durable, l, 20*time.Second)
		smp.waitRaw(t, rawBefore+burst, 60*time.Second)
		resumed := time.Now()
		recProxy.Resume()
		smp.waitLag(t, 1000, 90*time.Second)
		rates[k] = smp.rateWhileLagging(resumed, time.Now(), burstLag)
		t.Logf("recovery with %d node(s): %.0f records/s into the secondary while it lagged by %d or more (a burst of %d; live ingest %d/s)",
			k+1, rates[k], burstLag, burst, int(float64(liveBatch)/liveEvery.Seconds()))
	}
	endpoints := clientAddrs(nodes)
	w := watchClaims(t, endpoints)

	// The schedule.
	type disturbance struct {
		at       time.Time
		node     string
		what     string
		leader   bool
		held     map[string]int64
		restored time.Time
	}
	var done []disturbance
	leaderOf := func() int {
		for k, nd := range nodes {
			if m, err := nd.tryScrape(); err == nil && m["weir_coordination_leader"] == 1 {
				return k
			}
		}
		return -1
	}
	chaosStart := time.Now()
	for time.Since(chaosStart) < chaosFor {
		lead := leaderOf()
		k := rng.IntN(3)
		if lead >= 0 && rng.IntN(2) == 0 {
			k = lead
		}
		nd := nodes[k]
		// Act while it holds a window when it can.
		deadline := time.Now().Add(3 * time.Second)
		for len(w.heldBy(nd.name, time.Now())) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		d := disturbance{at: time.Now(), node: nd.name, leader: k == lead}
		d.held = w.heldBy(nd.name, d.at)
		switch rng.IntN(3) {
		case 0:
			d.what = "kill -9"
			nd.kill()
			earlier[nd] += nd.log.String()
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
			nd.startNoSocket()
		case 1:
			d.what = "SIGTERM"
			if err := nd.stop(30 * time.Second); err != nil {
				t.Errorf("%s: SIGTERM: %v", nd.name, err)
			}
			earlier[nd] += nd.log.String()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			nd.startNoSocket()
		default:
			d.what = "partition"
			nets[k].partition(t)
			time.Sleep(time.Duration(3000+rng.IntN(5000)) * time.Millisecond)
			nets[k].heal(t)
		}
		d.restored = time.Now()
		done = append(done, d)
		t.Logf("%5.1fs %s of %s (leader: %v) holding %d window(s), back after %v",
			d.at.Sub(chaosStart).Seconds(), d.what, d.node, d.leader, len(d.held), d.restored.Sub(d.at).Round(time.Millisecond))
		// Whole again before the next: the node a voter, one leader, and
		// the windows it held free again (a leader change while a claim
		// waits out its lease extends the lease once more; one
		// disturbance at a time keeps each within its own bound).
		w.waitFreed(t, d.held, d.at, 30*time.Second)
		nd.waitScrape(nd.name+" a voter again", 60*time.Second, func(m map[string]float64) bool {
			return m[`weir_coordination_role{role="quorum"}`] == 1 && m["weir_coordination_members"] == 3
		})
		waitOneLeader(t, nodes, 30*time.Second)
		time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
	}
	chaosEnd := time.Now()

	// Ingest stops; the secondary catches up with raw.
	stopLive()
	liveWG.Wait()
	acked := l.snapshot()
	waitRawAndSecondary(t, ing, sec.conn, sec.table, acked, func() (map[sink.RecordID]bool, map[string]int) {
		return rawTable(t, sec.conn, raw)
	}, 120*time.Second)
	smp.close()

	// The check can fail: with one covered record taken out of the
	// table, it reports the position.
	conn, err := pgx.Connect(ctxTimeout(t, 10*time.Second), sec.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tbl, rawName := pgx.Identifier{sec.table}.Sanitize(), pgx.Identifier{raw}.Sanitize()
	if _, err := conn.Exec(ctxTimeout(t, 10*time.Second), "DELETE FROM "+tbl+" WHERE weir_record_id = (SELECT weir_record_id FROM "+rawName+" WHERE weir_position = 7)"); err != nil {
		t.Fatal(err)
	}
	if found, err := overClaimed(ctxTimeout(t, 10*time.Second), conn, rawName, tbl, sinkName); err != nil || !strings.Contains(found, "(first 7)") {
		t.Errorf("with the record at position 7 taken out of the table, the over-claim check found %q, %v", found, err)
	}

	// Over-claim: every sample.
	if len(smp.overClaims) > 0 {
		t.Errorf("coverage over-claimed in %d of %d samples:\n%s", len(smp.overClaims), smp.coverageSamples, strings.Join(smp.overClaims, "\n"))
	}
	if smp.coverageSamples < int(chaosFor/time.Second)/2 {
		t.Errorf("only %d coverage samples", smp.coverageSamples)
	}
	// Progress while lagging.
	stall, stallAt := smp.longestStall(chaosStart, chaosEnd)
	if stall > leaseTTL+chaosIdleBound {
		t.Errorf("the secondary did not grow for %v from %.1fs into the chaos while it lagged raw; want at most %v",
			stall.Round(time.Millisecond), stallAt.Sub(chaosStart).Seconds(), leaseTTL+chaosIdleBound)
	}
	events := w.snapshot()
	if bad := checkExclusive(events); len(bad) > 0 {
		t.Errorf("windows held by two claims at once:\n%s", strings.Join(bad, "\n"))
	}
	longest, longestKey := longestClaim(events, time.Now())
	if longest > leaseTTL+chaosIdleBound {
		t.Errorf("claim %s held for %v; want at most %v", longestKey, longest.Round(time.Millisecond), leaseTTL+chaosIdleBound)
	}
	// Each disturbed node's windows worked again.
	var report []string
	for _, d := range done {
		again := workedAgain(events, d.held, d.at)
		report = append(report, fmt.Sprintf("%s of %s (leader %v): %d window(s) held, worked again: %v", d.what, d.node, d.leader, len(d.held), again))
	}
	t.Logf("chaos: %d disturbances in %v, seed %d:\n  %s", len(done), chaosEnd.Sub(chaosStart).Round(time.Millisecond), seed, strings.Join(report, "\n  "))
	t.Logf("longest interval without progress while lagging: %v (at %.1fs); longest claim: %v (%s); %d coverage samples; throughput 1/2/3 nodes: %.0f/%.0f/%.0f records/s",
		stall.Round(time.Millisecond), stallAt.Sub(chaosStart).Seconds(), longest.Round(time.Millisecond), longestKey,
		smp.coverageSamples, rates[0], rates[1], rates[2])

	// The whole cluster stops at once: the newest backup holds a write
	// committed just before.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctxTimeout(t, 10*time.Second), "/systest/chaos-marker", "before the stop")
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	wroteAt := time.Now()
	var stopWG sync.WaitGroup
	for _, nd := range nodes {
		stopWG.Go(func() {
			if err := nd.stop(30 * time.Second); err != nil {
				t.Errorf("%s stop: %v\n%s", nd.name, err, tail(nd.log.String(), 3000))
			}
		})
	}
	stopWG.Wait()
	bk, err := backup.Open(ctxTimeout(t, 10*time.Second), bucket, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	keys, err := backup.ParseKeys(hex.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	bk.Keys = keys
	info, ok, err := bk.Latest(ctxTimeout(t, 10*time.Second))
	switch {
	case err != nil || !ok:
		t.Errorf("no backup after the whole cluster stopped: %v", err)
	case info.Revision < put.Header.Revision:
		t.Errorf("the newest backup (%s, revision %d, by %s) is older than the last write before the stop (revision %d)",
			info.Key, info.Revision, info.Node, put.Header.Revision)
	case info.KeyID == "":
		t.Errorf("the newest backup %s is not encrypted", info.Key)
	default:
		t.Logf("backup at the whole-cluster stop: %s by %s, revision %d (last write %d), taken %v after it, sealed with key %s",
			info.Key, info.Node, info.Revision, put.Header.Revision, info.Time.Sub(wroteAt).Round(time.Millisecond), info.KeyID)
	}
}

// waitFreed waits until every claim in held (window key → create
// revision) is gone or replaced by a newer claim.
func (w *claimWatch) waitFreed(t *testing.T, held map[string]int64, since time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		events := w.snapshot()
		for key, rev := range held {
			free := false
			for _, e := range events {
				if e.key == key && ((!e.put && e.createRev == rev) || (e.put && e.createRev != rev)) && e.rev > rev {
					free = true
				}
			}
			if !free {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the windows %v still held %v after the disturbance", left, held, time.Since(since).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOneLeader waits until exactly one node reports itself the leader.
func waitOneLeader(t *testing.T, nodes []*coordNode, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var leaders []string
		for _, nd := range nodes {
			if m, err := nd.tryScrape(); err == nil && m["weir_coordination_leader"] == 1 {
				leaders = append(leaders, nd.name)
			}
		}
		if len(leaders) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders after %v: %v; want exactly one", timeout, leaders)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produceSteady pushes batch records named name-<i> every interval until
// ctx ends, recording every answer in l.
func produceSteady(ctx context.Context, t *testing.T, socket, name string, batch int, every time.Duration, l *ledger) {
	c, err := client.Dial(ctx, socket)
	if err != nil {
		t.Errorf("live producer: dial: %v", err)
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i += batch {
		select {
		case <-ctx.Done():
			closeCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c.Close(closeCtx)
			return
		case <-tick.C:
		}
		payloads := make([][]byte, batch)
		for j := range payloads {
			payloads[j] = fmt.Appendf(nil, "%s-%08d", name, i+j)
		}
		if err := c.PushAsync(ctx, payloads, client.Durable, func(err error) { l.result(payloads, err) }); err != nil && ctx.Err() == nil {
			t.Errorf("live producer: %v", err)
			return
		}
	}
}

// chaosSampler reads the database on its own connection while the test
// disturbs the nodes.
type chaosSampler struct {
	conn                 *pgx.Conn
	raw, secondary, sink string
	stop                 context.CancelFunc
	done                 chan struct{}
	mu                   sync.Mutex
	counts               []countSample
	overClaims           []string
	coverageSamples      int
	progressFrom         time.Time
}

type countSample struct {
	at       time.Time
	sec, raw int64
}

func startChaosSampler(t *testing.T, dsn, raw, secondary, sinkName string) *chaosSampler {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &chaosSampler{conn: conn, raw: pgx.Identifier{raw}.Sanitize(), secondary: pgx.Identifier{secondary}.Sanitize(),
		sink: sinkName, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.sampleCounts(ctx)
			if i%4 == 0 {
				s.checkCoverage(ctx)
			}
		}
	}()
	return s
}

func (s *chaosSampler) close() {
	s.stop()
	<-s.done
}

func (s *chaosSampler) sampleCounts(ctx context.Context) {
	var c countSample
	if err := s.conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+s.secondary+"), (SELECT count(*) FROM "+s.raw+")").Scan(&c.sec, &c.raw); err != nil {
		return
	}
	c.at = time.Now()
	s.mu.Lock()
	s.counts = append(s.counts, c)
	s.mu.Unlock()
}

// checkCoverage records what overClaimed finds, and counts the samples
// it could take.
func (s *chaosSampler) checkCoverage(ctx context.Context) {
	found, err := overClaimed(ctx, s.conn, s.raw, s.secondary, s.sink)
	if err != nil {
		return // not written yet, or the database was busy: no sample
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.coverageSamples++
	if found != "" {
		s.overClaims = append(s.overClaims, time.Now().Format("15:04:05.000")+": "+found)
	}
}

// overClaimed reads the secondary's coverage row (raw and secondary are
// sanitized table names), then asks the database for covered raw
// positions whose record the table lacks, and for covered positions past
// raw's end. The row is written after the table's commit, so anything it
// names must be there when it is read. It returns "" when there are none.
func overClaimed(ctx context.Context, conn *pgx.Conn, raw, secondary, sinkName string) (string, error) {
	var val []byte
	err := conn.QueryRow(ctx, "SELECT value FROM "+pgsink.OffsetsTable+" WHERE raw_table = $1 AND kind = 'coverage' AND name = $2",
		raw, sinkName).Scan(&val)
	if err != nil {
		return "", err
	}
	var cov engine.SpanSet
	if err := cov.UnmarshalBinary(val); err != nil {
		return fmt.Sprintf("unreadable coverage row %x: %v", val, err), nil
	}
	var los, his []int64
	for _, sp := range cov.Spans() {
		los, his = append(los, int64(sp.Lo)), append(his, int64(sp.Hi))
	}
	var missing, beyond int64
	var first *int64
	err = conn.QueryRow(ctx, `WITH c AS (SELECT unnest($1::bigint[]) AS lo, unnest($2::bigint[]) AS hi),
		covered AS (SELECT r.weir_position, r.weir_record_id FROM `+raw+` r JOIN c ON r.weir_position >= c.lo AND r.weir_position < c.hi),
		lacking AS (SELECT weir_position FROM covered WHERE NOT EXISTS (SELECT 1 FROM `+secondary+` t WHERE t.weir_record_id = covered.weir_record_id))
		SELECT (SELECT count(*) FROM lacking), (SELECT min(weir_position) FROM lacking),
		       (SELECT COALESCE(sum(GREATEST(0, c.hi - GREATEST(c.lo, e.n))), 0)::bigint
		          FROM c, (SELECT COALESCE(max(weir_position) + 1, 0) AS n FROM `+raw+`) e)`, los, his).Scan(&missing, &first, &beyond)
	if err != nil {
		return "", err
	}
	if missing == 0 && beyond == 0 {
		return "", nil
	}
	at := int64(-1)
	if first != nil {
		at = *first
	}
	return fmt.Sprintf("coverage %s names %d position(s) whose record the table lacks (first %d) and %d past raw's end",
		cov.String(), missing, at, beyond), nil
}

func (s *chaosSampler) last() countSample {
	for {
		s.mu.Lock()
		n := len(s.counts)
		var c countSample
		if n > 0 {
			c = s.counts[n-1]
		}
		s.mu.Unlock()
		if n > 0 {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLag waits until the secondary lacks fewer than n of raw's rows.
func (s *chaosSampler) waitLag(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := s.last()
		if c.raw-c.sec < n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary still lacks %d of raw's %d rows after %v", c.raw-c.sec, c.raw, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRaw waits until raw holds at least n rows.
func (s *chaosSampler) waitRaw(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.last().raw < n {
		if time.Now().After(deadline) {
			t.Fatalf("raw holds %d rows after %v; want %d", s.last().raw, timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rateWhileLagging is the secondary's growth per second between the
// first and the last sample in [from, to] at which it lacked at least
// minLag of raw's rows.
func (s *chaosSampler) rateWhileLagging(from, to time.Time, minLag int64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first, last *countSample
	for i := range s.counts {
		c := &s.counts[i]
		if c.at.Before(from) || c.at.After(to) || c.raw-c.sec < minLag {
			continue
		}
		if first == nil {
			first = c
		}
		last = c
	}
	if first == nil || !last.at.After(first.at) {
		return 0
	}
	return float64(last.sec-first.sec) / last.at.Sub(first.at).Seconds()
}

// longestStall is the longest time in [from, to] over which the
// secondary did not grow although it lagged raw at the start, and when
// it began.
func (s *chaosSampler) longestStall(from, to time.Time) (time.Duration, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	var at time.Time
	var start *countSample
	for i := range s.counts {
		c := &s.counts[i]
		if c.at.Before(from) || c.at.After(to) {
			continue
		}
		if start != nil && c.sec == start.sec {
			if d := c.at.Sub(start.at); d > longest {
				longest, at = d, start.at
			}
			continue
		}
		start = nil
		if c.raw > c.sec {
			start = c
		}
	}
	return longest, at
}

// longestClaim is the longest time a claim was held (from the put that
// created it to its delete, or to end if still held), and its key.
func longestClaim(events []claimEvent, end time.Time) (time.Duration, string) {
	type hold struct {
		at  time.Time
		rev int64
	}
	held := map[string]hold{}
	var longest time.Duration
	var key string
	note := func(k string, h hold, to time.Time) {
		if d := to.Sub(h.at); d > longest {
			longest, key = d, fmt.Sprintf("%s (rev %d)", k, h.rev)
		}
	}
	for _, e := range events {
		h, ok := held[e.key]
		switch {
		case e.put && (!ok || h.rev != e.createRev):
			held[e.key] = hold{e.at, e.createRev}
		case !e.put && ok && h.rev == e.createRev:
			note(e.key, h, e.at)
			delete(held, e.key)
		}
	}
	for k, h := range held {
		note(k, h, end)
	}
	return longest, key
}

// workedAgain is how long after at the last of held's windows was claimed
// again (by anyone, under a new claim), or "never".
func workedAgain(events []claimEvent, held map[string]int64, at time.Time) string {
	if len(held) == 0 {
		return "-"
	}
	var last time.Duration
	for key, rev := range held {
		found := false
		for _, e := range events {
			if e.key == key && e.put && e.createRev != rev && e.at.After(at) {
				last, found = max(last, e.at.Sub(at)), true
				break
			}
		}
		if !found {
			return "not claimed again (its holder finished it)"
		}
	}
	return "after " + last.Round(time.Millisecond).String()
}
