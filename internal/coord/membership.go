package coord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
)

// evalEvery is how often the run loop looks again without a watch event.
const evalEvery = time.Second

// run re-evaluates the node's place on every change under the coordination
// keys and every evalEvery, until ctx ends (Close).
func (n *Node) run(ctx context.Context) {
	defer n.wg.Done()
	w := n.watch(ctx)
	defer func() { w.stop() }()
	tick := time.NewTicker(evalEvery)
	defer tick.Stop()
	for {
		n.evaluate(ctx)
		var lost <-chan struct{}
		if s := n.currentSession(); s != nil {
			lost = s.Done()
		}
		ok := true
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case _, ok = <-w.c[0]:
		case _, ok = <-w.c[1]:
		case _, ok = <-w.c[2]:
		case <-lost:
			n.renewCheckIn(ctx)
		}
		if !ok && ctx.Err() == nil { // a watch stream failed: open them again
			w.stop()
			w = n.watch(ctx)
		}
	}
}

type watches struct {
	c    [3]clientv3.WatchChan
	stop context.CancelFunc
}

// watch follows the check-in, handoff and departed keys (not the rest of
// /weir/coord/, where leases churn).
func (n *Node) watch(ctx context.Context) watches {
	ctx, cancel := context.WithCancel(ctx)
	w := watches{stop: cancel}
	for i, p := range []string{nodesPrefix, handoffPrefix, departedPrefix} {
		w.c[i] = n.cli.Watch(ctx, p, clientv3.WithPrefix())
	}
	return w
}

// evaluate acts on one reading: a worker may step up, a learner finishes
// its promotion, a voter may remove gone members that were replaced.
func (n *Node) evaluate(ctx context.Context) {
	n.noticeStop(ctx)
	v, err := n.readView(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Debug("membership not read", "err", err)
		}
		return
	}
	n.met.observe(v)
	if len(n.cfg.Endpoints) > 0 {
		return // an external cluster's membership is not ours to change
	}
	switch n.Role() {
	case RoleWorker:
		if !n.hasServer() && v.shouldStepUp(n.cfg.Node, n.cfg.Mode) {
			n.logErr(ctx, "step up", n.withLock(ctx, func(ctx context.Context) error { return n.stepUp(ctx) }))
		}
	case RoleLearner:
		n.logErr(ctx, "promote", n.promote(ctx))
	case RoleVoter:
		if len(v.surplus(n.cfg.Node, n.cfg.Mode)) > 0 {
			n.logErr(ctx, "remove replaced members", n.withLock(ctx, n.removeSurplus))
		}
	}
}

func (n *Node) logErr(ctx context.Context, what string, err error) {
	if err != nil && ctx.Err() == nil {
		n.log.Warn(what+" failed; will retry", "err", err)
	}
}

// noticeStop turns a member whose server stopped on its own (removed from
// the cluster, or failed) into a worker that will not step up again.
func (n *Node) noticeStop(ctx context.Context) {
	n.mu.Lock()
	srv, dead := n.srv, n.dead
	n.mu.Unlock()
	if srv == nil || dead {
		return
	}
	select {
	case <-srv.Server.StopNotify():
	default:
		return
	}
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
	n.log.Error("embedded member stopped on its own (removed from the cluster, or failed); holding no role until restarted",
		"data_dir", n.cfg.DataDir)
	n.setRole(ctx, RoleWorker)
}

// hasServer: a member was started here, even if it stopped since (then
// its data dir is in use and the node does not step up again).
func (n *Node) hasServer() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv != nil
}

// isLeader asks the local member whether it leads: no quorum needed. A
// member that stopped does not lead; a leader cut off from a majority
// steps down within an election timeout (etcd's check-quorum), and then
// says so.
func (n *Node) isLeader() bool {
	srv := n.server()
	if srv == nil {
		return false
	}
	select {
	case <-srv.Server.StopNotify():
		return false
	default:
	}
	return srv.Server.Leader() == srv.Server.MemberID()
}

// leaderEvery is how often followLeader reads the local member.
const leaderEvery = 250 * time.Millisecond

// followLeader keeps weir_coordination_leader at what the local member
// says of itself, apart from the run loop, whose reads need a quorum (and
// wait up to opTimeout without one): a former leader cut off from the
// others reports 0 once it has stepped down, not the 1 of its last
// membership read.
func (n *Node) followLeader(ctx context.Context) {
	defer n.wg.Done()
	tick := time.NewTicker(leaderEvery)
	defer tick.Stop()
	for {
		n.met.setLeader(n.isLeader())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// withLock runs f holding the membership lock: one change at a time.
func (n *Node) withLock(ctx context.Context, f func(context.Context) error) error {
	s := n.currentSession()
	if s == nil {
		return errors.New("coord: not checked in")
	}
	m := concurrency.NewMutex(s, lockPrefix)
	lctx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	err := m.Lock(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("coord: membership lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		if err := m.Unlock(uctx); err != nil {
			n.log.Warn("membership lock not released; it lapses with the session", "err", err)
		}
	}()
	return f(ctx)
}

// stepUp, under the lock: look again, clear stale members, join as a
// learner and get promoted.
func (n *Node) stepUp(ctx context.Context) error {
	v, err := n.readView(ctx)
	if err != nil || !v.shouldStepUp(n.cfg.Node, n.cfg.Mode) {
		return err
	}
	if hasMemberData(n.cfg.DataDir) {
		return fmt.Errorf("coord: data dir %s already holds member data; not joining over it", n.cfg.DataDir)
	}
	n.log.Info("cluster short of members; stepping up", "effective_voters", v.effective(), "mode", n.cfg.Mode)
	for _, m := range v.stale(n.cfg.Node, n.cfg.peerURL()) {
		if err := n.removeMember(ctx, m); err != nil {
			return err
		}
	}
	return n.join(ctx)
}

// join adds this node as a learner, starts its member and promotes it.
func (n *Node) join(ctx context.Context) error {
	var resp *clientv3.MemberAddResponse
	err := retryBusy(ctx, n.cfg.ReadyTimeout, func(ctx context.Context) (err error) {
		resp, err = n.cli.MemberAddAsLearner(ctx, []string{n.cfg.peerURL()})
		return err
	})
	if err != nil {
		return fmt.Errorf("coord: add %s as a learner: %w", n.cfg.Node, err)
	}
	id := resp.Member.ID
	var ms []member
	for _, m := range resp.Members {
		ms = append(ms, member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs})
	}
	n.log.Info("added as a learner", "id", fmt.Sprintf("%x", id))
	e, err := n.startServer(ctx, embed.ClusterStateFlagExisting, initialCluster(ms, id, n.cfg.Node))
	if err != nil {
		n.undoJoin(ctx, id)
		return err
	}
	n.adopt(ctx, e)
	return n.promote(ctx)
}

// undoJoin removes the learner that never started and the data it left.
func (n *Node) undoJoin(ctx context.Context, id uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if _, err := n.cli.MemberRemove(ctx, id); err != nil {
		n.log.Warn("learner left behind; the next step-up removes it", "id", fmt.Sprintf("%x", id), "err", err)
	}
	if err := os.RemoveAll(filepath.Join(n.cfg.DataDir, "member")); err != nil {
		n.log.Warn("partial member data left in the data dir", "data_dir", n.cfg.DataDir, "err", err)
	}
}

// promote asks for this learner's promotion until etcd says it caught up.
func (n *Node) promote(ctx context.Context) error {
	srv := n.server()
	if srv == nil {
		return nil
	}
	id := uint64(srv.Server.MemberID())
	err := retryBusy(ctx, max(n.cfg.ReadyTimeout, 30*time.Second), func(ctx context.Context) error {
		_, err := n.cli.MemberPromote(ctx, id)
		if is(err, rpctypes.ErrMemberNotLearner) {
			return nil // promoted by an earlier attempt whose answer was lost
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("coord: promote learner %s: %w", n.cfg.Node, err)
	}
	n.cfg.tracef("promoted " + n.cfg.Node)
	n.setRole(ctx, RoleVoter)
	n.syncEndpoints(ctx)
	return nil
}

// removeSurplus removes gone members that are down, now that they were replaced.
func (n *Node) removeSurplus(ctx context.Context) error {
	v, err := n.readView(ctx)
	if err != nil {
		return err
	}
	for _, m := range v.surplus(n.cfg.Node, n.cfg.Mode) {
		if err := n.removeMember(ctx, m); err != nil {
			return err
		}
		if _, err := n.cli.Txn(ctx).Then(clientv3.OpDelete(departedPrefix+m.Name), clientv3.OpDelete(handoffPrefix+m.Name)).Commit(); err != nil {
			return fmt.Errorf("coord: clear departed record of %s: %w", m.Name, err)
		}
	}
	return nil
}

func (n *Node) removeMember(ctx context.Context, m member) error {
	err := retryBusy(ctx, n.cfg.ReadyTimeout, func(ctx context.Context) error {
		_, err := n.cli.MemberRemove(ctx, m.ID)
		if is(err, rpctypes.ErrMemberNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("coord: remove member %s (%x): %w", m.Name, m.ID, err)
	}
	n.log.Info("removed member", "member", m.Name, "id", fmt.Sprintf("%x", m.ID), "learner", m.Learner)
	return nil
}

// retryBusy retries f while etcd refuses for a reason that passes: a learner
// not caught up, peers connected for less than etcd's health interval (5 s),
// a leader election.
func retryBusy(ctx context.Context, limit time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		octx, ocancel := context.WithTimeout(ctx, opTimeout)
		err := f(octx)
		ocancel()
		if err == nil || !busy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up after %s)", err, limit)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func busy(err error) bool {
	for _, b := range []error{rpctypes.ErrMemberLearnerNotReady, rpctypes.ErrUnhealthy, rpctypes.ErrMemberNotEnoughStarted,
		rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTooManyLearners, rpctypes.ErrNotCapable} {
		if is(err, b) {
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// is compares etcd errors by description, the way rpctypes converts them.
func is(err, target error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(target)
}
