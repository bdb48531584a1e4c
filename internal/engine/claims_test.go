package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/sink"
)

// claimServer hands out recovery windows in memory, exclusively, with
// increasing tokens: what internal/coord/leases does in etcd, for tests
// of the engine's claimed recovery.
type claimServer struct {
	mu      sync.Mutex
	rev     uint64
	holders map[string]*memClaim
	refuse  bool // every Claim finds the window taken
}

func newClaimServer() *claimServer {
	return &claimServer{holders: map[string]*memClaim{}}
}

// node is the Claims of one node.
func (s *claimServer) node(name string) engine.Claims { return &memClaims{srv: s, node: name} }

// expire ends the lease behind window's claim, as etcd does when its
// holder stops renewing: the holder's Lost closes and the window is free.
func (s *claimServer) expire(window string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.holders[window]; c != nil {
		delete(s.holders, window)
		c.lose()
	}
}

// steal gives window to another holder with a higher token without the
// old holder hearing of it (a lease expired on the server before its
// holder noticed).
func (s *claimServer) steal(window string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	s.holders[window] = &memClaim{srv: s, window: window, token: s.rev, node: "thief", lost: make(chan struct{})}
	return s.rev
}

// holder names the node holding window, "" for none.
func (s *claimServer) holder(window string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.holders[window]; c != nil {
		return c.node
	}
	return ""
}

type memClaims struct {
	srv  *claimServer
	node string
}

func (c *memClaims) Claim(_ context.Context, window string) (engine.Claim, bool, error) {
	s := c.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders[window] != nil || s.refuse {
		return nil, false, nil
	}
	s.rev++
	cl := &memClaim{srv: s, window: window, token: s.rev, node: c.node, lost: make(chan struct{})}
	s.holders[window] = cl
	return cl, true, nil
}

func (c *memClaims) Held(_ context.Context, prefix string) (map[string]bool, error) {
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	out := map[string]bool{}
	for w := range c.srv.holders {
		if strings.HasPrefix(w, prefix) {
			out[w] = true
		}
	}
	return out, nil
}

type memClaim struct {
	srv    *claimServer
	window string
	token  uint64
	node   string
	once   sync.Once
	lost   chan struct{}
}

func (c *memClaim) Token() uint64         { return c.token }
func (c *memClaim) Lost() <-chan struct{} { return c.lost }
func (c *memClaim) lose()                 { c.once.Do(func() { close(c.lost) }) }

func (c *memClaim) Release(context.Context) error {
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	if c.srv.holders[c.window] == c {
		delete(c.srv.holders, c.window)
	}
	c.lose()
	return nil
}

// fillRaw commits n records to a raw in rawDir and notes its end in the
// offset store there, as an ingest node would.
func fillRaw(t *testing.T, rawDir string, n int) sink.Raw {
	t.Helper()
	raw := openRaw(t, rawDir)
	t.Cleanup(func() { raw.Close() })
	for done := 0; done < n; done += 500 {
		if _, _, err := raw.CommitRaw(context.Background(), mkBatch(min(500, n-done))); err != nil {
			t.Fatal(err)
		}
	}
	st := openStore(t, rawDir)
	st.NoteRawEnd(uint64(n))
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return raw
}

// ownerSink is one node's view of a shared secondary: it checks, at every
// commit, that the node holds the claim on the window of every record it
// commits.
type ownerSink struct {
	*memSink
	node string
	srv  *claimServer
	pos  map[sink.RecordID]uint64
	size uint64
	bad  atomic.Pointer[string]
}

func (o *ownerSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	for _, r := range b.Records {
		w := engine.WindowKey(o.name, o.pos[r.ID]/o.size)
		if h := o.srv.holder(w); h != o.node {
			msg := fmt.Sprintf("%s committed position %d of window %s held by %q", o.node, o.pos[r.ID], w, h)
			o.bad.CompareAndSwap(nil, &msg)
		}
	}
	return o.memSink.Commit(ctx, b)
}

func recoveryNode(t *testing.T, raw sink.RawReader, rawDir string, snk sink.Sink, claims engine.Claims, logs *enginetest.Logs) *engine.Fanout {
	t.Helper()
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery,
		FlushInterval: 20 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, WindowRecords: 200,
		Claims: claims, ClaimPositions: 500, Logger: logs.Logger(),
		Secondaries: []engine.SecondaryConfig{{Sink: snk, Name: "mem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Two recovery nodes on one raw and one offset file share its windows:
// every position reaches the sink, each node commits only positions of a
// window it holds, both take part, and the log says who took what.
func TestClaimedRecoveryTwoNodes(t *testing.T) {
	rawDir := t.TempDir()
	const n, size = 10000, 500
	raw := fillRaw(t, rawDir, n)
	all := rawIDs(t, raw)
	pos := make(map[sink.RecordID]uint64, len(all))
	for _, p := range all {
		pos[p.Record.ID] = p.Pos
	}
	srv, mem := newClaimServer(), newMemSink("mem")
	mem.delay = 2 * time.Millisecond
	var nodes []*engine.Fanout
	var sinks []*ownerSink
	var logs []*enginetest.Logs
	for _, name := range []string{"a", "b"} {
		o := &ownerSink{memSink: mem, node: name, srv: srv, pos: pos, size: size}
		lb := &enginetest.Logs{}
		nodes, sinks, logs = append(nodes, recoveryNode(t, raw, rawDir, o, srv.node(name), lb)), append(sinks, o), append(logs, lb)
	}
	checker := startChecker(t, openStore(t, rawDir), raw, "mem", memHas(mem))
	for _, f := range nodes {
		defer f.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for mem.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the sink holds %d of %d records after 30s", mem.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range nodes {
		waitCaughtUp(t, f, 10*time.Second)
	}
	for _, o := range sinks {
		if p := o.bad.Load(); p != nil {
			t.Fatal(*p)
		}
	}
	checker.finish()
	for i, name := range []string{"a", "b"} {
		claimed := logs[i].Records("recovery window claimed")
		released := logs[i].Records("recovery window released")
		if len(claimed) == 0 || len(released) < len(claimed)-1 {
			t.Errorf("node %s: %d windows claimed, %d released", name, len(claimed), len(released))
		}
		t.Logf("node %s claimed %d windows", name, len(claimed))
	}
}

// heldMidWindow starts a recovery node on 300 positions of raw, with
// claims, and returns once it commits the first window of window mem/0 to
// a sink that holds the commit until mem.hold is closed.
func heldMidWindow(t *testing.T) (rawDir string, srv *claimServer, mem *memSink, logs *enginetest.Logs, f *engine.Fanout) {
	rawDir = t.TempDir()
	raw := fillRaw(t, rawDir, 300)
	srv, mem, logs = newClaimServer(), newMemSink("mem"), &enginetest.Logs{}
	mem.hold = make(chan struct{})
	f = recoveryNode(t, raw, rawDir, mem, srv.node("a"), logs)
	waitFor(t, "a commit under the claim", func() bool { return mem.calls.Load() > 0 })
	return rawDir, srv, mem, logs, f
}

// A claim whose lease is lost while a window is being committed records
// no coverage for it; the window is taken again under a higher token.
func TestClaimedRecoveryLostLease(t *testing.T) {
	rawDir, srv, mem, logs, f := heldMidWindow(t)
	defer f.Close()
	srv.mu.Lock()
	srv.refuse = true // nothing is claimed again until the test says
	srv.mu.Unlock()
	srv.expire("mem/0")
	close(mem.hold)
	waitFor(t, "the window released", func() bool { return len(logs.Records("recovery window released")) > 0 })
	time.Sleep(100 * time.Millisecond) // flushes happen meanwhile
	if cov := openStore(t, rawDir).Coverage("mem"); cov.Count(300) != 0 {
		t.Fatalf("coverage recorded after the lease was lost: %v", &cov)
	}
	if mem.count() == 0 {
		t.Fatal("the sink never received the window")
	}
	srv.mu.Lock()
	srv.refuse = false
	srv.mu.Unlock()
	waitCaughtUp(t, f, 10*time.Second)
	claimed := logs.Records("recovery window claimed")
	if len(claimed) < 2 || claimed[1]["token"].(float64) <= claimed[0]["token"].(float64) {
		t.Fatalf("claims after the lost lease: %v", claimed)
	}
}

// A node whose claim was superseded without its hearing of it — another
// node claimed the window and entered a higher token in the offset
// store — has its coverage refused, and gives the window up.
func TestClaimedRecoveryStaleClaimFenced(t *testing.T) {
	rawDir, srv, mem, logs, f := heldMidWindow(t)
	defer f.Close()
	tok := srv.steal("mem/0")
	other := openStore(t, rawDir) // the thief, on the same offset file
	if err := other.Enter(context.Background(), engine.Fence{Window: "mem/0", Token: tok}); err != nil {
		t.Fatal(err)
	}
	close(mem.hold)
	waitFor(t, "the fenced claim given up", func() bool {
		return len(logs.Records("a newer claim holds the window; giving it up")) > 0
	})
	time.Sleep(100 * time.Millisecond)
	if cov := openStore(t, rawDir).Coverage("mem"); cov.Count(300) != 0 {
		t.Fatalf("coverage recorded under a superseded claim: %v", &cov)
	}
	if st := f.Stats(); st.Sinks[0].Lag != 300 {
		t.Fatalf("the fenced node counts the window covered: %+v", st)
	}
}

// An ingest-only node with claims reports the windows nobody holds.
func TestClaimedRecoveryReportsUnclaimed(t *testing.T) {
	rawDir := t.TempDir()
	raw := openRaw(t, rawDir)
	mem := newMemSink("mem")
	mem.down.Store(true)
	srv := newClaimServer()
	obs := &windowObserver{}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: raw, Store: openStore(t, rawDir), Role: engine.RoleIngest, FlushInterval: 10 * time.Millisecond,
		Claims: srv.node("i"), ClaimPositions: 100, Observer: obs,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, QueueBatches: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 5; i++ {
		if _, err := f.Commit(context.Background(), mkBatch(100)); err != nil {
			t.Fatal(err)
		}
	}
	// The batches the down sink's queue holds are not recovery's to do;
	// the others, one window each, are.
	want := f.Stats().Sinks[0].Missing / 100
	if want < 3 {
		t.Fatalf("only %d windows missing", want)
	}
	waitFor(t, fmt.Sprintf("%d unclaimed windows", want), func() bool { return obs.unclaimed.Load() == want })
	if _, ok, _ := srv.node("r").Claim(context.Background(), "mem/4"); !ok { // the last batch: dropped
		t.Fatal("claim refused")
	}
	waitFor(t, fmt.Sprintf("%d unclaimed windows", want-1), func() bool { return obs.unclaimed.Load() == want-1 })
	if obs.held.Load() != 0 {
		t.Fatalf("an ingest node reports %d leases held", obs.held.Load())
	}
}

// listDown is a node's Claims whose store can no longer list the held
// windows once down is set, as a node cut off from the quorum finds.
type listDown struct {
	engine.Claims
	down atomic.Bool
}

func (c *listDown) Held(ctx context.Context, prefix string) (map[string]bool, error) {
	if c.down.Load() {
		return nil, errors.New("no quorum")
	}
	return c.Claims.Held(ctx, prefix)
}

// A node that loses its claim while the claims store cannot list the held
// windows (cut off from the quorum) reports that it holds none: its own
// claims are its own to count.
func TestClaimedRecoveryReportsLostClaimWithoutQuorum(t *testing.T) {
	rawDir := t.TempDir()
	raw := fillRaw(t, rawDir, 300)
	srv, mem, logs, obs := newClaimServer(), newMemSink("mem"), &enginetest.Logs{}, &windowObserver{}
	mem.hold = make(chan struct{})
	claims := &listDown{Claims: srv.node("a")}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: openStore(t, rawDir), Role: engine.RoleRecovery,
		FlushInterval: 10 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, WindowRecords: 200,
		Claims: claims, ClaimPositions: 500, Logger: logs.Logger(), Observer: obs,
		Secondaries: []engine.SecondaryConfig{{Sink: mem, Name: "mem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitFor(t, "a claim held, by the metrics", func() bool { return mem.calls.Load() > 0 && obs.held.Load() == 1 })
	claims.down.Store(true)
	srv.mu.Lock()
	srv.refuse = true
	srv.mu.Unlock()
	srv.expire("mem/0")
	close(mem.hold)
	waitFor(t, "the window released", func() bool { return len(logs.Records("recovery window released")) > 0 })
	waitFor(t, "no claim held, by the metrics", func() bool { return obs.held.Load() == 0 })
	if got := obs.unclaimed.Load(); got != 0 {
		t.Errorf("unclaimed windows reported %d; want the last count (0: the only window was held)", got)
	}
}

// A store that cannot check fencing tokens is refused with Claims.
func TestClaimedRecoveryNeedsFencedStore(t *testing.T) {
	rawDir := t.TempDir()
	_, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Raw: openRaw(t, rawDir), Store: struct{ engine.CoverageStore }{openStore(t, rawDir)},
		Claims:      newClaimServer().node("a"),
		Secondaries: []engine.SecondaryConfig{{Sink: newMemSink("mem")}},
	})
	if err == nil || !strings.Contains(err.Error(), "fencing") {
		t.Fatalf("NewFanout with an unfenced store: %v", err)
	}
}

type windowObserver struct {
	engine.NopObserver
	unclaimed, held atomic.Uint64
}

func (o *windowObserver) RecoveryWindows(_ string, unclaimed, held uint64) {
	o.unclaimed.Store(unclaimed)
	o.held.Store(held)
}
