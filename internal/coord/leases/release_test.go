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
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/sink"
)

// errCutOff is what a release sees while the store cannot be reached.
var errCutOff = errors.New("context deadline exceeded (injected)")

// cutKV is a KV whose deletes fail while cut is set: a release that
// cannot reach the store (a leader change, a partition), while the
// session's keepalives — another stream — go on.
type cutKV struct {
	clientv3.KV
	cut atomic.Bool
	all atomic.Bool // every transaction fails, claims too
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
	if (t.deletes && t.kv.cut.Load()) || t.kv.all.Load() {
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

// A claim of the window that fails while its release is being retried
// (the store cannot be reached at all) does not end the retry: the window
// stays out of Held and is freed once the store answers.
func TestFailedReclaimKeepsReleasing(t *testing.T) {
	a, b, k, ca := cutHolder(t)
	if err := ca.Release(context.Background()); err == nil {
		t.Fatal("release while cut off succeeded")
	}
	k.all.Store(true)
	if _, _, err := a.Claim(context.Background(), "pg/0"); !errors.Is(err, errCutOff) {
		t.Fatalf("claim while cut off: %v", err)
	}
	k.all.Store(false)
	if held(t, a, "pg/")["pg/0"] {
		t.Fatal("after a failed claim, Held lists the unreleased window again")
	}
	k.cut.Store(false)
	healed := time.Now()
	claimWhenFree(t, b, "pg/0")
	if took := time.Since(healed); took > retryBound {
		t.Fatalf("the window was free only %v after the store answered; want within %v", took, retryBound)
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

// failFirstEnter is an offset store whose first Enter fails: the holder
// gives its new claim up, and — its deletes failing too — the release
// cannot reach the store.
type failFirstEnter struct {
	*engine.OffsetStore
	failed atomic.Bool
}

func (s *failFirstEnter) Enter(ctx context.Context, f engine.Fence) error {
	if s.failed.CompareAndSwap(false, true) {
		return errors.New("offset store unavailable (injected)")
	}
	return s.OffsetStore.Enter(ctx, f)
}

// Issue #25, end to end: a recovery node gives a window up and cannot
// release it (every delete fails, for the whole test). Before, the key
// stayed under the node's live lease and the window was skipped by
// everyone, the holder included, for as long as the holder ran. Now the
// holder claims it again — re-entering its own claim — and the window is
// recovered while the release still cannot reach the store.
func TestUnreleasedWindowIsWorkedAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	const n = 1000
	raw := rawOf(t, dir, n)
	st, err := engine.OpenOffsetStore(context.Background(), nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newClaims(t, newClient(t, srv), "a", 2*time.Second)
	cut(a).cut.Store(true)
	snk := &setSink{ids: map[sink.RecordID]bool{}}
	logs := &enginetest.Logs{}
	const interval = 20 * time.Millisecond
	start := time.Now()
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: &failFirstEnter{OffsetStore: st}, Role: engine.RoleRecovery, Claims: a, ClaimPositions: 1000,
		WindowRecords: 100, FlushInterval: interval, RecoveryInterval: interval,
		RetryMin: time.Millisecond, RetryMax: interval, Logger: logs.Logger(),
		Secondaries: []engine.SecondaryConfig{{Sink: snk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// The window is passed over for claimSkipIntervals (5) recovery
	// intervals after the failed entry, then claimed again at once.
	const bound = 5 * time.Second
	deadline := time.Now().Add(bound)
	for snk.count() < n || f.Stats().Sinks[0].CoveredPrefix < n {
		if time.Now().After(deadline) {
			t.Fatalf("after %v the secondary holds %d of %d records: the unreleased window is not worked again", bound, snk.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the window whose release failed was recovered %v after the start", time.Since(start).Round(time.Millisecond))
	if len(logs.Records("releasing a recovery window failed; the claims store retries it, and this node may claim the window again meanwhile")) == 0 {
		t.Fatal("no failed release was logged: the failure was not simulated")
	}
}

// windowGauges keeps the last RecoveryWindows report.
type windowGauges struct {
	engine.NopObserver
	unclaimed, held atomic.Int64
	reports         atomic.Int64
}

func (o *windowGauges) RecoveryWindows(_ string, unclaimed, held uint64) {
	o.unclaimed.Store(int64(unclaimed))
	o.held.Store(int64(held))
	o.reports.Add(1)
}

// A window claimed but worked by nobody — its release failed — counts in
// weir_recovery_windows_unclaimed on its holder (before, it counted
// nowhere: held, so not unclaimed, and not this node's claim either).
func TestUnreleasedWindowCountsUnclaimed(t *testing.T) {
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	raw := rawOf(t, dir, 1000)
	st, err := engine.OpenOffsetStore(context.Background(), nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newClaims(t, newClient(t, srv), "a", 2*time.Second)
	cut(a).cut.Store(true)
	ca, _ := take(t, a, "pg/0")
	if err := ca.Release(context.Background()); err == nil {
		t.Fatal("release while cut off succeeded")
	}
	obs := &windowGauges{}
	f, err := engine.NewFanout(context.Background(), engine.FanoutOptions{
		Reader: raw, Store: st, Role: engine.RoleRecovery, Claims: a, ClaimPositions: 1000,
		WindowRecords: 100, FlushInterval: 10 * time.Millisecond, RecoveryInterval: time.Hour,
		RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Observer: obs,
		Secondaries: []engine.SecondaryConfig{{Sink: &setSink{ids: map[sink.RecordID]bool{}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for obs.reports.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no recovery window report")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if u, h := obs.unclaimed.Load(), obs.held.Load(); u+h != 1 {
		t.Fatalf("unclaimed %d, held %d: the window claimed but worked by nobody is not counted", u, h)
	}
}
