package coord

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Mode 1: bootstrap calls Restore and self-elects; Close calls
// BeforeStop; a restart from the data dir keeps the data and does not
// restore again.
func TestBootstrapAndRestartMode1(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig(t, rec, "solo", 1)
	var restores, lastStops atomic.Int32
	cfg.Restore = func(ctx context.Context, dir, name, peer string) (bool, error) {
		if dir != cfg.DataDir || name != "solo" || peer != "http://"+cfg.PeerListen {
			t.Errorf("restore(%s, %s, %s)", dir, name, peer)
		}
		restores.Add(1)
		return false, nil
	}
	cfg.BeforeStop = func(ctx context.Context, cli *clientv3.Client) error {
		if _, err := cli.Get(ctx, "k"); err != nil {
			t.Errorf("before stop: client unusable: %v", err)
		}
		lastStops.Add(1)
		return nil
	}
	n := start(t, rec, cfg)
	if n.Role() != RoleVoter || rec.index("solo quorum") < 0 {
		t.Fatalf("role %s, events %v: want quorum, reported at OnRole", n.Role(), rec.list())
	}
	if _, err := n.Client().Put(ctxT(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "metrics: 1 member, leader, role quorum", func() bool {
		return testenv.Metric(t, n.reg, "weir_coordination_members", nil) == 1 && testenv.Metric(t, n.reg, "weir_coordination_leader", nil) == 1 &&
			testenv.Metric(t, n.reg, "weir_coordination_role", map[string]string{"role": "quorum"}) == 1 && testenv.Metric(t, n.reg, "weir_coordination_role", map[string]string{"role": "worker"}) == 0
	})
	closeNode(t, n.Node)
	if restores.Load() != 1 || lastStops.Load() != 1 {
		t.Fatalf("restores %d, last stops %d; want 1 and 1", restores.Load(), lastStops.Load())
	}

	n = start(t, rec, cfg)
	resp, err := n.Client().Get(ctxT(t, 5*time.Second), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v, %v; want k=v", resp, err)
	}
	st, err := n.Status(ctxT(t, 5*time.Second))
	if err != nil || st.Leader != "solo" || len(st.Members) != 1 || st.Members[0].Departed || len(st.Nodes) != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if restores.Load() != 1 {
		t.Fatal("a restart from the data dir must not restore")
	}
}

// Mode 3 growth: a lone worker does not take the cluster to two; with a
// second worker, the lower ordinal joins first, each as a learner promoted
// before the next change.
func TestGrowthToThreeInOrdinalOrder(t *testing.T) {
	rec := &recorder{}
	n0 := start(t, rec, testConfig(t, rec, "weir-0", 3))
	n2 := start(t, rec, testConfig(t, rec, "weir-2", 3, n0.cfg.ClientListen))
	time.Sleep(3 * evalEvery)
	if names, _ := voters(t, n0.Node); len(names) != 1 || n2.Role() != RoleWorker {
		t.Fatalf("one worker waiting: voters %v, weir-2 %s; want 1 voter and a worker (never rest at 2)", names, n2.Role())
	}
	n1 := start(t, rec, testConfig(t, rec, "weir-1", 3, n0.cfg.ClientListen))
	waitVoters(t, n0.Node, "weir-0", "weir-1", "weir-2")
	for _, n := range []*tnode{n1, n2} {
		eventually(t, 5*time.Second, n.cfg.Node+" holds quorum", func() bool { return n.Role() == RoleVoter })
	}
	order := []string{"weir-1 learner", "promoted weir-1", "weir-1 quorum", "weir-2 learner", "promoted weir-2", "weir-2 quorum"}
	// Role() changes before the OnRole callback that records the event
	// has run: wait for the last event itself.
	eventually(t, 5*time.Second, "weir-2's quorum event", func() bool { return rec.index("weir-2 quorum") >= 0 })
	last := -1
	for _, e := range order {
		i := rec.index(e)
		if i <= last {
			t.Fatalf("event %q out of order in %v", e, rec.list())
		}
		last = i
	}
	eventually(t, 5*time.Second, "metrics on weir-2: 3 members, no learner, role quorum", func() bool {
		return testenv.Metric(t, n2.reg, "weir_coordination_members", nil) == 3 && testenv.Metric(t, n2.reg, "weir_coordination_learners", nil) == 0 &&
			testenv.Metric(t, n2.reg, "weir_coordination_role", map[string]string{"role": "quorum"}) == 1
	})
}

// A crashed leader: the other two keep quorum and serve writes, with no
// reconfiguration. With all three down, one member restarted alone fails
// its readiness with the reason, in bounded time.
func TestLeaderCrashKeepsQuorum(t *testing.T) {
	rec := &recorder{}
	nodes := growThree(t, rec)
	lead := leaderOf(t, nodes...)
	crash(t, lead.Node)
	var rest []*tnode
	for _, n := range nodes {
		if n != lead {
			rest = append(rest, n)
		}
	}
	var err error
	eventually(t, 15*time.Second, "a write after the leader crashed", func() bool {
		_, err = rest[0].Client().Put(ctxT(t, 5*time.Second), "after-crash", "v")
		return err == nil
	})
	newLead := leaderOf(t, rest...)
	names, _ := voters(t, newLead.Node)
	if len(names) != 3 {
		t.Fatalf("voters %v: a crash must not reconfigure", names)
	}

	crash(t, rest[0].Node)
	crash(t, rest[1].Node)
	cfg := lead.cfg
	cfg.ReadyTimeout = 2 * time.Second
	begin := time.Now()
	_, err = Start(ctxT(t, 20*time.Second), cfg, testLogger(t), nil)
	if err == nil || !strings.Contains(err.Error(), "no quorum: 1 of 3 peers reachable") || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Fatalf("restart alone: %v; want a no-quorum error naming the data dir", err)
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Fatalf("readiness gave up after %s", took)
	}
}

// Close of the leader with a worker waiting: leadership moves first, the
// worker is promoted, then the leader removes itself; back to 3 voters.
func TestGracefulHandoffToWorker(t *testing.T) {
	rec := &recorder{}
	nodes := growThree(t, rec)
	w := start(t, rec, testConfig(t, rec, "weir-3", 3, nodes[0].cfg.ClientListen))
	time.Sleep(2 * evalEvery)
	if w.Role() != RoleWorker {
		t.Fatalf("weir-3 %s with the cluster full; want worker", w.Role())
	}
	lead := leaderOf(t, nodes...)
	closeNode(t, lead.Node)
	moved, asked := rec.index("moved leader to "+lowestOther(lead, nodes)), rec.index("asked for a replacement")
	promoted, removed := rec.index("promoted weir-3"), rec.index("removed "+lead.cfg.Node)
	if moved < 0 || asked < moved || promoted < asked || removed < promoted {
		t.Fatalf("handoff order wrong: %v", rec.list())
	}
	want := []string{"weir-3"}
	for _, n := range nodes {
		if n != lead {
			want = append(want, n.cfg.Node)
		}
	}
	slices.Sort(want)
	waitVoters(t, w.Node, want...)
	st, err := w.Status(ctxT(t, 5*time.Second))
	if err != nil || st.Leader == "" || st.Leader == lead.cfg.Node {
		t.Fatalf("status %+v, %v", st, err)
	}
	for _, m := range st.Members {
		if m.Departed {
			t.Fatalf("%s departed after a completed handoff", m.Name)
		}
	}
}

// Close with no worker to replace it: the member stays (3 with one gone
// keeps quorum), recorded as departed; a restart clears the record.
func TestCloseWithoutReplacementDeparts(t *testing.T) {
	rec := &recorder{}
	nodes := growThree(t, rec)
	lead := leaderOf(t, nodes...)
	closeNode(t, lead.Node)
	if rec.index("departed "+lead.cfg.Node) < 0 || rec.index("removed "+lead.cfg.Node) >= 0 {
		t.Fatalf("events %v: want departed, no removal", rec.list())
	}
	other := nodes[0]
	if other == lead {
		other = nodes[1]
	}
	departed := func() bool {
		st, err := other.Status(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Members {
			if m.Name == lead.cfg.Node {
				return m.Departed
			}
		}
		t.Fatalf("%s no longer a member: %+v", lead.cfg.Node, st.Members)
		return false
	}
	if !departed() {
		t.Fatal("not shown as departed")
	}
	if _, err := other.Client().Put(ctxT(t, 10*time.Second), "k", "v"); err != nil {
		t.Fatalf("write with one departed: %v", err)
	}
	back := start(t, rec, lead.cfg)
	if back.Role() != RoleVoter || departed() {
		t.Fatalf("after restart: role %s, departed %v", back.Role(), departed())
	}
}

// A member removed while it was down: on restart it moves its stale data
// aside and joins again as a fresh member.
func TestRemovedWhileDownJoinsFresh(t *testing.T) {
	rec := &recorder{}
	nodes := growThree(t, rec)
	gone := nodes[2]
	crash(t, gone.Node)
	st, err := nodes[0].Status(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.Name == gone.cfg.Node {
			// etcd refuses while it still counts the member as connected.
			eventually(t, 20*time.Second, "remove "+m.Name, func() bool {
				_, err := nodes[0].Client().MemberRemove(ctxT(t, 5*time.Second), m.ID)
				return err == nil
			})
		}
	}
	back := start(t, rec, gone.cfg)
	waitVoters(t, nodes[0].Node, "weir-0", "weir-1", "weir-2")
	if back.Role() != RoleVoter {
		t.Fatalf("role %s", back.Role())
	}
	aside, _ := filepath.Glob(filepath.Join(gone.cfg.DataDir, "member.removed-*"))
	if len(aside) != 1 {
		t.Fatalf("stale data not moved aside: %v", aside)
	}
	if _, err := os.Stat(filepath.Join(gone.cfg.DataDir, "member", "wal")); err != nil {
		t.Fatalf("fresh member data: %v", err)
	}
}

func lowestOther(lead *tnode, nodes []*tnode) string {
	best := ""
	for _, n := range nodes {
		if n != lead && (best == "" || lessNode(n.cfg.Node, best)) {
			best = n.cfg.Node
		}
	}
	return best
}

// Mode 1 with a worker waiting: Close takes its backup, then hands the
// single membership over (two voters only while it moves); the data stays.
func TestModeOneHandsOffToWorker(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig(t, rec, "weir-0", 1)
	var lastStops atomic.Int32
	cfg.BeforeStop = func(context.Context, *clientv3.Client) error { lastStops.Add(1); return nil }
	n0 := start(t, rec, cfg)
	if _, err := n0.Client().Put(ctxT(t, 5*time.Second), "k", "v"); err != nil {
		t.Fatal(err)
	}
	w := start(t, rec, testConfig(t, rec, "weir-1", 1, n0.cfg.ClientListen))
	time.Sleep(2 * evalEvery)
	if w.Role() != RoleWorker {
		t.Fatalf("weir-1 %s with mode 1 full; want worker", w.Role())
	}
	closeNode(t, n0.Node)
	if lastStops.Load() != 1 || rec.index("before stop") > rec.index("removed weir-0") {
		t.Fatalf("events %v, backups at stop %d: want one backup, then a handoff", rec.list(), lastStops.Load())
	}
	waitVoters(t, w.Node, "weir-1")
	resp, err := w.Client().Get(ctxT(t, 5*time.Second), "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("after handoff: %v, %v; want k", resp, err)
	}
}
