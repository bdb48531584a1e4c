package coord

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

type plan int

const (
	planBootstrap plan = iota // no member data, no Join: a new single-member cluster
	planRestart               // member data in DataDir
	planWorker                // no member data, Join given: check in, maybe step up later
)

const clusterToken = "weir-coord"

// plan decides how to start from DataDir and Join; a data dir naming a
// member the cluster no longer lists is moved aside.
func (n *Node) plan(ctx context.Context) (plan, error) {
	if !hasMemberData(n.cfg.DataDir) {
		if len(n.cfg.Join) == 0 {
			return planBootstrap, nil
		}
		return planWorker, nil
	}
	if len(n.cfg.Join) == 0 {
		return planRestart, nil
	}
	listed, reached := n.stillListed(ctx)
	if listed || !reached {
		return planRestart, nil
	}
	aside, err := moveAside(n.cfg.DataDir)
	if err != nil {
		return 0, err
	}
	n.log.Warn("data dir names a member the cluster removed; moved it aside and joining fresh",
		"data_dir", n.cfg.DataDir, "moved_to", aside)
	return planWorker, nil
}

func hasMemberData(dir string) bool { return wal.Exist(filepath.Join(dir, "member", "wal")) }

// stillListed asks the cluster at Join whether it lists this node (by name
// or peer URL); reached is false when no member answered.
func (n *Node) stillListed(ctx context.Context) (listed, reached bool) {
	cli, err := n.newClient(toURLs(n.cfg.Join), false)
	if err != nil {
		return false, false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, min(n.cfg.ReadyTimeout, 5*time.Second))
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		n.log.Info("join addresses unreachable; restarting from the data dir", "join", n.cfg.Join, "err", err)
		return false, false
	}
	for _, m := range resp.Members {
		if m.Name == n.cfg.Node || slices.Contains(m.PeerURLs, n.cfg.peerURL()) {
			return true, true
		}
	}
	return false, true
}

// moveAside renames DataDir/member (DataDir may be a mount point).
func moveAside(dir string) (string, error) {
	to := filepath.Join(dir, "member.removed-"+time.Now().UTC().Format("20060102T150405.000000000"))
	if err := os.Rename(filepath.Join(dir, "member"), to); err != nil {
		return "", fmt.Errorf("coord: move stale member data aside in %s: %w", dir, err)
	}
	return to, nil
}

func (n *Node) startPlanned(ctx context.Context, p plan) error {
	switch p {
	case planWorker:
		return nil
	case planBootstrap:
		if err := n.restore(ctx); err != nil {
			return err
		}
		n.log.Info("bootstrapping a single-member cluster", "data_dir", n.cfg.DataDir)
	case planRestart:
		n.log.Info("restarting the member in the data dir", "data_dir", n.cfg.DataDir)
	}
	self := n.cfg.Node + "=" + n.cfg.peerURL()
	e, err := n.startServer(ctx, embed.ClusterStateFlagNew, self)
	if err != nil {
		return err
	}
	n.adopt(ctx, e)
	return nil
}

func (n *Node) restore(ctx context.Context) error {
	if n.cfg.Restore == nil {
		return nil
	}
	ok, err := n.cfg.Restore(ctx, n.cfg.DataDir, n.cfg.Node, n.cfg.peerURL())
	if err != nil {
		return fmt.Errorf("coord: restore into %s: %w", n.cfg.DataDir, err)
	}
	if ok {
		n.log.Info("data dir restored from a backup", "data_dir", n.cfg.DataDir)
	}
	return nil
}

// adopt records a ready server and the role it holds.
func (n *Node) adopt(ctx context.Context, e *embed.Etcd) {
	n.mu.Lock()
	n.srv, n.dead = e, false
	n.mu.Unlock()
	r := RoleVoter
	if e.Server.IsLearner() {
		r = RoleLearner
	}
	n.setRole(ctx, r)
}

// startServer starts the embedded member and waits until it is ready.
func (n *Node) startServer(ctx context.Context, state, initial string) (*embed.Etcd, error) {
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("coord: data dir: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = n.cfg.Node
	cfg.Dir = n.cfg.DataDir
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(n.zl)
	peer, err := url.Parse(n.cfg.peerURL())
	if err != nil {
		return nil, fmt.Errorf("coord: peer address %s: %w", n.cfg.PeerListen, err)
	}
	client, err := url.Parse(n.cfg.clientURL())
	if err != nil {
		return nil, fmt.Errorf("coord: client address %s: %w", n.cfg.ClientListen, err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = clusterToken
	cfg.ClusterState = state
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("coord: start member %s (data %s, peer %s, client %s): %w",
			n.cfg.Node, n.cfg.DataDir, n.cfg.PeerListen, n.cfg.ClientListen, err)
	}
	if err := n.waitReady(ctx, e); err != nil {
		e.Server.HardStop()
		e.Close()
		return nil, err
	}
	return e, nil
}

// progress is what a starting member changes while it gets anywhere.
type progress struct {
	term, applied, committed uint64
	reachable, voters        int
}

func (n *Node) progressOf(e *embed.Etcd) progress {
	p := progress{term: e.Server.Term(), applied: e.Server.AppliedIndex(), committed: e.Server.CommittedIndex(), reachable: 1}
	self := e.Server.MemberID()
	for _, m := range e.Server.Cluster().Members() {
		if m.IsLearner {
			continue
		}
		p.voters++
		if m.ID != self && anyDials(m.PeerURLs) {
			p.reachable++
		}
	}
	return p
}

func anyDials(urls []string) bool {
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			continue
		}
		c, err := net.DialTimeout("tcp", pu.Host, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
	}
	return false
}

// waitReady waits on ReadyNotify while the member makes progress; it gives
// up after ReadyTimeout without any.
func (n *Node) waitReady(ctx context.Context, e *embed.Etcd) error {
	last, since := n.progressOf(e), time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-e.Server.ReadyNotify():
			return nil
		case err := <-e.Err():
			return fmt.Errorf("coord: member %s (data %s, peer %s) failed while starting: %w",
				n.cfg.Node, n.cfg.DataDir, n.cfg.PeerListen, err)
		case <-ctx.Done():
			return fmt.Errorf("coord: member %s (data %s) not ready: %w", n.cfg.Node, n.cfg.DataDir, ctx.Err())
		case <-tick.C:
		}
		p := n.progressOf(e)
		if p != last {
			last, since = p, time.Now()
			continue
		}
		if time.Since(since) >= n.cfg.ReadyTimeout {
			return n.notReady(p)
		}
	}
}

func (n *Node) notReady(p progress) error {
	why := "no leader elected"
	if need := p.voters/2 + 1; p.reachable < need {
		why = fmt.Sprintf("no quorum: %d of %d peers reachable, %d needed", p.reachable, p.voters, need)
	}
	return fmt.Errorf("coord: member %s (data %s, peer %s) made no progress for %s: %s (term %d, committed %d, applied %d)",
		n.cfg.Node, n.cfg.DataDir, n.cfg.PeerListen, n.cfg.ReadyTimeout, why, p.term, p.committed, p.applied)
}

// initialCluster is etcd's name=peerURL list for a member joining members;
// members not started yet have no name, as etcdctl prints them.
func initialCluster(ms []member, self uint64, name string) string {
	var parts []string
	for _, m := range ms {
		nm := m.Name
		if m.ID == self {
			nm = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, nm+"="+u)
		}
	}
	return strings.Join(parts, ",")
}
