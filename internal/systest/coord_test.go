package systest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/coord/leases"
	"github.com/weir-io/weir/internal/testenv"
)

// claimsPrefix is where recovery window claims live in etcd
// (docs/coordination.md §Distributed recovery).
const claimsPrefix = "/weir/recovery/windows/"

// claimEvent is one change of a claim key, as a watch from the test saw it.
type claimEvent struct {
	at        time.Time // when the first of the watches saw it
	rev       int64     // the store's revision of the change: events are in its order
	key       string
	put       bool
	createRev int64 // of the key written (put) or removed (delete: the previous value's)
	holder    string
	lease     int64
}

// claimWatch records every change under claimsPrefix from the moment it
// starts.
type claimWatch struct {
	mu     sync.Mutex
	events []claimEvent
	seen   map[claimChange]bool
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// claimChange names one change: the key and the revision it happened at.
type claimChange struct {
	key string
	rev int64
}

// watchClaims reads the claims held now and then follows every change,
// with one watch through each member alone: a member cut off, stopped or
// killed delays only its own watch (which starts again from the last
// revision it saw), and a change counts when the first watch sees it.
func watchClaims(t *testing.T, endpoints []string) *claimWatch {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	w := &claimWatch{stop: cancel, seen: map[claimChange]bool{}}
	// What is held now, then every change after it.
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	now, err := cli.Get(gctx, claimsPrefix, clientv3.WithPrefix())
	gcancel()
	if err != nil {
		cancel()
		t.Fatalf("read the claims: %v", err)
	}
	for _, kv := range now.Kvs {
		w.events = append(w.events, claimEvent{at: time.Now(), rev: kv.ModRevision, key: string(kv.Key), put: true,
			createRev: kv.CreateRevision, holder: string(kv.Value), lease: kv.Lease})
	}
	for _, ep := range endpoints {
		w.wg.Go(func() { w.follow(ctx, ep, now.Header.Revision+1) })
	}
	t.Cleanup(w.close)
	return w
}

// follow watches the claims through endpoint alone from revision from
// until ctx ends. A watch that ends (its member lost the leader, or the
// connection broke) is opened again from the revision after the last
// change it delivered.
func (w *claimWatch) follow(ctx context.Context, endpoint string, from int64) {
	// Keepalive moves a watch off a connection whose member stopped
	// answering (SIGSTOP, a partition) without closing it.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop(),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		return
	}
	defer cli.Close()
	next := from
	for ctx.Err() == nil {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range cli.Watch(wctx, claimsPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(next)) {
			w.add(resp.Events)
			for _, ev := range resp.Events {
				next = max(next, ev.Kv.ModRevision+1)
			}
		}
		wcancel()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// add records the changes no other watch has delivered yet.
func (w *claimWatch) add(evs []*clientv3.Event) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		id := claimChange{string(ev.Kv.Key), ev.Kv.ModRevision}
		if w.seen[id] {
			continue
		}
		w.seen[id] = true
		e := claimEvent{at: now, rev: ev.Kv.ModRevision, key: string(ev.Kv.Key), put: ev.Type == clientv3.EventTypePut}
		kv := ev.Kv
		if !e.put && ev.PrevKv != nil {
			kv = ev.PrevKv
		}
		e.createRev, e.holder, e.lease = kv.CreateRevision, string(kv.Value), kv.Lease
		w.events = append(w.events, e)
	}
}

func (w *claimWatch) close() {
	w.stop()
	w.wg.Wait()
}

// heldBy returns the windows holder held at t, by the watch.
func (w *claimWatch) heldBy(holder string, t time.Time) map[string]int64 {
	held := map[string]int64{}
	for _, e := range w.snapshot() {
		if e.at.After(t) || e.holder != holder {
			continue
		}
		if e.put {
			held[e.key] = e.createRev
		} else {
			delete(held, e.key)
		}
	}
	return held
}

// waitHolders waits until each of holders holds a claim.
func (w *claimWatch) waitHolders(t *testing.T, holders []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, h := range holders {
		for len(w.heldBy(h, time.Now())) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds no recovery window claim after %v", h, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitTakenOver waits until every window in held has been claimed by a
// node other than holder.
func (w *claimWatch) waitTakenOver(t *testing.T, held map[string]int64, holder string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		for key := range held {
			taken := false
			for _, e := range w.snapshot() {
				if e.key == key && e.put && e.holder != holder {
					taken = true
				}
			}
			if !taken {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %s's windows %v not claimed by another node after %v", left, holder, held, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot is every change so far in the store's order (the order the
// watches delivered them in may differ).
func (w *claimWatch) snapshot() []claimEvent {
	w.mu.Lock()
	out := append([]claimEvent(nil), w.events...)
	w.mu.Unlock()
	slices.SortStableFunc(out, func(a, b claimEvent) int { return cmp.Compare(a.rev, b.rev) })
	return out
}

// checkExclusive reports every window that two holders had at once: a
// claim created while the key was still held by an earlier claim.
func checkExclusive(events []claimEvent) []string {
	held := map[string]claimEvent{}
	var bad []string
	for _, e := range events {
		cur, ok := held[e.key]
		switch {
		case e.put && ok && cur.createRev != e.createRev:
			bad = append(bad, fmt.Sprintf("%s: claimed by %s (rev %d) while %s held it (rev %d)", e.key, e.holder, e.createRev, cur.holder, cur.createRev))
			held[e.key] = e
		case e.put:
			held[e.key] = e
		default:
			delete(held, e.key)
		}
	}
	return bad
}

// coordNode is one node of a coordination cluster under test.
type coordNode struct {
	*daemon
	name         string
	peer, client string
}

// newCoordNodes names n nodes prefix-0 … prefix-<n-1> (the ordinals) and
// gives each a peer and a client address on loopback.
func newCoordNodes(t testing.TB, prefix string, n int) []*coordNode {
	t.Helper()
	nodes := make([]*coordNode, n)
	for i := range nodes {
		nodes[i] = &coordNode{name: fmt.Sprintf("%s-%d", prefix, i),
			peer: fmt.Sprintf("127.0.0.1:%d", freePort(t)), client: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	}
	return nodes
}

// dumpCoordLogs writes each node's log next to its data when t fails and
// logs the tail of its claims, warnings, errors and coordination lines.
func dumpCoordLogs(t *testing.T, nodes []*coordNode) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range nodes {
			if nd.daemon != nil && nd.log != nil {
				if f := filepath.Join(nd.dir, "weir.log"); os.WriteFile(f, []byte(nd.log.String()), 0o600) == nil {
					t.Logf("%s's whole log: %s", nd.name, f)
				}
				t.Logf("--- %s: claims, warnings and errors (tail) ---\n%s", nd.name, tail(grepLines(nd.log.String(),
					`msg="recovery window`, "level=WARN", "level=ERROR", `msg="coordination`, "commit failed", "fenced coverage", "role", "opened",
					"leadership", "departed"), 6000))
			}
		}
	})
}

// clientAddrs are the nodes' etcd client addresses.
func clientAddrs(nodes []*coordNode) []string {
	out := make([]string, 0, len(nodes))
	for _, nd := range nodes {
		out = append(out, nd.client)
	}
	return out
}

// coordTOML is nd's [coordination] table in mode: first bootstraps the
// cluster, every other node joins through first's client address; extra
// lines (key = value) follow.
func (nd *coordNode) coordTOML(mode int, first *coordNode, extra ...string) string {
	join := ""
	if nd != first {
		join = fmt.Sprintf("join = [%q]\n", first.client)
	}
	return fmt.Sprintf(`
[coordination]
mode = %d
node = %q
peer_listen = %q
client_listen = %q
%s%s
`, mode, nd.name, nd.peer, nd.client, join, strings.Join(extra, "\n"))
}

// pgBacklog is an ingest node (role = "ingest") whose Postgres secondary
// is cut off from the start, with records acknowledged into raw that the
// table lacks: the work recovery nodes share.
type pgBacklog struct {
	db  *pgTable
	ing *daemon
	l   *ledger
	n   int // records acked
}

// newPGBacklog starts the ingest node on a fresh table (prefix) and
// produces n records.
func newPGBacklog(t testing.TB, prefix string, n int) *pgBacklog {
	t.Helper()
	db := newPGTable(t, prefix)
	ing := newDaemon(t, "--config", writeConfig(t, pgSecondaryTOML(db.via, db.table, "queue_batches = 1", `timeout = "2s"`)),
		"--role", "ingest", "--coverage-flush-interval", "50ms")
	db.proxy.Cut()
	ing.start()
	bl := &pgBacklog{db: db, ing: ing, l: newLedger()}
	bl.add(t, "cr", n)
	return bl
}

// add produces n more records named name-<i>; every one must be acked.
func (bl *pgBacklog) add(t testing.TB, name string, n int) {
	t.Helper()
	produce(ctxTimeout(t, 60*time.Second+time.Duration(n)*250*time.Microsecond), t, bl.ing.socket, name, n, 200,
		client.Durable, bl.l, 20*time.Second)
	bl.n += n
	if got := bl.l.ackedCount(); got != bl.n {
		t.Fatalf("%d of %d records acked", got, bl.n)
	}
}

// recoveryDaemon prepares a recovery node (role = "recovery") on the
// ingest node's raw, its secondary writing the backlog's table through
// dsn, with the [coordination] table coord; extra flags follow.
func (bl *pgBacklog) recoveryDaemon(t testing.TB, dsn, coord string, extra ...string) *daemon {
	t.Helper()
	cfg := pgSecondaryTOML(dsn, bl.db.table, "", `timeout = "5s"`) + coord
	return newDaemon(t, append([]string{"--config", writeConfig(t, cfg), "--role", "recovery",
		"--sink-file-dir", bl.ing.outDir(), "--coverage-flush-interval", "50ms"}, extra...)...)
}

// TestCoordinatedRecoveryThreeNodes: an ingest node (role = "ingest")
// takes a backlog while its Postgres secondary is cut off from it. Three
// recovery nodes (role = "recovery") on the same raw form a mode-3
// coordination cluster — the first bootstraps, the others join as
// learners — and share the backlog by claiming windows of raw with
// leases. One node is paused (SIGSTOP) past its lease and resumed: the
// offset store's fence refuses the coverage it would record for windows
// claimed meanwhile. Then the leader is killed -9: the other two keep
// quorum, its windows are claimed again within the lease TTL and some
// slack, and every raw position reaches the table. A watch on the claim
// keys shows that no window ever had two holders.
func TestCoordinatedRecoveryThreeNodes(t *testing.T) {
	const (
		n        = 40000 // the first backlog
		n2       = 20000 // the second, for the leader's kill
		leaseTTL = 3 * time.Second
	)
	bl := newPGBacklog(t, "weir_coordrec", n)
	db, ing := bl.db, bl.ing

	// The recovery nodes reach the database through a proxy of their own,
	// cut until the cluster has formed and the test watches the claims.
	recVia, recProxy := testenv.PostgresProxy(t, db.dsn)
	recProxy.Cut()

	nodes := newCoordNodes(t, "rec", 3)
	endpoints := clientAddrs(nodes)
	dumpCoordLogs(t, nodes)
	for i, nd := range nodes {
		nd.daemon = bl.recoveryDaemon(t, recVia, nd.coordTOML(3, nodes[0], "recovery_leases = true",
			fmt.Sprintf("lease_ttl = %q", leaseTTL.String()), `session_ttl = "3s"`, "claim_positions = 1024",
			`ready_timeout = "20s"`, `handoff_grace = "5s"`), "--recovery-window-records", "128")
		nd.startNoSocket()
		if i == 1 {
			// Two members would be worse than one: the second node
			// waits as a worker until a third checks in.
			time.Sleep(3 * time.Second)
			if m := nodes[0].scrape(); m["weir_coordination_members"] != 1 {
				t.Fatalf("with one member and one worker the cluster has %v members; want 1 (2 is never a resting size)", m["weir_coordination_members"])
			}
			m := nd.scrape()
			if m[`weir_coordination_role{role="worker"}`] != 1 {
				t.Fatalf("%s is not a worker while it waits for a third node", nd.name)
			}
			// The quorum member runs the reduced flow profile, the
			// worker the full budget.
			if q, w := nodes[0].scrape()["weir_memory_budget_bytes"], m["weir_memory_budget_bytes"]; q <= 0 || q != w/2 {
				t.Errorf("memory budget: %v on the quorum member, %v on the worker; want half (flow.quorum_budget_percent = 50)", q, w)
			}
		}
	}
	// The third node's check-in lets both join: 1 → 3.
	nodes[0].waitScrape("3 members", 60*time.Second, func(m map[string]float64) bool {
		return m["weir_coordination_members"] == 3
	})
	b0 := nodes[0].scrape()["weir_memory_budget_bytes"]
	nodes[1].waitScrape("the quorum profile's budget on a new voter", 10*time.Second, func(m map[string]float64) bool {
		return m["weir_memory_budget_bytes"] == b0
	})
	w := watchClaims(t, endpoints)
	if err := recProxy.Restore(); err != nil {
		t.Fatal(err)
	}

	inTable := func() int { return len(tableIDs(t, db.conn, db.table)) }
	waitRows := func(what string, rows int, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for inTable() < rows {
			if time.Now().After(deadline) {
				t.Fatalf("%s: table has %d rows after %v, want %d", what, inTable(), timeout, rows)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRows("recovery under way", 2000, 60*time.Second)

	leader := -1
	for i, nd := range nodes {
		if nd.scrape()["weir_coordination_leader"] == 1 {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node reports itself the leader (weir_coordination_leader)")
	}
	paused := (leader + 1) % 3

	// The database stalls: every node sits in a window's commit, holding
	// its claim. One (not the leader) is then stopped past its lease; the
	// database answers again, the others finish their windows and claim
	// the stopped node's; resumed, it gets its commit's answer and must
	// not record coverage under its old claim.
	recProxy.Stall()
	w.waitHolders(t, []string{nodes[paused].name}, 20*time.Second)
	// Let the coverage writes under way when the database stalled finish
	// first: each takes the offset store's file lock, shared by the three
	// processes on this one raw, and a process stopped while it holds the
	// lock holds up every other node's coverage until it is resumed (the
	// test would wait for claims it cannot see: the others' windows never
	// end). Every node then sits in a stalled commit, holding its claim.
	time.Sleep(time.Second)
	nodes[paused].cmd.Process.Signal(syscall.SIGSTOP)
	pausedAt := time.Now()
	time.Sleep(leaseTTL + 2*time.Second)
	recProxy.Resume()
	held := w.heldBy(nodes[paused].name, pausedAt)
	// 60 s: after the stall the others' commits time out and back off
	// before their windows end (once seen at 14 s on a loaded machine).
	w.waitTakenOver(t, held, nodes[paused].name, 60*time.Second)
	recProxy.Stall()
	nodes[paused].cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("%s stopped (SIGSTOP) for %v holding %v, its windows claimed by others, resumed; table %d of %d",
		nodes[paused].name, time.Since(pausedAt).Round(time.Millisecond), held, inTable(), n)

	// kill -9 of the leader while it holds a claim: the other two keep
	// quorum and claim its window once its lease ends. The two left may
	// have finished the first backlog while the paused node's claim ran
	// out, so the ingest node takes a second one, which the database
	// (stalled again) keeps in the nodes' hands.
	bl.add(t, "cr2", n2)
	w.waitHolders(t, []string{nodes[leader].name}, 20*time.Second)
	killedAt := time.Now()
	nodes[leader].kill()
	t.Logf("leader %s killed -9 holding %v; table %d of %d", nodes[leader].name, w.heldBy(nodes[leader].name, killedAt), inTable(), n+n2)
	time.Sleep(time.Second)
	recProxy.Resume()

	waitTableEqualsRaw(t, ing, db.conn, db.table, n+n2, 120*time.Second)

	events := w.snapshot()
	if bad := checkExclusive(events); len(bad) > 0 {
		t.Errorf("windows held by two claims at once:\n%s", strings.Join(bad, "\n"))
	}
	checkReclaimed(t, events, nodes[leader].name, killedAt, leaseTTL+5*time.Second)
	claimedAfter := 0
	for _, e := range events {
		if e.put && e.at.After(killedAt) {
			claimedAfter++
		}
	}
	if claimedAfter == 0 {
		t.Error("no window was claimed after the leader was killed: the two left did not keep quorum")
	}
	// The resumed node gave each old claim up (its lease was lost, or the
	// store fenced it off) instead of working on under it.
	for key, token := range held {
		line := fmt.Sprintf("window=%s token=%d reason=", strings.TrimPrefix(key, claimsPrefix), claimToken(token))
		if !strings.Contains(grepLines(nodes[paused].log.String(), `msg="recovery window released"`, `msg="releasing a recovery window failed`), line) {
			t.Errorf("%s never gave up its claim %s (token %d) after it resumed", nodes[paused].name, key, token)
		}
	}
	checkFencedAfterResume(t, events, nodes[paused], pausedAt)
	claimedBy := map[string]int{}
	for _, e := range events {
		if e.put {
			claimedBy[e.holder]++
		}
	}
	t.Logf("claims per node: %v (%d claim events)", claimedBy, len(events))
	if len(claimedBy) < 2 {
		t.Errorf("windows were claimed by %d node(s); want the backlog shared", len(claimedBy))
	}
	for i, nd := range nodes {
		if i == leader {
			continue
		}
		if err := nd.stop(30 * time.Second); err != nil {
			t.Errorf("%s stop: %v\n%s", nd.name, err, tail(nd.log.String(), 4000))
		}
	}
}

// checkReclaimed: every claim the killed node held at its death is gone
// (its lease expired) within limit of the kill.
func checkReclaimed(t *testing.T, events []claimEvent, dead string, killedAt time.Time, limit time.Duration) {
	t.Helper()
	held := map[string]bool{}
	for _, e := range events {
		if e.at.After(killedAt) {
			if !e.put && e.holder == dead && held[e.key] {
				delete(held, e.key)
				if d := e.at.Sub(killedAt); d > limit {
					t.Errorf("%s's claim on %s went %v after the kill; want within %v", dead, e.key, d.Round(time.Millisecond), limit)
				}
			}
			continue
		}
		if e.holder == dead {
			held[e.key] = e.put
		}
	}
	for k, h := range held {
		if h {
			t.Errorf("%s's claim on %s was never released after the kill", dead, k)
		}
	}
}

// checkFencedAfterResume: for every window the paused node held when it
// was stopped and another node claimed while it was stopped, the paused
// node recorded no coverage after it resumed under its old claim.
func checkFencedAfterResume(t *testing.T, events []claimEvent, nd *coordNode, pausedAt time.Time) {
	t.Helper()
	held := map[string]int64{} // key → the paused node's claim revision at the pause
	for _, e := range events {
		if e.at.After(pausedAt) {
			break
		}
		if e.holder == nd.name {
			if e.put {
				held[e.key] = e.createRev
			} else {
				delete(held, e.key)
			}
		}
	}
	taken := map[string]int64{}
	for _, e := range events {
		if e.at.After(pausedAt) && e.put && e.holder != nd.name && held[e.key] != 0 && taken[e.key] == 0 {
			taken[e.key] = e.createRev
		}
	}
	log := nd.log.String()
	for key, rev := range taken {
		old := held[key]
		window := strings.TrimPrefix(key, claimsPrefix)
		if recorded := fencedCoverage(log, window, old, pausedAt); recorded > 0 {
			t.Errorf("%s recorded coverage %d times for window %s under its old claim (token %d) after %s (token %d) claimed it",
				nd.name, recorded, window, old, "another node", rev)
		}
	}
	t.Logf("%s held %d windows at its pause; %d were claimed by others while it was stopped", nd.name, len(held), len(taken))
}

// claimToken is the token of the claim whose key was created at rev, in
// a cluster started afresh over a fresh offset store: its claim epoch is 1
// (internal/coord/leases, "Tokens survive a claims store that lost its
// history").
func claimToken(rev int64) int64 { return 1<<leases.EpochShift | rev }

// fencedCoverage counts the log lines, stamped after after, in which a
// node recorded coverage for window under the claim created at rev.
func fencedCoverage(log, window string, rev int64, after time.Time) int {
	token := claimToken(rev)
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="fenced coverage recorded"`) || !strings.Contains(line, "window="+window+" ") ||
			!strings.Contains(line, fmt.Sprintf("token=%d", token)) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, stamp); err != nil || at.After(after) {
			n++ // an unreadable stamp counts against the node
		}
	}
	return n
}

// grepLines keeps the lines of log that contain any of words.
func grepLines(log string, words ...string) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				b.WriteString(line)
				b.WriteByte('\n')
				break
			}
		}
	}
	return b.String()
}

// TestCoordinationBackupRestoreMode1: a mode-1 node backs its
// coordination store up every second, to a file:// bucket and to an
// s3:// bucket (an in-memory S3 server in the test process); it is
// killed -9 and its coordination data directory is deleted (the disk is
// lost). At the next start it restores the latest backup: a key written
// before that backup is there again.
func TestCoordinationBackupRestoreMode1(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket func(t *testing.T) (url string, env []string)
	}{
		{"file", func(t *testing.T) (string, []string) { return "file://" + t.TempDir(), nil }},
		{"s3", fakeS3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, env := tc.bucket(t)
			testBackupRestoreMode1(t, url, env)
		})
	}
}

// fakeS3 serves an in-memory S3 bucket "weir" on a loopback port for the
// test's duration, and returns its URL and the environment a daemon needs
// to sign its requests without looking for real credentials.
func fakeS3(t *testing.T) (string, []string) {
	s3 := testenv.FakeS3(t, "weir", nil)
	return s3.URL("coord"), s3.Env
}

func testBackupRestoreMode1(t *testing.T, bucketURL string, env []string) {
	peer, clientAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d := newDaemon(t, "--coordination-mode", "1", "--coordination-node", "weir-0",
		"--coordination-peer-listen", peer, "--coordination-client-listen", clientAddr,
		"--coordination-backup-url", bucketURL, "--coordination-backup-interval", "1s")
	d.env = env
	d.start()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := cli.Put(ctx, "/systest/marker", "before the loss"); err != nil {
		t.Fatal(err)
	}
	put := float64(time.Now().UnixNano()) / 1e9
	d.waitScrape("a backup after the write", 15*time.Second, func(m map[string]float64) bool {
		return m["weir_coordination_backup_last_success_timestamp_seconds"] > put
	})
	d.kill()
	if err := os.RemoveAll(filepath.Join(d.dir, "coordination")); err != nil {
		t.Fatal(err)
	}
	d.start()
	resp, err := cli.Get(ctx, "/systest/marker")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before the loss" {
		t.Fatalf("after the restore from %s /systest/marker is %v; want the value written before the last backup\n%s", bucketURL, resp.Kvs, tail(d.log.String(), 3000))
	}
	if err := d.stop(30 * time.Second); err != nil {
		t.Errorf("stop: %v\n%s", err, tail(d.log.String(), 3000))
	}
}
