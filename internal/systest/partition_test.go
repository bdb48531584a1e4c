package systest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/testenv"
)

// TestCoordinationPartition: three recovery nodes form a mode-3
// coordination cluster and share a Postgres backlog by leased windows, as
// in TestCoordinatedRecoveryThreeNodes, but one of them (rec-2) runs in a
// network namespace of its own, joined to the others by a veth pair. The
// pair is cut while rec-2 holds a window it cannot finish (its database
// connection is stalled; the database stays reachable from both sides —
// only the coordination traffic is partitioned). The majority keeps
// quorum: rec-2's claim expires there and the window is claimed again
// within the lease TTL and some slack. The minority records no claim
// while cut off — not even with unclaimed windows of a second backlog in
// sight (the majority's database is stalled so that it holds only a
// window each) — gives its claim up once its write returns, and records
// no coverage under the old claim after the majority's claim. The pair
// is healed: rec-2 rejoins and claims again. In the end every raw
// position reaches the table — no coverage over-claimed — and the watch
// on the claim keys shows no window with two holders.
func TestCoordinationPartition(t *testing.T) {
	ns := newTestNetns(t)
	db := newPGTable(t, "weir_partition")
	const (
		n        = 30000 // the first backlog
		n2       = 10000 // the second, produced while rec-2 is cut off
		leaseTTL = 3 * time.Second
		sink     = "pg"
	)
	ing := newDaemon(t, "--config", writeConfig(t, pgSecondaryTOML(db.via, db.table, "queue_batches = 1", `timeout = "2s"`)),
		"--role", "ingest", "--coverage-flush-interval", "50ms")
	db.proxy.Cut()
	ing.start()
	l := newLedger()
	produce(ctxTimeout(t, 60*time.Second), t, ing.socket, "pt", n, 200, client.Durable, l, 20*time.Second)
	if got := l.ackedCount(); got != n {
		t.Fatalf("%d of %d records acked", got, n)
	}

	// The majority reaches the database through a TCP proxy on the
	// host's loopback; rec-2, which cannot reach that loopback, through
	// a proxy on a Unix socket, which crosses network namespaces. Both
	// are cut until the cluster has formed and the claims are watched.
	majVia, majProxy := testenv.PostgresProxy(t, db.dsn)
	minVia, minProxy := testenv.PostgresUnixProxy(t, db.dsn)
	majProxy.Cut()
	minProxy.Cut()

	nodes := make([]*coordNode, 3)
	for i := range nodes {
		nodes[i] = &coordNode{name: fmt.Sprintf("rec-%d", i)}
		if i < 2 {
			nodes[i].peer, nodes[i].client = freeAddr(t, ns.hostIP), freeAddr(t, ns.hostIP)
		} else {
			// A namespace of its own: every port is free.
			nodes[i].peer, nodes[i].client = net.JoinHostPort(ns.nsIP, "2380"), net.JoinHostPort(ns.nsIP, "2379")
		}
	}
	minority := nodes[2]
	for i, nd := range nodes {
		join := ""
		if i > 0 {
			join = fmt.Sprintf("join = [%q]\n", nodes[0].client)
		}
		// rec-2's writes wait for its stalled database as long as the
		// test needs; the majority's time out as in production.
		dsn, timeout := majVia, "5s"
		if nd == minority {
			dsn, timeout = minVia, "60s"
		}
		cfg := pgSecondaryTOML(dsn, db.table, "", fmt.Sprintf("timeout = %q", timeout)) + fmt.Sprintf(`
[coordination]
mode = 3
node = %q
peer_listen = %q
client_listen = %q
%srecovery_leases = true
lease_ttl = "%s"
session_ttl = "3s"
claim_positions = 1024
ready_timeout = "20s"
handoff_grace = "5s"
`, nd.name, nd.peer, nd.client, join, leaseTTL)
		nd.daemon = newDaemon(t, "--config", writeConfig(t, cfg), "--role", "recovery", "--sink-file-dir", ing.outDir(),
			"--recovery-window-records", "128", "--coverage-flush-interval", "50ms")
		if nd == minority {
			nd.netns = ns
		}
		nd.startNoSocket()
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range nodes {
			if nd.daemon != nil && nd.log != nil {
				if f := filepath.Join(nd.dir, "weir.log"); os.WriteFile(f, []byte(nd.log.String()), 0o600) == nil {
					t.Logf("%s's whole log: %s", nd.name, f)
				}
				// etcd's slow-request warnings would fill the tail.
				quiet := strings.Join(slices.DeleteFunc(strings.Split(nd.log.String(), "\n"), func(line string) bool {
					return strings.Contains(line, `msg="request stats"`) || strings.Contains(line, "apply request took too long")
				}), "\n")
				t.Logf("--- %s (%s, peer %s, client %s): claims, warnings and errors (tail) ---\n%s", nd.name, nd.dir, nd.peer, nd.client,
					tail(grepLines(quiet, `msg="recovery window`, "recovery lease", "level=WARN", "level=ERROR", `msg="coordination`,
						"fenced coverage", "role", "opened", "check"), 6000))
			}
		}
	})
	nodes[0].waitScrape("3 members", 60*time.Second, func(m map[string]float64) bool {
		return m["weir_coordination_members"] == 3
	})
	minority.waitScrape("3 members as rec-2 sees them", 30*time.Second, func(m map[string]float64) bool {
		return m["weir_coordination_members"] == 3 && m[`weir_coordination_role{role="quorum"}`] == 1
	})
	// The claims as the majority's members see them: the watch goes on
	// through the partition.
	w := watchClaims(t, []string{nodes[0].client, nodes[1].client})
	if err := majProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := minProxy.Restore(); err != nil {
		t.Fatal(err)
	}

	inTable := func() int { return len(tableIDs(t, db.conn, db.table)) }
	deadline := time.Now().Add(60 * time.Second)
	for inTable() < 2000 {
		if time.Now().After(deadline) {
			t.Fatalf("recovery under way: table has %d rows after 60s", inTable())
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader := "none"
	for _, nd := range nodes {
		if nd.scrape()["weir_coordination_leader"] == 1 {
			leader = nd.name
		}
	}

	// rec-2's database stalls: it sits in a window's write, holding its
	// claim, while the other two go on. Then the veth pair is cut.
	minProxy.Stall()
	w.waitHolders(t, []string{minority.name}, 20*time.Second)
	time.Sleep(200 * time.Millisecond) // into the write
	rowsAtCut := inTable()
	ns.partition(t)
	cutAt := time.Now()
	held := w.heldBy(minority.name, cutAt)
	t.Logf("partitioned %s (leader: %s) holding %v; table %d of %d", minority.name, leader, held, rowsAtCut, n)
	if len(held) == 0 {
		t.Fatalf("%s held no claim when it was cut off", minority.name)
	}

	// The majority keeps quorum: the lease of rec-2's claim expires there
	// and another node claims the window.
	reclaimedAt := map[string]time.Time{} // window key → the majority's claim
	deadline = time.Now().Add(leaseTTL + 20*time.Second)
	for len(reclaimedAt) < len(held) {
		for _, e := range w.snapshot() {
			if _, ok := held[e.key]; ok && e.put && e.holder != minority.name && e.at.After(cutAt) && reclaimedAt[e.key].IsZero() {
				reclaimedAt[e.key] = e.at
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's windows %v not claimed by another node within %v of the cut (claimed: %v)", minority.name, held, leaseTTL+20*time.Second, reclaimedAt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var firstReclaim time.Time
	for _, at := range reclaimedAt {
		if firstReclaim.IsZero() || at.Before(firstReclaim) {
			firstReclaim = at
		}
	}
	// The lease expires within its TTL of the last renewal; a majority
	// node then needs to finish the window it works on.
	if limit := leaseTTL + 7*time.Second; firstReclaim.Sub(cutAt) > limit {
		t.Errorf("%s's window claimed again %v after the cut; want within %v", minority.name, firstReclaim.Sub(cutAt).Round(time.Millisecond), limit)
	}

	// Still cut off, rec-2 gets its database back: its write returns, and
	// it must give the claim up — the lease is lost — rather than record
	// coverage under it. Its release cannot reach a quorum and fails
	// after a few seconds; the log says so either way.
	minProxy.Resume()
	releasedWithin := 20 * time.Second
	deadline = time.Now().Add(releasedWithin)
	for key, token := range held {
		line := fmt.Sprintf("window=%s token=%d reason=", strings.TrimPrefix(key, claimsPrefix), claimToken(token))
		for {
			released := grepLines(minority.log.String(), `msg="recovery window released"`, `msg="releasing a recovery window failed`,
				`msg="a newer claim holds the window`)
			if strings.Contains(released, line) {
				t.Logf("%s gave up %s (token %d), cut off:\n%s", minority.name, key, token,
					grepLines(released, fmt.Sprintf("window=%s token=%d ", strings.TrimPrefix(key, claimsPrefix), claimToken(token))))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not give up its claim on %s (token %d) within %v of getting its database back, cut off", minority.name, key, token, releasedWithin)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	minority.waitScrape("rec-2 holding no claim while cut off", 10*time.Second, func(m map[string]float64) bool {
		return m[fmt.Sprintf("weir_recovery_leases_held{sink=%q}", sink)] == 0
	})
	rowsCut := inTable()
	if rowsCut <= rowsAtCut {
		t.Errorf("the table did not grow while %s was cut off (%d rows at the cut, %d now): the majority did not go on", minority.name, rowsAtCut, rowsCut)
	}

	// Still cut off, rec-2 sees new work it must not claim: a second
	// backlog, of which the majority, its database stalled, holds a
	// window each and leaves the rest unclaimed. Then the pair is healed:
	// rec-2 rejoins and claims those.
	majProxy.Stall()
	produceAt := time.Now()
	produce(ctxTimeout(t, 60*time.Second), t, ing.socket, "pt2", n2, 200, client.Durable, l, 20*time.Second)
	if got := l.ackedCount(); got != n+n2 {
		t.Fatalf("%d of %d records acked", got, n+n2)
	}
	produced := time.Since(produceAt)
	time.Sleep(time.Second) // raw's new end reaches every node
	ns.heal(t)
	healAt := time.Now()
	var rejoinedAt time.Time
	deadline = time.Now().Add(30 * time.Second)
	for rejoinedAt.IsZero() {
		for _, e := range w.snapshot() {
			if e.put && e.holder == minority.name && e.at.After(healAt) {
				rejoinedAt = e.at
				break
			}
		}
		if rejoinedAt.IsZero() {
			if time.Now().After(deadline) {
				t.Fatalf("%s claimed no window within 30s of the healing", minority.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	majProxy.Resume()

	waitTableEqualsRaw(t, ing, db.conn, db.table, n+n2, 90*time.Second)

	events := w.snapshot()
	if bad := checkExclusive(events); len(bad) > 0 {
		t.Errorf("windows held by two claims at once:\n%s", strings.Join(bad, "\n"))
	}
	// The majority's members expired rec-2's claim within its TTL and
	// some slack.
	checkReclaimed(t, events, minority.name, cutAt, leaseTTL+5*time.Second)
	// No claim of rec-2's while it was cut off: not in the store, not in
	// its own log.
	for _, e := range events {
		if e.put && e.holder == minority.name && e.at.After(cutAt) && e.at.Before(healAt) {
			t.Errorf("%s claimed %s (rev %d) while cut off", minority.name, e.key, e.createRev)
		}
	}
	if c := loggedBetween(minority.log.String(), `msg="recovery window claimed"`, cutAt, healAt); c > 0 {
		t.Errorf("%s logged %d claims while cut off", minority.name, c)
	}
	// Nothing recorded under the old claim once the majority's claim was
	// there: the lease loss stops it, or else the offset store's fence.
	for key, token := range held {
		window := strings.TrimPrefix(key, claimsPrefix)
		if recorded := fencedCoverage(minority.log.String(), window, token, reclaimedAt[key]); recorded > 0 {
			t.Errorf("%s recorded coverage %d times for window %s under its old claim (token %d) after another node claimed it",
				minority.name, recorded, window, token)
		}
	}
	claimedBy := map[string]int{}
	for _, e := range events {
		if e.put {
			claimedBy[e.holder]++
		}
	}
	tried := loggedBetween(minority.log.String(), "list held recovery windows", cutAt, healAt)
	t.Logf("%s's claim gone on the majority %v after the cut, its window claimed again %v after it; a second backlog produced in %v while cut off (%d failed looks for a window there); healed after %v; %s claimed again %v after the healing; claims per node %v (%d claim events)",
		minority.name, firstDelete(events, held, cutAt).Round(time.Millisecond), firstReclaim.Sub(cutAt).Round(time.Millisecond),
		produced.Round(time.Millisecond), tried, healAt.Sub(cutAt).Round(time.Millisecond), minority.name,
		rejoinedAt.Sub(healAt).Round(time.Millisecond), claimedBy, len(events))
	for _, nd := range nodes {
		if err := nd.stop(30 * time.Second); err != nil {
			t.Errorf("%s stop: %v\n%s", nd.name, err, tail(nd.log.String(), 4000))
		}
	}
}

// freeAddr is host:port with a port free on ip right now (pickPort).
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	addr, _, err := pickPort(ip)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// loggedBetween counts the log lines with word stamped in (from, to).
func loggedBetween(log, word string, from, to time.Time) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, word) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, stamp); err != nil || (at.After(from) && at.Before(to)) {
			n++ // an unreadable stamp counts
		}
	}
	return n
}

// firstDelete is how long after t the first of held's keys was deleted.
func firstDelete(events []claimEvent, held map[string]int64, t time.Time) time.Duration {
	for _, e := range events {
		if _, ok := held[e.key]; ok && !e.put && e.at.After(t) {
			return e.at.Sub(t)
		}
	}
	return -1
}
