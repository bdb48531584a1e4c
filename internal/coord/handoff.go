package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handoff is Close's part for a member: take a backup while quorum is
// reachable, move leadership, get replaced by a waiting worker and leave
// (in mode 1 too), or else stay a member recorded as departed.
func (n *Node) handoff(ctx context.Context) error {
	srv := n.server()
	if srv == nil || len(n.cfg.Endpoints) > 0 {
		return nil // a worker holds no membership
	}
	if n.Role() == RoleLearner {
		return n.leave(ctx)
	}
	if p := n.progressOf(srv); p.reachable < p.voters/2+1 {
		n.log.Warn("no quorum reachable; stopping without a backup: the newest backup is one a member took earlier",
			"reachable", p.reachable, "voters", p.voters)
		return nil
	}
	berr := n.stopBackup(ctx)
	v, err := n.readView(ctx)
	if err != nil {
		n.log.Warn("membership not readable (no quorum?); stopping without handing off", "err", err)
		return berr
	}
	n.moveLeader(ctx, v)
	if len(v.workers()) > 0 {
		err := n.replace(ctx, v.effective())
		if err == nil {
			return berr
		}
		n.log.Warn("not replaced within the grace period", "err", err)
	}
	if v.lowestVoter(n.cfg.Node) != "" {
		return errors.Join(berr, n.recordDeparted(ctx))
	}
	if err := n.del(context.WithoutCancel(ctx), handoffPrefix+n.cfg.Node); err != nil {
		n.log.Warn("handoff request left behind; a restart clears it", "err", err)
	}
	return berr
}

// moveLeader hands leadership, when this member holds it, to the
// lowest-ordinal other live voter.
func (n *Node) moveLeader(ctx context.Context, v view) {
	srv := n.server()
	to, ok := v.member(v.lowestVoter(n.cfg.Node))
	if !n.isLeader() || !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	if err := srv.Server.MoveLeader(ctx, srv.Server.Lead(), to.ID); err != nil {
		n.log.Warn("leadership not moved; etcd moves it when the server stops", "to", to.Name, "err", err)
		return
	}
	n.cfg.tracef("moved leader to " + to.Name)
	n.log.Info("moved leadership", "to", to.Name, "took", time.Since(start))
}

// replace asks for a replacement, waits until one is promoted, and removes
// this member.
func (n *Node) replace(ctx context.Context, want int) error {
	if err := n.put(ctx, handoffPrefix+n.cfg.Node); err != nil {
		return err
	}
	n.cfg.tracef("asked for a replacement")
	n.log.Info("asked for a replacement", "voters_wanted", want)
	if err := n.waitReplaced(ctx, want); err != nil {
		return err
	}
	return n.withLock(ctx, func(ctx context.Context) error {
		v, err := n.readView(ctx)
		if err != nil {
			return err
		}
		n.moveLeader(ctx, v)
		self, ok := v.member(n.cfg.Node)
		if !ok {
			return nil
		}
		n.cli.SetEndpoints(v.otherClientURLs(n.cfg.Node)...) // this member stops once removed
		if err := n.removeMember(ctx, self); err != nil {
			return err
		}
		n.cfg.tracef("removed " + n.cfg.Node)
		return n.del(ctx, handoffPrefix+n.cfg.Node)
	})
}

// waitReplaced waits until effective voters (this one no longer counted)
// are back to want and no learner is pending.
func (n *Node) waitReplaced(ctx context.Context, want int) error {
	for {
		v, err := n.readView(ctx)
		if err == nil && v.effective() >= want && !v.learnerBusy("") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coord: waiting for a replacement: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// recordDeparted marks this member gone on purpose (not failed).
func (n *Node) recordDeparted(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	_, err := n.cli.Txn(ctx).Then(
		clientv3.OpPut(departedPrefix+n.cfg.Node, time.Now().UTC().Format(time.RFC3339)),
		clientv3.OpDelete(handoffPrefix+n.cfg.Node),
	).Commit()
	if err != nil {
		return fmt.Errorf("coord: record %s as departed: %w", n.cfg.Node, err)
	}
	n.cfg.tracef("departed " + n.cfg.Node)
	n.log.Info("left as a departed member; quorum kept without reconfiguration")
	return nil
}

// leave removes a learner that was never promoted.
func (n *Node) leave(ctx context.Context) error {
	v, err := n.readView(ctx)
	if err != nil {
		return err
	}
	self, ok := v.member(n.cfg.Node)
	if !ok {
		return nil
	}
	n.cli.SetEndpoints(v.otherClientURLs(n.cfg.Node)...)
	return n.removeMember(ctx, self)
}

// stopBackup calls BeforeStop with a client of this member alone, while
// the member still reaches quorum and before it hands anything off: a
// linearizable read through it waits until the member has applied every
// write committed so far, so what it snapshots next holds them all. Every
// voter that stops gracefully does this, so when all of them stop —
// together or one by one, with crashed members still counted — the first
// to stop its server has taken a backup newer than every write committed
// before its SIGTERM, while every server was still up.
func (n *Node) stopBackup(ctx context.Context) error {
	if n.cfg.BeforeStop == nil {
		return nil
	}
	cli, err := n.newClient([]string{n.cfg.clientURL()}, false)
	if err != nil {
		return err
	}
	defer cli.Close()
	n.cfg.tracef("before stop")
	if err := n.cfg.BeforeStop(ctx, cli); err != nil {
		n.log.Warn("no backup taken at stop", "err", err)
		return fmt.Errorf("coord: backup before the member stops: %w", err)
	}
	return nil
}

func (n *Node) put(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := n.cli.Put(ctx, key, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return fmt.Errorf("coord: put %s: %w", key, err)
	}
	return nil
}

func (n *Node) del(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := n.cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("coord: delete %s: %w", key, err)
	}
	return nil
}
