package leases

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/engine"
)

// errCutOff is what a release sees while the store cannot be reached.
var errCutOff = errors.New("context deadline exceeded (injected)")

// cutKV is a KV whose deletes fail while cut is set: a release that
// cannot reach the store (a leader change, a partition), while the
// session's keepalives — another stream — go on.
type cutKV struct {
	clientv3.KV
	cut atomic.Bool
}

func (k *cutKV) Txn(ctx context.Context) clientv3.Txn {
	return &cutTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type cutTxn struct {
	clientv3.Txn
	kv      *cutKV
	deletes bool
}

func (t *cutTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *cutTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *cutTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.deletes = t.deletes || op.IsDelete()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *cutTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.deletes && t.kv.cut.Load() {
		return nil, errCutOff
	}
	return t.Txn.Commit()
}

// cut puts a failing KV under c.
func cut(c *Claims) *cutKV {
	k := &cutKV{KV: c.kv}
	c.kv = k
	return k
}

// cutHolder starts nodes a and b; a holds pg/0 and its deletes fail.
func cutHolder(t *testing.T) (a, b *Claims, k *cutKV, ca engine.Claim) {
	t.Helper()
	srv := etcdtest.Start(t)
	a = newClaims(t, newClient(t, srv), "a", 2*time.Second)
	b = newClaims(t, newClient(t, srv), "b", 2*time.Second)
	k = cut(a)
	ca, _ = take(t, a, "pg/0")
	k.cut.Store(true)
	return a, b, k, ca
}

// retryBound is how soon a failed release reaches a store that answers
// again: the longest pause between retries, and the attempt.
const retryBound = retryMax + time.Second

// Issue #25: a release that failed left the window's key under the
// holder's lease, which the holder keeps renewing, so nobody could claim
// the window until the holder died. Now the release is retried in the
// background: once the store answers again, the window is free within
// retryBound, while the holder keeps running.
func TestFailedReleaseIsRetried(t *testing.T) {
	a, b, k, ca := cutHolder(t)
	if err := ca.Release(context.Background()); !errors.Is(err, errCutOff) {
		t.Fatalf("release while cut off: %v", err)
	}
	waitClosed(t, ca.Lost(), "Lost after Release")
	if !held(t, b, "pg/")["pg/0"] {
		t.Fatal("the key of a failed release is gone: the failure was not simulated")
	}
	if held(t, a, "pg/")["pg/0"] {
		t.Fatal("Held lists, for its holder, a window whose release is being retried: nobody works it")
	}
	// Longer than the lease TTL: the holder lives, its lease too.
	time.Sleep(3 * time.Second)
	if _, ok := take(t, b, "pg/0"); ok {
		t.Fatal("b claimed a window held under a's live lease")
	}
	k.cut.Store(false)
	healed := time.Now()
	cb := claimWhenFree(t, b, "pg/0")
	took := time.Since(healed)
	t.Logf("the window was claimed by another node %v after the store answered again", took.Round(10*time.Millisecond))
	if took > retryBound {
		t.Fatalf("the window was free only %v after the store answered; want within %v", took, retryBound)
	}
	if cb.Token() <= ca.Token() {
		t.Fatalf("new token %d, old %d", cb.Token(), ca.Token())
	}
}

// While the release cannot reach the store, the holder claims the window
// again at once: it re-enters its own claim (same token), the background
// release stops and does not free it later.
func TestHolderReentersItsUnreleasedClaim(t *testing.T) {
	a, b, k, ca := cutHolder(t)
	if err := ca.Release(context.Background()); err == nil {
		t.Fatal("release while cut off succeeded")
	}
	ca2, ok := take(t, a, "pg/0")
	if !ok {
		t.Fatal("the holder could not claim its own unreleased window")
	}
	if ca2.Token() != ca.Token() {
		t.Fatalf("re-entered token %d, want the claim's own %d", ca2.Token(), ca.Token())
	}
	if closed(ca2.Lost()) {
		t.Fatal("the re-entered claim is lost")
	}
	if !held(t, a, "pg/")["pg/0"] {
		t.Fatal("Held leaves out a window its holder works again")
	}
	k.cut.Store(false)
	time.Sleep(retryBound)
	if !held(t, b, "pg/")["pg/0"] {
		t.Fatal("the stopped background release freed the re-entered claim")
	}
	if _, ok := take(t, b, "pg/0"); ok {
		t.Fatal("b claimed a's re-entered window")
	}
	if err := ca2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := take(t, b, "pg/0"); !ok {
		t.Fatal("b could not claim the released window")
	}
}

// Close stops a background release (the revoked lease takes the key).
func TestCloseStopsRetries(t *testing.T) {
	a, b, _, ca := cutHolder(t)
	_ = ca.Release(context.Background())
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := take(t, b, "pg/0"); !ok {
		t.Fatal("the window is held after its holder closed")
	}
}
