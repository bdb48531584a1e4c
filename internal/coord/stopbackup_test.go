package coord

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weir-io/weir/internal/coord/backup"
)

// backedThree grows a three-member cluster whose members back up to one
// directory when they stop, logging each backup's size and time.
func backedThree(t *testing.T, rec *recorder) ([]*tnode, *backup.Store) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	bk, err := backup.Open(ctx, "file://"+filepath.Join(t.TempDir(), "backups"), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	cfg := func(name string, join ...string) Config {
		c := testConfig(t, rec, name, 3, join...)
		c.BeforeStop = func(ctx context.Context, cli *clientv3.Client) error {
			start := time.Now()
			info, err := bk.Save(ctx, cli, name)
			t.Logf("%s: backup at stop: revision %d, %d bytes, took %v, err %v", name, info.Revision, info.Bytes, time.Since(start), err)
			return err
		}
		return c
	}
	n0 := start(t, rec, cfg("weir-0"))
	n1 := start(t, rec, cfg("weir-1", n0.cfg.ClientListen))
	n2 := start(t, rec, cfg("weir-2", n0.cfg.ClientListen))
	all := []*tnode{n0, n1, n2}
	waitVoters(t, n0.Node, "weir-0", "weir-1", "weir-2")
	for _, n := range all {
		eventually(t, 10*time.Second, n.cfg.Node+" holds quorum", func() bool { return n.Role() == RoleVoter })
	}
	return all, bk
}

// write puts a key through n and returns the revision it committed at.
func write(t *testing.T, n *tnode, key string) int64 {
	t.Helper()
	resp, err := n.Client().Put(ctxT(t, 5*time.Second), key, "v")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func latestRevision(t *testing.T, bk *backup.Store) int64 {
	t.Helper()
	info, ok, err := bk.Latest(ctxT(t, 5*time.Second))
	if err != nil || !ok {
		t.Fatalf("latest backup: %v, %v", ok, err)
	}
	return info.Revision
}

func closeAll(t *testing.T, nodes ...*tnode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { closeNode(t, n.Node) })
	}
	wg.Wait()
}

// Every member stopped at once (a deployment scaled to zero): nobody is
// the last one standing, yet a backup holds every write made before.
func TestAllStopAtOnceBackup(t *testing.T) {
	rec := &recorder{}
	nodes, bk := backedThree(t, rec)
	var last int64
	for _, n := range nodes {
		last = write(t, n, "k/"+n.cfg.Node)
	}
	closeAll(t, nodes...)
	if got := latestRevision(t, bk); got < last {
		t.Fatalf("latest backup at revision %d; the last write before the stops was at %d", got, last)
	}
}

// Members stopped one by one: each that still reaches quorum backs up, so
// the backup holds every write made before the last of them stopped.
func TestOneByOneStopBackup(t *testing.T) {
	rec := &recorder{}
	nodes, bk := backedThree(t, rec)
	write(t, nodes[0], "k/a")
	closeNode(t, nodes[2].Node)
	last := write(t, nodes[0], "k/b")
	closeNode(t, nodes[1].Node)
	if got := latestRevision(t, bk); got < last {
		t.Fatalf("latest backup at revision %d; the last write before the second stop was at %d", got, last)
	}
	closeNode(t, nodes[0].Node) // no quorum left: skips its backup
	if got := latestRevision(t, bk); got < last {
		t.Fatalf("latest backup moved back to revision %d, below %d", got, last)
	}
}

// A crashed member still counts in the membership: the two live ones
// stopped at once still leave a backup of every write.
func TestCrashedThenAllStopBackup(t *testing.T) {
	rec := &recorder{}
	nodes, bk := backedThree(t, rec)
	crash(t, nodes[2].Node)
	last := write(t, nodes[0], "k/a")
	closeAll(t, nodes[0], nodes[1])
	if got := latestRevision(t, bk); got < last {
		t.Fatalf("latest backup at revision %d; the last write before the stops was at %d", got, last)
	}
}
