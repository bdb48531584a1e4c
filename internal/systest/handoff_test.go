package systest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// putTimeout bounds one put of the pause writer: a put sent to a member
// that cannot commit gives up this soon and the next is sent.
const putTimeout = 300 * time.Millisecond

// putWriter runs writers that each put a key about every 20 ms, one put
// at a time, through a client of every member, and keeps the time each
// successful put was answered: the longest gap between two is the longest
// the cluster committed no writes. Several writers, so that one put stuck
// on a member until its timeout does not hide the others' successes.
type putWriter struct {
	mu    sync.Mutex
	ok    []putDone // by answer time
	fails []time.Time
	stop  context.CancelFunc
	wg    sync.WaitGroup
	cli   *clientv3.Client
	once  sync.Once
}

const putWriters = 4

func startPutWriter(t *testing.T, endpoints []string) *putWriter {
	t.Helper()
	// Keepalive moves requests off a member that stopped answering
	// without closing its connections.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &putWriter{stop: cancel, cli: cli}
	for i := range putWriters {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // staggered: a put every 5 ms in all
			for j := 0; ctx.Err() == nil; j++ {
				rctx, rcancel := context.WithTimeout(ctx, putTimeout)
				sent := time.Now()
				_, err := cli.Put(rctx, fmt.Sprintf("/systest/pause/%d", i), strconv.Itoa(j))
				rcancel()
				now := time.Now()
				w.mu.Lock()
				if err == nil {
					w.ok = append(w.ok, putDone{at: now, took: now.Sub(sent)})
					for k := len(w.ok) - 1; k > 0 && w.ok[k].at.Before(w.ok[k-1].at); k-- {
						w.ok[k], w.ok[k-1] = w.ok[k-1], w.ok[k]
					}
				} else if ctx.Err() == nil {
					w.fails = append(w.fails, now)
				}
				w.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(w.close)
	return w
}

// putDone is one successful put: when it was answered, how long it took.
type putDone struct {
	at   time.Time
	took time.Duration
}

func (w *putWriter) close() {
	w.once.Do(func() {
		w.stop()
		w.wg.Wait()
		w.cli.Close()
	})
}

// waitOK waits until a put answered after after succeeded and then puts
// kept succeeding for settle.
func (w *putWriter) waitOK(t *testing.T, after time.Time, settle, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var first time.Time
		if i, _ := slices.BinarySearchFunc(w.ok, after, func(d putDone, t time.Time) int { return d.at.Compare(t) }); i < len(w.ok) {
			first = w.ok[i].at
		}
		w.mu.Unlock()
		if !first.IsZero() && time.Since(first) >= settle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no successful put after %s within %v", after.Format(time.StampMilli), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writePause is the longest the writer went without a successful put in
// [from, to]: the longest gap between two successes (or a window edge and
// a success) within it, and the puts that failed in it.
type writePause struct {
	longest time.Duration
	at      time.Time // the success that ended it
	ok      int
	failed  int
	slowest time.Duration // the slowest successful put answered in it
}

func (p writePause) String() string {
	return fmt.Sprintf("%v (ended %s; %d puts ok, %d failed or timed out (%v), slowest ok %v)", p.longest.Round(time.Millisecond),
		p.at.Format("15:04:05.000"), p.ok, p.failed, putTimeout, p.slowest.Round(time.Millisecond))
}

func (w *putWriter) pauseIn(from, to time.Time) writePause {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := writePause{}
	prev := from
	for _, d := range w.ok {
		if d.at.Before(from) {
			prev = d.at // the last success before the window starts it
			continue
		}
		if d.at.After(to) {
			break
		}
		p.ok++
		p.slowest = max(p.slowest, d.took)
		if gap := d.at.Sub(prev); gap > p.longest {
			p.longest, p.at = gap, d.at
		}
		prev = d.at
	}
	if d := to.Sub(prev); d > p.longest {
		p.longest, p.at = d, to
	}
	for _, at := range w.fails {
		if !at.Before(from) && !at.After(to) {
			p.failed++
		}
	}
	return p
}

// leaderOf waits until exactly one of nodes reports itself the leader
// (weir_coordination_leader, refreshed every second) and returns it.
func leaderOf(t *testing.T, nodes []*coordNode, timeout time.Duration) *coordNode {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var leaders []*coordNode
		for _, nd := range nodes {
			if m, err := nd.tryScrape(); err == nil && m["weir_coordination_leader"] == 1 {
				leaders = append(leaders, nd)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes report themselves the leader after %v; want one", len(leaders), len(nodes), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTime is the time stamp of the first line of log containing msg.
func logTime(log, msg string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		return at, err == nil
	}
	return time.Time{}, false
}

// without is nodes without nd.
func without(nodes []*coordNode, nd *coordNode) []*coordNode {
	return slices.DeleteFunc(slices.Clone(nodes), func(x *coordNode) bool { return x == nd })
}

// TestLeaderHandoffWritePause: three `weir serve` nodes form a mode-3
// coordination cluster (1 → 3) while a writer in the test puts a key
// every 5 ms through all three members. SIGTERM of the leader moves
// leadership to another member before its member stops, and it exits
// within its handoff grace; the other two keep serving writes without a
// reconfiguration (three voters listed, the stopped one departed). The
// stopped node is restarted and rejoins as the member it was. Then the
// leader is killed -9 instead: the two left elect a leader after an
// election timeout. The longest write pause of the graceful handoff must
// be well below the crash's (measured on 2 cores: about 30 ms against
// 1.3 s; the writer's gap with no failure is about 25 ms).
func TestLeaderHandoffWritePause(t *testing.T) {
	const grace = 5 * time.Second
	nodes := newCoordNodes(t, "weir", 3)
	dumpCoordLogs(t, nodes)
	for _, nd := range nodes {
		nd.daemon = newDaemon(t, "--config", writeConfig(t, nd.coordTOML(3, nodes[0],
			fmt.Sprintf("handoff_grace = %q", grace.String()), `ready_timeout = "20s"`)))
		nd.start()
	}
	inQuorum := func(m map[string]float64) bool {
		return m["weir_coordination_members"] == 3 && m[`weir_coordination_role{role="quorum"}`] == 1
	}
	for _, nd := range nodes {
		nd.waitScrape(nd.name+" a voter of 3", 60*time.Second, inQuorum)
	}
	w := startPutWriter(t, clientAddrs(nodes))
	w.waitOK(t, time.Now(), 3*time.Second, 20*time.Second)
	quiet := w.pauseIn(time.Now().Add(-2*time.Second), time.Now())
	t.Logf("no failure (2 s): longest gap between puts %v", quiet)

	// SIGTERM of the leader: it hands leadership off and departs.
	ld := leaderOf(t, nodes, 10*time.Second)
	rest := without(nodes, ld)
	termAt := time.Now()
	if err := ld.stop(grace + 10*time.Second); err != nil {
		t.Fatalf("%s after SIGTERM: %v\n%s", ld.name, err, tail(ld.log.String(), 4000))
	}
	exited := time.Since(termAt)
	t.Logf("%s's shutdown (SIGTERM at %s):\n%s", ld.name, termAt.Format("15:04:05.000"), grepLines(ld.log.String(),
		`msg="shutting down"`, "leadership", "replacement", "departed", "check-in not revoked", "last member", `msg="shutdown complete"`))
	// The handoff itself — leadership moved, the node recorded as
	// departed — fits in the grace, and so does the exit: the member does
	// not wait out the streams other nodes hold on it (etcd's Close would,
	// for its request timeout: 7 s here).
	if exited > grace {
		t.Errorf("%s exited %v after SIGTERM; want within handoff_grace (%v)\n%s", ld.name, exited.Round(time.Millisecond), grace,
			tail(grepLines(ld.log.String(), "coord", "etcd", "shutdown"), 3000))
	}
	for _, msg := range []string{`msg="moved leadership"`, `msg="left as a departed member`} {
		at, ok := logTime(ld.log.String(), msg)
		if !ok {
			t.Errorf("%s logged no %s before it stopped:\n%s", ld.name, msg, tail(grepLines(ld.log.String(), "coord", "level=WARN", "level=ERROR"), 4000))
		} else if d := at.Sub(termAt); d > grace {
			t.Errorf("%s: %s %v after SIGTERM; want within handoff_grace (%v)", ld.name, msg, d.Round(time.Millisecond), grace)
		}
	}
	if strings.Contains(ld.log.String(), "leaving the coordination cluster") {
		t.Errorf("%s failed to leave the cluster cleanly:\n%s", ld.name, tail(grepLines(ld.log.String(), "leaving the coordination cluster"), 2000))
	}
	next := leaderOf(t, rest, 10*time.Second)
	departed := fmt.Sprintf(`weir_coordination_member{member=%q,state="departed"}`, ld.name)
	for _, nd := range rest {
		nd.waitScrape(ld.name+" departed, three voters listed", 15*time.Second, func(m map[string]float64) bool {
			return m[departed] == 1 && m["weir_coordination_members"] == 3
		})
	}
	w.waitOK(t, time.Now(), 2*time.Second, 20*time.Second)
	graceful := w.pauseIn(termAt, time.Now())
	t.Logf("graceful: SIGTERM of leader %s, exited after %v, %s leads; longest write pause %v",
		ld.name, exited.Round(time.Millisecond), next.name, graceful)

	// Restarted, it is the member it was: three voters, none departed.
	ld.start()
	for _, nd := range nodes {
		nd.waitScrape(nd.name+": "+ld.name+" back as a voter", 60*time.Second, func(m map[string]float64) bool {
			return inQuorum(m) && m[departed] == 0
		})
	}
	w.waitOK(t, time.Now(), 2*time.Second, 20*time.Second)

	// kill -9 of the leader: the two left wait out an election timeout.
	ld = leaderOf(t, nodes, 10*time.Second)
	rest = without(nodes, ld)
	killAt := time.Now()
	ld.kill()
	next = leaderOf(t, rest, 20*time.Second)
	w.waitOK(t, time.Now(), 2*time.Second, 20*time.Second)
	crash := w.pauseIn(killAt, time.Now())
	t.Logf("crash: kill -9 of leader %s, %s leads; longest write pause %v", ld.name, next.name, crash)

	ld.start()
	for _, nd := range nodes {
		nd.waitScrape(nd.name+": "+ld.name+" back as a voter", 60*time.Second, inQuorum)
	}
	w.close()

	// etcd's election timeout is 1 s: after a crash no write can commit
	// for about that long. A handoff moves leadership before the member
	// stops: the pause is one leader transfer.
	const electionTimeout = time.Second
	// A follower counts the timeout from the last heartbeat it had (every
	// 100 ms), so a crash pause may be a little below it; far below, the
	// writer did not see the leader die.
	if crash.longest < electionTimeout*3/4 {
		t.Errorf("crash pause %v is well below an election timeout (%v): the writer did not see the crash", crash.longest, electionTimeout)
	}
	if graceful.longest >= 500*time.Millisecond || graceful.longest >= crash.longest/2 {
		t.Errorf("graceful handoff paused writes for %v, the crash for %v; want the handoff below 500ms and below half the crash's",
			graceful.longest.Round(time.Millisecond), crash.longest.Round(time.Millisecond))
	}

	for _, nd := range nodes {
		if err := nd.stop(grace + 15*time.Second); err != nil {
			t.Errorf("%s stop: %v\n%s", nd.name, err, tail(nd.log.String(), 4000))
		}
	}
}

// TestCoordinationModeTwoRefused: `weir serve` with coordination.mode = 2
// does not start, and says why.
func TestCoordinationModeTwoRefused(t *testing.T) {
	d := newDaemon(t, "--coordination-mode", "2", "--coordination-node", "weir-0",
		"--coordination-peer-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--coordination-client-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("weir serve with coordination.mode = 2 still runs after 15s\n%s", tail(d.log.String(), 3000))
	}
	if d.err == nil {
		t.Fatalf("weir serve with coordination.mode = 2 exited 0\n%s", tail(d.log.String(), 3000))
	}
	if log := d.log.String(); !strings.Contains(log, "coordination.mode") || !strings.Contains(log, "a quorum of two is two") {
		t.Errorf("the refusal does not name coordination.mode and the reason:\n%s", tail(log, 3000))
	}
}
