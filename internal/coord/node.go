package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Role is what a node holds in the coordination tier.
type Role string

// Roles. A voter holds quorum; the daemon runs the reduced "quorum" flow
// profile while a node is a voter or a learner.
const (
	RoleVoter   Role = "quorum"
	RoleLearner Role = "learner"
	RoleWorker  Role = "worker" // a client only, no membership
)

// Node is one node's place in the coordination tier.
type Node struct {
	cfg Config
	log *slog.Logger
	zl  *zap.Logger // etcd's logs, bridged to log at warn and above
	met *metrics

	mu      sync.Mutex
	role    Role
	onRole  []func(Role)
	srv     *embed.Etcd // nil while a worker, and always in external mode
	dead    bool        // srv stopped on its own (removed, or failed)
	session *concurrency.Session

	cli      *clientv3.Client
	sessCtx  context.Context // lives until the session is revoked in Close
	sessStop context.CancelFunc
	cancel   context.CancelFunc // the run loop
	wg       sync.WaitGroup
	closed   bool
}

// Start joins the coordination tier as cfg says: bootstrap, restart as the
// member in cfg.DataDir, or check in as a worker. Mode 0 returns ErrOff.
func Start(ctx context.Context, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Node, error) {
	if cfg.Mode == 0 {
		return nil, ErrOff
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log = log.With("component", "coord", "node", cfg.Node)
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, zl: zap.New(newSlogCore(log, zap.WarnLevel)), met: met, role: RoleWorker}
	n.sessCtx, n.sessStop = context.WithCancel(context.Background())
	if err := n.open(ctx); err != nil {
		n.teardown()
		return nil, err
	}
	loop, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go n.run(loop)
	go n.followLeader(loop)
	return n, nil
}

// open starts or restarts the member when there is one, connects the
// client and checks in.
func (n *Node) open(ctx context.Context) error {
	eps := toURLs(n.cfg.Endpoints)
	if len(eps) == 0 {
		p, err := n.plan(ctx)
		if err != nil {
			return err
		}
		if err := n.startPlanned(ctx, p); err != nil {
			return err
		}
		eps = toURLs(n.cfg.Join)
		if p != planWorker {
			eps = append([]string{n.cfg.clientURL()}, eps...)
		}
	}
	embedded := len(n.cfg.Endpoints) == 0
	cli, err := n.newClient(eps, embedded)
	if err != nil {
		return err
	}
	n.cli = cli
	if err := n.checkIn(ctx); err != nil {
		return err
	}
	if embedded {
		n.syncEndpoints(ctx)
	}
	if n.Role() != RoleWorker {
		return n.clearGone(ctx)
	}
	return nil
}

// autoSync is how often an embedded-mode client refreshes its endpoints
// from the membership (an external cluster's endpoints are kept as given).
const autoSync = 30 * time.Second

func (n *Node) newClient(eps []string, sync bool) (*clientv3.Client, error) {
	cc := clientConfig(eps, n.log)
	if sync {
		cc.AutoSyncInterval = autoSync
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("coord: client for %v: %w", eps, err)
	}
	return cli, nil
}

// clientConfig is the etcd client configuration of every client weir
// makes, for endpoints eps (URLs), logging to log at error.
func clientConfig(eps []string, log *slog.Logger) clientv3.Config {
	return clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		// A member that is up but does not answer (paused, cut off)
		// keeps its connection open: keepalive pings find it within
		// a few seconds so requests move to another endpoint. 5 s is
		// the least etcd's server accepts (GRPCKeepAliveMinTime).
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.New(newSlogCore(log, zap.ErrorLevel)),
	}
}

// Ping connects to each of the etcd client addresses addrs (host:port)
// with the client configuration a node uses and asks it for its status,
// within ctx; it writes nothing (weir validate --connect). The error
// names every address that did not answer.
func Ping(ctx context.Context, addrs []string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eps := toURLs(addrs)
	cc := clientConfig(eps, log)
	if dl, ok := ctx.Deadline(); ok {
		cc.DialTimeout = max(time.Until(dl), time.Millisecond)
	}
	cc.Context = ctx
	cli, err := clientv3.New(cc)
	if err != nil {
		return fmt.Errorf("coord: client for %v: %w", addrs, err)
	}
	defer cli.Close()
	var errs []error
	for i, ep := range eps {
		if _, err := cli.Status(ctx, ep); err != nil {
			errs = append(errs, fmt.Errorf("etcd %s: %w", addrs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Client is the node's etcd client (voting members' endpoints).
func (n *Node) Client() *clientv3.Client { return n.cli }

// Role is the node's current role.
func (n *Node) Role() Role {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.role
}

// OnRole registers f, calls it at once with the current role, and again on
// every role change, from the goroutine that made the change.
func (n *Node) OnRole(f func(Role)) {
	n.mu.Lock()
	n.onRole = append(n.onRole, f)
	r := n.role
	n.mu.Unlock()
	f(r)
}

func (n *Node) setRole(ctx context.Context, r Role) {
	n.mu.Lock()
	old := n.role
	n.role = r
	fs := slices.Clone(n.onRole)
	n.mu.Unlock()
	n.met.setRole(r)
	if old == r {
		return
	}
	n.log.Info("role changed", "from", old, "to", r)
	if err := n.putCheckIn(ctx); err != nil {
		n.log.Warn("check-in not updated with the new role", "role", r, "err", err)
	}
	for _, f := range fs {
		f(r)
	}
}

func (n *Node) server() *embed.Etcd {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return nil
	}
	return n.srv
}

// Close hands off as the package doc describes (within HandoffGrace), then
// revokes the check-in, stops the embedded server and closes it.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	hctx, cancel := context.WithTimeout(ctx, n.cfg.HandoffGrace)
	err := n.handoff(hctx)
	cancel()
	n.teardown()
	return err
}

// teardown revokes the session, closes the client (its streams would hold
// the server's graceful stop for the request timeout), then stops the
// server and closes it.
func (n *Node) teardown() {
	n.mu.Lock()
	s, srv := n.session, n.srv
	n.session, n.srv = nil, nil
	n.mu.Unlock()
	if s != nil {
		n.revoke(s)
	}
	n.sessStop()
	if n.cli != nil {
		n.cli.Close()
	}
	if srv != nil {
		// Raft, its log and the backend stop here: the member's state is
		// on disk when Stop returns.
		srv.Server.Stop()
		n.closeServer(srv)
	}
	n.met.clear()
}

// serverCloseWait is how long teardown waits for the embedded server's
// network side to close once its state is on disk.
const serverCloseWait = time.Second

// closeServer closes the stopped server's listeners and connections,
// waiting at most serverCloseWait. etcd's Close waits up to its request
// timeout (5 s plus two election timeouts) for streams other nodes still
// hold on this member — their watches and lease keep-alives, which they
// move only when the stream breaks — so a member that has handed off would
// otherwise take that long to exit. Past the wait, Close goes on in the
// background, ends within that timeout, and the process may exit meanwhile:
// nothing is left to write. Its listeners are closed before closeServer
// returns, so the ports are free either way.
func (n *Node) closeServer(srv *embed.Etcd) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Close()
	}()
	select {
	case <-done:
	case <-time.After(serverCloseWait):
		// Free the ports now (etcd closes its listeners only after the
		// wait): a node started again in this process binds them.
		for _, l := range srv.Clients {
			l.Close()
		}
		for _, l := range srv.Peers {
			l.Close()
		}
		n.log.Info("not waiting for the coordination server to close the streams other nodes hold on it; they move when it exits",
			"waited", serverCloseWait)
	}
}

// revoke ends the check-in now; without quorum it lapses after its TTL
// instead, and Close does not wait for that.
func (n *Node) revoke(s *concurrency.Session) {
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := n.cli.Revoke(ctx, s.Lease()); err != nil {
		n.log.Warn("check-in not revoked; it lapses after its TTL", "err", err)
	}
}
