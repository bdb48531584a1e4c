package leases

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/vfs"
)

const prefix = "/weir/recovery/windows/"

// newClient opens a client of its own to srv: a node.
func newClient(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newClaims(t *testing.T, cli *clientv3.Client, node string, ttl time.Duration) *Claims {
	t.Helper()
	c, err := New(context.Background(), cli, prefix, ttl, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func take(t *testing.T, c *Claims, window string) (engine.Claim, bool) {
	t.Helper()
	cl, ok, err := c.Claim(context.Background(), window)
	if err != nil {
		t.Fatal(err)
	}
	return cl, ok
}

func held(t *testing.T, c *Claims, p string) map[string]bool {
	t.Helper()
	h, err := c.Held(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A window held by one node cannot be claimed by another; Held lists what
// any node holds under a prefix.
func TestClaimIsExclusive(t *testing.T) {
	srv := etcdtest.Start(t)
	a := newClaims(t, newClient(t, srv), "a", 10*time.Second)
	b := newClaims(t, newClient(t, srv), "b", 10*time.Second)
	if _, ok := take(t, a, "pg/0"); !ok {
		t.Fatal("a could not claim a free window")
	}
	if cl, ok := take(t, b, "pg/0"); ok {
		t.Fatalf("b claimed a's window (token %d)", cl.Token())
	}
	if _, ok := take(t, b, "pg/1"); !ok {
		t.Fatal("b could not claim a free window")
	}
	if h := held(t, a, "pg/"); len(h) != 2 || !h["pg/0"] || !h["pg/1"] {
		t.Fatalf("held %v", h)
	}
	if h := held(t, b, "files/"); len(h) != 0 {
		t.Fatalf("held under another prefix: %v", h)
	}
}

// A window released and claimed again gets a larger token; the stale
// holder's second Release does not free the new holder's claim; Release
// closes Lost.
func TestTokenGrowsOnReclaim(t *testing.T) {
	srv := etcdtest.Start(t)
	a := newClaims(t, newClient(t, srv), "a", 10*time.Second)
	b := newClaims(t, newClient(t, srv), "b", 10*time.Second)
	ca, _ := take(t, a, "pg/0")
	if err := ca.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ca.Lost(), "Lost after Release")
	cb, ok := take(t, b, "pg/0")
	if !ok || cb.Token() <= ca.Token() {
		t.Fatalf("reclaim: ok %v, token %d after %d", ok, cb.Token(), ca.Token())
	}
	if err := ca.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !held(t, a, "pg/")["pg/0"] {
		t.Fatal("a stale Release freed the new holder's window")
	}
	if closed(cb.Lost()) {
		t.Fatal("the new holder's claim is lost")
	}
}

// Close revokes the lease: every claim of the node is released at once.
func TestCloseReleasesEveryClaim(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newClient(t, srv)
	a := newClaims(t, cli, "a", 10*time.Second)
	c0, _ := take(t, a, "pg/0")
	c1, _ := take(t, a, "pg/1")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(c0.Lost()) || !closed(c1.Lost()) {
		t.Fatal("claims not lost after Close")
	}
	b := newClaims(t, cli, "b", 10*time.Second)
	if h := held(t, b, ""); len(h) != 0 {
		t.Fatalf("held after Close: %v", h)
	}
	if _, _, err := a.Claim(context.Background(), "pg/2"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Claim after Close: %v", err)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s after 10s", what)
	}
}

// claimWhenFree claims window for c, waiting (up to 15 s) for a lease
// holding it to expire.
func claimWhenFree(t *testing.T, c *Claims, window string) engine.Claim {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if cl, ok := take(t, c, window); ok {
			return cl
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held after 15s", window)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Fencing end to end: a node stops renewing its lease (its client is
// closed: the process hung or was cut off); its claim is lost, the lease
// expires in etcd, another node claims the window with a larger token and
// enters it in the shared offset store — and the old holder's coverage
// write under its token is refused.
func TestExpiredHolderIsFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	storeA, err := engine.OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	storeB, err := engine.OpenOffsetStore(ctx, vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	cliA := newClient(t, srv)
	a := newClaims(t, cliA, "a", time.Second)
	b := newClaims(t, newClient(t, srv), "b", time.Second)
	ca, _ := take(t, a, "pg/0")
	fa := engine.Fence{Window: "pg/0", Token: ca.Token()}
	if err := storeA.Enter(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if err := storeA.CoverFenced(ctx, "pg", 0, 100, fa); err != nil {
		t.Fatal(err)
	}
	if _, ok := take(t, b, "pg/0"); ok {
		t.Fatal("b claimed a live holder's window")
	}
	start := time.Now()
	cliA.Close() // no more keepalives
	waitClosed(t, ca.Lost(), "Lost after the holder's client closed")
	cb := claimWhenFree(t, b, "pg/0")
	t.Logf("the window was claimed again %v after the holder stopped renewing", time.Since(start).Round(10*time.Millisecond))
	if cb.Token() <= ca.Token() {
		t.Fatalf("new token %d, old %d", cb.Token(), ca.Token())
	}
	fb := engine.Fence{Window: "pg/0", Token: cb.Token()}
	if err := storeB.Enter(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if err := storeA.CoverFenced(ctx, "pg", 100, 200, fa); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("the expired holder's CoverFenced: %v, want ErrFenced", err)
	}
	if err := storeB.CoverFenced(ctx, "pg", 100, 200, fb); err != nil {
		t.Fatal(err)
	}
}

// A lease revoked in etcd (an operator, or expiry seen by the server
// first) closes Lost; the node's next Claim takes a new lease and goes on.
func TestRevokedLeaseIsLostAndRenewed(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newClient(t, srv)
	a := newClaims(t, cli, "a", time.Second)
	ca, _ := take(t, a, "pg/0")
	a.mu.Lock()
	lease := a.sess.Lease()
	a.mu.Unlock()
	if _, err := newClient(t, srv).Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ca.Lost(), "Lost after the lease was revoked")
	if held(t, a, "pg/")["pg/0"] {
		t.Fatal("a revoked lease's key is still there")
	}
	ca2, ok := take(t, a, "pg/0")
	if !ok || ca2.Token() <= ca.Token() {
		t.Fatalf("claim on a new lease: ok %v, token %d after %d", ok, ca2.Token(), ca.Token())
	}
	if closed(ca2.Lost()) {
		t.Fatal("the claim on the new lease is lost")
	}
}
