package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Key layout; see the package doc.
const (
	keyPrefix      = "/weir/coord/"
	nodesPrefix    = keyPrefix + "nodes/"
	handoffPrefix  = keyPrefix + "handoff/"
	departedPrefix = keyPrefix + "departed/"
	lockPrefix     = keyPrefix + "membership-lock"
)

// opTimeout bounds one round of reads or writes made by the run loop.
const opTimeout = 5 * time.Second

// checkIn opens the node's session (bounded by ReadyTimeout) and writes its
// check-in key under the session's lease.
func (n *Node) checkIn(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, n.cfg.ReadyTimeout)
	defer cancel()
	lease, err := n.cli.Grant(gctx, int64(n.cfg.SessionTTL))
	if err != nil {
		return fmt.Errorf("coord: check in at %v: %w", n.cli.Endpoints(), err)
	}
	s, err := concurrency.NewSession(n.cli, concurrency.WithLease(lease.ID),
		concurrency.WithTTL(n.cfg.SessionTTL), concurrency.WithContext(n.sessCtx))
	if err != nil {
		return fmt.Errorf("coord: check-in session: %w", err)
	}
	n.mu.Lock()
	n.session = s
	n.mu.Unlock()
	if err := n.putCheckIn(gctx); err != nil {
		return fmt.Errorf("coord: check in at %v: %w", n.cli.Endpoints(), err)
	}
	n.log.Info("checked in", "role", n.Role(), "lease", fmt.Sprintf("%x", lease.ID))
	return nil
}

func (n *Node) currentSession() *concurrency.Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.session
}

// putCheckIn writes /weir/coord/nodes/<node> with the current role.
func (n *Node) putCheckIn(ctx context.Context) error {
	s := n.currentSession()
	if s == nil {
		return nil // not checked in yet: checkIn writes the role
	}
	c := checkIn{Ordinal: ordinal(n.cfg.Node), Role: n.Role()}
	if len(n.cfg.Endpoints) == 0 {
		c.Peer, c.Client = n.cfg.peerURL(), n.cfg.clientURL()
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err = n.cli.Put(ctx, nodesPrefix+n.cfg.Node, string(b), clientv3.WithLease(s.Lease()))
	return err
}

// clearGone deletes this node's handoff and departed keys: a restarted
// member is back.
func (n *Node) clearGone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := n.cli.Txn(ctx).Then(
		clientv3.OpDelete(handoffPrefix+n.cfg.Node),
		clientv3.OpDelete(departedPrefix+n.cfg.Node),
	).Commit()
	if err != nil {
		return fmt.Errorf("coord: clear departed record: %w", err)
	}
	return nil
}

// renewCheckIn replaces a session whose lease was lost (a partition
// longer than the TTL, say).
func (n *Node) renewCheckIn(ctx context.Context) {
	n.log.Warn("check-in session lost; checking in again")
	if err := n.checkIn(ctx); err != nil {
		n.log.Warn("check in again failed; retrying", "err", err)
	}
}

// syncEndpoints points the client at the voting members.
func (n *Node) syncEndpoints(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := n.cli.Sync(ctx); err != nil {
		n.log.Warn("client endpoints not synced with the membership", "err", err)
	}
}

// readView reads the membership and the coordination keys.
func (n *Node) readView(ctx context.Context) (view, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	ml, err := n.cli.MemberList(ctx)
	if err != nil {
		return view{}, fmt.Errorf("coord: member list: %w", err)
	}
	tr, err := n.cli.Txn(ctx).Then(
		clientv3.OpGet(nodesPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(departedPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(handoffPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return view{}, fmt.Errorf("coord: read check-ins: %w", err)
	}
	v := view{nodes: map[string]checkIn{}, departed: map[string]bool{}, handoff: map[string]bool{}}
	for _, m := range ml.Members {
		v.members = append(v.members, member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	for _, kv := range tr.Responses[0].GetResponseRange().Kvs {
		var c checkIn
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			n.log.Warn("unreadable check-in skipped", "key", string(kv.Key), "err", err)
			continue
		}
		c.Node = strings.TrimPrefix(string(kv.Key), nodesPrefix)
		v.nodes[c.Node] = c
	}
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		v.departed[strings.TrimPrefix(string(kv.Key), departedPrefix)] = true
	}
	for _, kv := range tr.Responses[2].GetResponseRange().Kvs {
		v.handoff[strings.TrimPrefix(string(kv.Key), handoffPrefix)] = true
	}
	return v, nil
}
