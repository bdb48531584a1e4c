package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/coord"
	"github.com/weir-io/weir/internal/coord/backup"
	"github.com/weir-io/weir/internal/coord/leases"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/metrics"
)

// coordination is the node's part in the coordination cluster
// (docs/coordination.md): its etcd member or client, the backups, and the
// recovery window claims; nil with coordination.mode = 0.
type coordination struct {
	node   *coord.Node
	bk     *backup.Store // nil without coordination.backup_url
	claims *leases.Claims
	log    *slog.Logger
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// startCoordination joins or starts the cluster [coordination] describes,
// switches fc to the quorum flow profile while the node holds a quorum
// role, and starts the leader's periodic backups.
func startCoordination(ctx context.Context, cfg *config.Config, fc *flowControl, reg prometheus.Registerer, log *slog.Logger) (*coordination, error) {
	co := cfg.Coordination
	if !co.On() {
		return nil, nil
	}
	base := log
	log = log.With("component", "coord")
	c := &coordination{log: log}
	if co.HandoffGrace >= cfg.ShutdownTimeout {
		log.Warn("coordination.handoff_grace is not shorter than shutdown_timeout: a stopping member's handoff is spent inside the node's one shutdown deadline, so it may be cut short",
			"handoff_grace", co.HandoffGrace, "shutdown_timeout", cfg.ShutdownTimeout)
	}
	ccfg := coordConfig(co)
	if co.BackupURL != "" {
		bk, err := backup.Open(ctx, co.BackupURL, base, reg)
		if err != nil {
			return nil, fmt.Errorf("coordination.backup_url: %w", err)
		}
		bk.Keep = co.BackupKeep
		if bk.Keys, err = backupKeys(co); err != nil {
			return nil, errors.Join(err, bk.Close())
		}
		c.bk = bk
		ccfg.Restore = bk.RestoreHook()
		ccfg.BeforeStop = bk.SaveHook(co.Node)
	}
	node, err := coord.Start(ctx, ccfg, base, reg)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("coordination: %w", err), c.closeBackup())
	}
	c.node = node
	node.OnRole(func(r coord.Role) { fc.setQuorum(cfg, r != coord.RoleWorker) })
	fc.setQuorum(cfg, node.Role() != coord.RoleWorker)
	if co.RecoveryLeases {
		cl, err := leases.New(ctx, node.Client(), "/weir/recovery/windows/", co.LeaseTTL, co.Node, base)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("coordination: recovery leases: %w", err), c.close(ctx))
		}
		c.claims = cl
	}
	bctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	if err := c.watchMembers(bctx, reg); err != nil {
		cancel()
		return nil, errors.Join(err, c.close(ctx))
	}
	if c.bk != nil {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.bk.Run(bctx, co.BackupInterval, node.Client(), co.Node, node.IsLeader)
		}()
	}
	log.Info("coordination ready", "mode", co.Mode, "node", co.Node, "role", string(node.Role()),
		"external", len(co.Endpoints) > 0, "recovery_leases", co.RecoveryLeases, "backup", co.BackupURL != "")
	return c, nil
}

// backupKeys reads the backup encryption keys; none without a key set.
func backupKeys(co config.CoordinationConfig) ([][]byte, error) {
	text, from := co.BackupKey, "coordination.backup_key"
	if co.BackupKeyFile != "" {
		data, err := os.ReadFile(co.BackupKeyFile)
		if err != nil {
			return nil, fmt.Errorf("coordination.backup_key_file: %w", err)
		}
		text, from = string(data), "coordination.backup_key_file "+co.BackupKeyFile
	}
	if text == "" {
		return nil, nil
	}
	keys, err := backup.ParseKeys(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return keys, nil
}

// coordConfig is coord's view of [coordination].
func coordConfig(co config.CoordinationConfig) coord.Config {
	return coord.Config{
		Mode: co.Mode, Node: co.Node, DataDir: co.DataDir,
		PeerListen: co.PeerListen, ClientListen: co.ClientListen,
		Join: co.Join, Endpoints: co.Endpoints,
		ReadyTimeout: co.ReadyTimeout, HandoffGrace: co.HandoffGrace,
		SessionTTL: int(co.SessionTTL / time.Second),
	}
}

// fanoutOptions lets the fan-out's recovery claim its windows through the
// cluster when coordination.recovery_leases is on, with the claim series
// of every secondary present from the first scrape.
func (c *coordination) fanoutOptions(cfg *config.Config, topo *metrics.Topology, o *engine.FanoutOptions) {
	if c == nil || c.claims == nil {
		return
	}
	o.Claims = c.claims
	o.ClaimPositions = uint64(cfg.Coordination.ClaimPositions)
	for _, sc := range o.Secondaries {
		topo.ClaimedRecovery(sc.Name)
	}
}

// close ends the claims (their keys go with the session), hands off the
// node's membership and stops its member; a member that reaches quorum
// takes a backup first.
func (c *coordination) close(ctx context.Context) error {
	if c == nil {
		return nil
	}
	if c.stop != nil {
		c.stop()
	}
	c.wg.Wait()
	var errs []error
	if c.claims != nil {
		errs = append(errs, c.claims.Close())
	}
	if c.node != nil {
		errs = append(errs, c.node.Close(ctx))
	}
	errs = append(errs, c.closeBackup())
	return errors.Join(errs...)
}

func (c *coordination) closeBackup() error {
	if c.bk == nil {
		return nil
	}
	return c.bk.Close()
}

// memberPoll is how often the member list behind weir_coordination_member
// is read.
const memberPoll = 2 * time.Second

// watchMembers keeps weir_coordination_member{member,state} — 1 for each
// member in its state (leader, voter, learner, departed, unstarted) as
// this node last read it — for weir status and dashboards.
func (c *coordination) watchMembers(ctx context.Context, reg prometheus.Registerer) error {
	g := coord.NewMemberGauge()
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("coordination: metrics: %w", err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(memberPoll)
		defer t.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, memberPoll)
			st, err := c.node.Status(rctx)
			cancel()
			if err == nil {
				g.Reset()
				for _, ms := range st.Members {
					g.WithLabelValues(ms.Name, memberState(ms)).Set(1)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

func memberState(ms coord.MemberStatus) string {
	switch {
	case ms.Departed:
		return "departed"
	case !ms.Started:
		return "unstarted"
	case ms.Leader:
		return "leader"
	case ms.Learner:
		return "learner"
	}
	return "voter"
}
