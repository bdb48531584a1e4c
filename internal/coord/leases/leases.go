// Package leases hands recovery windows out among the weir nodes sharing
// one raw, through etcd: it is the engine.Claims the fan-out's claimed
// recovery uses (docs/coordination.md, "Distributed recovery").
//
// A node's claims hang on one etcd lease, kept alive by one
// concurrency.Session of the configured TTL. Claiming a window is one
// transaction on its key (prefix + window): if the key does not exist,
// put the node's name under the session's lease, else read it. The
// revision of that put, below the claims' epoch, is the claim's fencing
// token — etcd revisions only grow, so a later claim of the same window
// always carries a larger one — and the engine checks it in the offset
// store with every coverage write. A claim is lost when the session ends (its lease expired or was
// revoked, the client closed, or Close); its key is gone with the lease,
// and another node may claim the window. A lost session is replaced by a
// new one at the next Claim.
//
// A release that cannot reach the store (a leader change, a partition)
// must not leave the window blocked for as long as the node lives: its key
// stays under the session's lease, which the node keeps renewing. So a
// failed Release is retried in the background until it succeeds, the
// session ends (the key goes with its lease) or Close; meanwhile Held
// leaves the window out — it is claimed but nobody works it — and Claim
// of it by this node re-enters the claim it still owns (same key, same
// lease, same token) after stopping the retry.
//
// Tokens survive a claims store that lost its history (a new cluster
// after the old one was lost without a backup, or a restore of an older
// backup): a token is epoch<<EpochShift | revision, compared as (epoch,
// revision). The epoch is kept in etcd (the key epochKey(prefix)), and
// RaiseAbove — which claimed recovery calls with the offset store's
// highest fence before its first claim — writes one above that fence's
// epoch when the key is missing or below it. A fresh cluster therefore
// hands out tokens above every fence the offset store keeps, while a
// holder from the old cluster still carries a token below them.
//
// The lock alone does not make the work exclusive — a holder may not yet
// know that its lease has expired — which is why every write made under
// a claim carries the token: the offset store refuses one that a newer
// claim has superseded.
package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/weir-io/weir/internal/engine"
)

// ErrClosed is returned by Claim after Close.
var ErrClosed = errors.New("leases: closed")

// Claims is engine.Claims on etcd.
type Claims struct {
	cli    *clientv3.Client
	kv     clientv3.KV // cli; tests put a failing one in
	prefix string
	node   string
	ttl    int // seconds
	log    *slog.Logger

	mu     sync.Mutex // the session, closed
	sess   *concurrency.Session
	closed bool
	epoch  uint64 // 0: not read yet
	// releasing holds the keys whose release failed and is being
	// retried: claimed by this node, worked by nobody.
	releasing map[string]*retry
	stop      chan struct{}  // closed by Close
	wg        sync.WaitGroup // claims' watchers, release retries
}

// retry is the background release of one key.
type retry struct {
	cl     *claim
	cancel context.CancelFunc
	done   chan struct{}
}

// EpochShift places the epoch above a token's revision: revisions below
// 2^40 (a restore adds 10^9 to them), epochs below 2^23, so that a token
// fits a signed 64-bit integer (a Postgres offset store's bigint).
const EpochShift = 40

// epochKey is where the epoch of the claims under prefix is kept:
// beside the windows, not among them ("/weir/recovery/windows/" →
// "/weir/recovery/epoch").
func epochKey(prefix string) string {
	return path.Join(path.Dir(strings.TrimSuffix(prefix, "/")), "epoch")
}

// RaiseAbove implements engine.ClaimFloor: the claims' epoch is raised
// above token's when the key is missing or below it, so that every later
// token is larger than token. The epoch is never lowered.
func (c *Claims) RaiseAbove(ctx context.Context, token uint64) error {
	floor := token >> EpochShift
	key := epochKey(c.prefix)
	for {
		resp, err := c.kv.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("leases: read the epoch %s: %w", key, err)
		}
		var have uint64
		var mod int64
		if len(resp.Kvs) > 0 {
			mod = resp.Kvs[0].ModRevision
			if have, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return fmt.Errorf("leases: the epoch %s: %w", key, err)
			}
		}
		if mod != 0 && have >= floor {
			c.setEpoch(have)
			return nil
		}
		want := floor + 1
		tr, err := c.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, strconv.FormatUint(want, 10))).
			Commit()
		if err != nil {
			return fmt.Errorf("leases: raise the epoch %s to %d: %w", key, want, err)
		}
		if tr.Succeeded {
			c.log.Warn("claim epoch raised above the offset store's fences: the claims store lost its history or was new",
				"epoch", want, "was", have, "fence_epoch", floor)
			c.setEpoch(want)
			return nil
		}
	}
}

func (c *Claims) setEpoch(e uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch = e
}

// currentEpoch is the epoch tokens carry, read (or, missing, made above
// nothing) at the first need.
func (c *Claims) currentEpoch(ctx context.Context) (uint64, error) {
	c.mu.Lock()
	e := c.epoch
	c.mu.Unlock()
	if e != 0 {
		return e, nil
	}
	if err := c.RaiseAbove(ctx, 0); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch, nil
}

// tokenOf is the token of the claim created at revision rev.
func tokenOf(epoch uint64, rev int64) (uint64, error) {
	if rev <= 0 || uint64(rev) >= 1<<EpochShift || epoch >= 1<<(63-EpochShift) {
		return 0, fmt.Errorf("leases: revision %d or epoch %d out of a token's range", rev, epoch)
	}
	return epoch<<EpochShift | uint64(rev), nil
}

// Release retry pacing: the first retry after retryFirst, doubling up to
// retryMax between attempts, each bounded by retryTimeout.
const (
	retryFirst   = 250 * time.Millisecond
	retryMax     = 2 * time.Second
	retryTimeout = 5 * time.Second
)

var (
	_ engine.Claims     = (*Claims)(nil)
	_ engine.ClaimFloor = (*Claims)(nil)
)

// New starts the node's session (a lease of ttl, rounded to whole
// seconds, at least one) for claims under prefix (e.g.
// "/weir/recovery/windows/"). Close ends it, releasing every claim.
func New(ctx context.Context, cli *clientv3.Client, prefix string, ttl time.Duration, node string, log *slog.Logger) (*Claims, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Claims{cli: cli, kv: cli, releasing: map[string]*retry{}, stop: make(chan struct{}), prefix: prefix, node: node, ttl: max(1, int(ttl.Round(time.Second)/time.Second)),
		log: log.With("component", "leases", "node", node)}
	s, err := c.newSession(ctx)
	if err != nil {
		return nil, err
	}
	c.sess = s
	return c, nil
}

// newSession grants a lease of the TTL and keeps it alive until the
// client closes or the session is closed.
func (c *Claims) newSession(ctx context.Context) (*concurrency.Session, error) {
	g, err := c.cli.Grant(ctx, int64(c.ttl))
	if err != nil {
		return nil, fmt.Errorf("leases: grant a lease of %ds: %w", c.ttl, err)
	}
	s, err := concurrency.NewSession(c.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(c.ttl))
	if err != nil {
		_, _ = c.cli.Revoke(ctx, g.ID)
		return nil, fmt.Errorf("leases: keep lease %x alive: %w", g.ID, err)
	}
	// etcd raises a TTL below its minimum (about 1.5 election timeouts).
	c.log.Info("recovery lease granted", "lease", fmt.Sprintf("%x", g.ID), "ttl_seconds", g.TTL)
	return s, nil
}

// session returns the live session, replacing one that ended.
func (c *Claims) session(ctx context.Context) (*concurrency.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	select {
	case <-c.sess.Done():
		c.log.Warn("recovery lease lost: every claim under it is lost; taking a new lease", "lease", fmt.Sprintf("%x", c.sess.Lease()))
		s, err := c.newSession(ctx)
		if err != nil {
			return nil, err
		}
		c.sess = s
	default:
	}
	return c.sess, nil
}

// Claim implements engine.Claims: one transaction creates the window's
// key under the session's lease unless it exists. A key that exists under
// this node's own live lease — a claim whose release has not reached the
// store yet — is re-entered with its token.
func (c *Claims) Claim(ctx context.Context, window string) (engine.Claim, bool, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, false, err
	}
	epoch, err := c.currentEpoch(ctx)
	if err != nil {
		return nil, false, err
	}
	key := c.prefix + window
	unreleased := c.stopRelease(key)
	resp, err := c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, c.node, clientv3.WithLease(s.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		if unreleased != nil { // not re-entered: go on releasing it
			c.retryRelease(unreleased)
		}
		return nil, false, fmt.Errorf("leases: claim %s: %w", key, err)
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, false, nil
		}
		if kvs[0].Lease != int64(s.Lease()) || string(kvs[0].Value) != c.node {
			c.log.Debug("recovery window held by another node", "window", window, "holder", string(kvs[0].Value))
			return nil, false, nil
		}
		rev = kvs[0].CreateRevision
		c.log.Info("recovery window re-entered: its release had not reached the store", "window", window, "revision", rev)
	}
	token, err := tokenOf(epoch, rev)
	if err != nil {
		if unreleased != nil {
			c.retryRelease(unreleased)
		}
		return nil, false, err
	}
	cl := &claim{c: c, key: key, token: token, rev: rev, lost: make(chan struct{}), released: make(chan struct{}), session: s.Done()}
	c.wg.Add(1)
	go cl.watch(s.Done())
	return cl, true, nil
}

// Held implements engine.Claims: the windows under prefix that some node
// holds now, less this node's own whose release is being retried: nobody
// works them, and this node may claim them again.
func (c *Claims) Held(ctx context.Context, prefix string) (map[string]bool, error) {
	resp, err := c.kv.Get(ctx, c.prefix+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("leases: list %s%s: %w", c.prefix, prefix, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if c.releasing[string(kv.Key)] != nil {
			continue
		}
		out[strings.TrimPrefix(string(kv.Key), c.prefix)] = true
	}
	return out, nil
}

// Close ends the session: its lease is revoked, so every claim under it
// is released at once (and lost).
func (c *Claims) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	s := c.sess
	c.mu.Unlock()
	err := s.Close()
	c.wg.Wait()
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("leases: revoke lease %x: %w", s.Lease(), err)
	}
	return nil
}

// claim is one window held under the session's lease.
type claim struct {
	c        *Claims
	key      string
	token    uint64
	rev      int64 // the key's create revision
	lost     chan struct{}
	released chan struct{}
	session  <-chan struct{} // closed when the claim's session ends
	once     sync.Once
}

func (cl *claim) Token() uint64         { return cl.token }
func (cl *claim) Lost() <-chan struct{} { return cl.lost }

// watch closes lost when the session ends or the claim is released.
func (cl *claim) watch(sessionDone <-chan struct{}) {
	defer cl.c.wg.Done()
	select {
	case <-sessionDone:
	case <-cl.released:
	}
	close(cl.lost)
}

// Release implements engine.Claim: the window's key is deleted if it is
// still this claim's (its create revision is the token's), so a stale
// release never frees a newer holder's claim. When the delete fails it is
// retried in the background (see the package doc), and the error is
// returned.
func (cl *claim) Release(ctx context.Context) error {
	cl.once.Do(func() { close(cl.released) })
	if err := cl.release(ctx); err != nil {
		cl.c.retryRelease(cl)
		return err
	}
	return nil
}

func (cl *claim) release(ctx context.Context) error {
	_, err := cl.c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(cl.key), "=", cl.rev)).
		Then(clientv3.OpDelete(cl.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("leases: release %s: %w", cl.key, err)
	}
	return nil
}

// retryRelease releases cl in the background until it succeeds, its
// session ends, this node claims the window again (stopRelease) or Close.
func (c *Claims) retryRelease(cl *claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.releasing[cl.key] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &retry{cl: cl, cancel: cancel, done: make(chan struct{})}
	c.releasing[cl.key] = r
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(r.done)
		defer cancel()
		outcome := "released"
		defer func() {
			c.mu.Lock()
			if c.releasing[cl.key] == r {
				delete(c.releasing, cl.key)
			}
			c.mu.Unlock()
			c.log.Info("background release of a recovery window ended", "key", cl.key, "token", cl.token, "outcome", outcome)
		}()
		wait := retryFirst
		for {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				outcome = "claimed again"
				return
			case <-cl.session:
				outcome = "lease ended"
				return
			case <-c.stop:
				outcome = "closed"
				return
			}
			actx, acancel := context.WithTimeout(ctx, retryTimeout)
			err := cl.release(actx)
			acancel()
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				outcome = "claimed again"
				return
			}
			c.log.Debug("releasing a recovery window failed again; retrying", "key", cl.key, "err", err)
			wait = min(2*wait, retryMax)
		}
	}()
}

// stopRelease stops the background release of key, if any, and waits for
// it: an attempt in flight either deleted the key or will not. It returns
// the claim that was being released (nil: none), for Claim to release
// again if it cannot re-enter it.
func (c *Claims) stopRelease(key string) *claim {
	c.mu.Lock()
	r := c.releasing[key]
	c.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel()
	<-r.done
	return r.cl
}
