package coord

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/testenv"
)

// testWriter sends log lines to t until the test ends (etcd may log later).
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	var out io.Writer = w
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// recorder keeps trace events and role changes of all nodes, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// index is the position of the first event e, or -1.
func (r *recorder) index(e string) int { return slices.Index(r.list(), e) }

// freeAddr is a loopback address with a port never handed out before in
// this process (two members told one address fail to start).
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, _, err := testenv.FreshPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func testConfig(t testing.TB, rec *recorder, name string, mode int, join ...string) Config {
	return Config{Mode: mode, Node: name, DataDir: filepath.Join(t.TempDir(), "data"), PeerListen: freeAddr(t), ClientListen: freeAddr(t),
		Join: join, ReadyTimeout: 10 * time.Second, HandoffGrace: 30 * time.Second, SessionTTL: 3, trace: rec.add}
}

// tnode is a started node with its registry.
type tnode struct {
	*Node
	cfg Config
	reg *prometheus.Registry
}

func start(t testing.TB, rec *recorder, cfg Config) *tnode {
	t.Helper()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Node, err)
	}
	n.OnRole(func(r Role) { rec.add(fmt.Sprintf("%s %s", cfg.Node, r)) })
	t.Cleanup(func() { closeNode(t, n) })
	return &tnode{Node: n, cfg: cfg, reg: reg}
}

func closeNode(t testing.TB, n *Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Logf("close %s: %v", n.cfg.Node, err)
	}
}

// crash stops n the way a kill would: the member halts at once (no
// handoff, no leadership transfer, no revoke); its listeners close in the
// background (etcd drains other nodes' client streams for up to 7 s),
// waited for at the test's cleanup.
func crash(t testing.TB, n *Node) {
	n.mu.Lock()
	n.closed = true
	srv, s := n.srv, n.session
	n.srv, n.session = nil, nil
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	if s != nil {
		s.Orphan()
	}
	n.sessStop()
	n.cli.Close()
	if srv == nil {
		return
	}
	srv.Server.HardStop()
	done := make(chan struct{})
	go func() { defer close(done); srv.Close() }()
	t.Cleanup(func() { <-done })
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// voters are the names of the voting members n reads, sorted; learners
// are counted apart.
func voters(t testing.TB, n *Node) (names []string, learners int) {
	t.Helper()
	st, err := n.Status(ctxT(t, 5*time.Second))
	if err != nil {
		return nil, -1
	}
	for _, m := range st.Members {
		if m.Learner {
			learners++
			continue
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names, learners
}

func leaderOf(t testing.TB, nodes ...*tnode) *tnode {
	t.Helper()
	var lead *tnode
	eventually(t, 15*time.Second, "a leader among the nodes", func() bool {
		for _, n := range nodes {
			if n.isLeader() {
				lead = n
				return true
			}
		}
		return false
	})
	return lead
}

// growThree starts weir-0 (bootstrap) and two workers and waits until all
// three are voters.
func growThree(t testing.TB, rec *recorder) []*tnode {
	t.Helper()
	n0 := start(t, rec, testConfig(t, rec, "weir-0", 3))
	n1 := start(t, rec, testConfig(t, rec, "weir-1", 3, n0.cfg.ClientListen))
	n2 := start(t, rec, testConfig(t, rec, "weir-2", 3, n0.cfg.ClientListen))
	all := []*tnode{n0, n1, n2}
	waitVoters(t, n0.Node, "weir-0", "weir-1", "weir-2")
	for _, n := range all {
		eventually(t, 10*time.Second, n.cfg.Node+" holds quorum", func() bool { return n.Role() == RoleVoter })
	}
	return all
}

func waitVoters(t testing.TB, n *Node, want ...string) {
	t.Helper()
	eventually(t, 45*time.Second, fmt.Sprintf("voters %v and no learner", want), func() bool {
		names, learners := voters(t, n)
		return slices.Equal(names, want) && learners == 0
	})
}
