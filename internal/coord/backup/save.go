package backup

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gocloud.dev/blob"

	"github.com/weir-io/weir/internal/vfs"
)

// Save streams a snapshot of the store cli talks to into the bucket, then
// points "latest" at it, then deletes all but the newest Keep snapshots.
// node names the saving node in the key and the pointer. On error "latest"
// still names the previous snapshot. When "latest" already names a snapshot
// of this cluster at a higher revision (another member saved meanwhile),
// Save deletes its own and returns that one's Info: the pointer never moves
// backwards.
func (s *Store) Save(ctx context.Context, cli *clientv3.Client, node string) (Info, error) {
	start := time.Now()
	info, err := s.save(ctx, cli, node)
	if errors.Is(err, errSuperseded) {
		s.log.Info("coordination backup not pointed to: a newer one is in place", "node", node, "err", err)
		return info, nil
	}
	if err != nil {
		s.m.failed.Inc()
		s.log.Warn("coordination backup failed", "node", node, "err", err)
		return Info{}, err
	}
	s.m.ok.Inc()
	s.m.last.Set(float64(info.Time.UnixNano()) / 1e9)
	s.m.bytes.Set(float64(info.Bytes))
	s.log.Info("coordination backup saved", "key", info.Key, "revision", info.Revision, "bytes", info.Bytes,
		"took", time.Since(start))
	if err := s.prune(ctx, info.Key); err != nil {
		s.log.Warn("coordination backup retention failed", "err", err)
	}
	return info, nil
}

// SaveHook returns a Save by node for the cluster code to call before a
// member stops.
func (s *Store) SaveHook(node string) func(ctx context.Context, cli *clientv3.Client) error {
	return func(ctx context.Context, cli *clientv3.Client) error {
		_, err := s.Save(ctx, cli, node)
		return err
	}
}

func (s *Store) save(ctx context.Context, cli *clientv3.Client, node string) (Info, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the snapshot stream on every return
	defer cancel()
	// The snapshot stream carries no revision: read the store's just before
	// (the snapshot holds at least this revision).
	cur, err := cli.Get(ctx, latestKey, clientv3.WithCountOnly())
	if err != nil {
		return Info{}, fmt.Errorf("backup: read revision: %w", err)
	}
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("backup: open snapshot stream: %w", err)
	}
	defer resp.Snapshot.Close()
	info := Info{Revision: cur.Header.Revision, Cluster: fmt.Sprintf("%x", cur.Header.ClusterId),
		Time: time.Now().UTC(), Node: node, EtcdVersion: resp.Version}
	info.Key = snapshotKey(info.Time, info.Revision, node)
	var src io.Reader = resp.Snapshot
	if len(s.Keys) > 0 {
		if src, err = newSealer(src, s.Keys[0]); err != nil {
			return Info{}, err
		}
		info.Key += sealedExt
		info.KeyID = KeyID(s.Keys[0])
	}
	h := sha256.New()
	if info.Bytes, err = s.put(ctx, info.Key, io.TeeReader(src, h)); err != nil {
		return Info{}, err
	}
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	// The pointer moves only forward: another member of this cluster
	// stopping at the same time may have pointed at a newer snapshot
	// meanwhile. (Another cluster's pointer — one restored, with a new
	// cluster id and its revisions moved forward, or one started afresh —
	// is replaced.)
	if cur, ok, err := s.Latest(ctx); err == nil && ok && cur.Cluster == info.Cluster && cur.Revision > info.Revision {
		if err := s.bucket.Delete(ctx, info.Key); err != nil {
			s.log.Warn("superseded coordination backup not deleted", "key", info.Key, "err", err)
		}
		return cur, fmt.Errorf("%w: %s holds revision %d, this one %d", errSuperseded, cur.Key, cur.Revision, info.Revision)
	}
	ptr, err := json.Marshal(info)
	if err != nil {
		return Info{}, fmt.Errorf("backup: encode pointer: %w", err)
	}
	if _, err := s.put(ctx, latestKey, bytes.NewReader(ptr)); err != nil {
		return Info{}, err
	}
	return info, nil
}

// put writes r to key. The object appears only if all of r was written:
// on a read or write error the upload is aborted (the writer's context
// cancelled before Close). In a directory the file is fsynced before it is
// renamed into place and its directory fsynced after.
func (s *Store) put(ctx context.Context, key string, r io.Reader) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var f *os.File
	w, err := s.bucket.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/octet-stream",
		BeforeWrite: func(as func(any) bool) error { as(&f); return nil }})
	if err != nil {
		return 0, fmt.Errorf("backup: write %s: %w", key, err)
	}
	n, err := io.Copy(w, r)
	if err == nil && f != nil {
		err = f.Sync()
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return n, fmt.Errorf("backup: write %s after %d bytes: %w", key, n, err)
	}
	if err := w.Close(); err != nil {
		return n, fmt.Errorf("backup: write %s: %w", key, err)
	}
	if s.localDir != "" {
		dir := filepath.Dir(filepath.Join(s.localDir, filepath.FromSlash(key)))
		err := vfs.OS.SyncDir(dir)
		if err == nil && dir != s.localDir {
			err = vfs.OS.SyncDir(s.localDir) // snapshots/ itself is an entry in the root
		}
		if err != nil {
			return n, fmt.Errorf("backup: write %s: %w", key, err)
		}
	}
	return n, nil
}

// prune deletes snapshots older than the newest Keep, never keep itself.
func (s *Store) prune(ctx context.Context, keep string) error {
	type snap struct {
		key   string
		nanos int64
	}
	var snaps []snap
	it := s.bucket.List(&blob.ListOptions{Prefix: snapshotPrefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("list snapshots: %w", err)
		}
		if nanos, ok := snapshotNanos(obj.Key); ok {
			snaps = append(snaps, snap{obj.Key, nanos})
		}
	}
	slices.SortFunc(snaps, func(a, b snap) int { return cmp.Compare(b.nanos, a.nanos) })
	for i, sn := range snaps {
		if i < max(s.Keep, 1) || sn.key == keep {
			continue
		}
		if err := s.bucket.Delete(ctx, sn.key); err != nil {
			return fmt.Errorf("delete %s: %w", sn.key, err)
		}
		s.log.Debug("old coordination backup deleted", "key", sn.key)
	}
	return nil
}

// Run saves a snapshot every interval while isLeader says this node should,
// until ctx ends. Failures are logged and counted, never fatal.
func (s *Store) Run(ctx context.Context, interval time.Duration, cli *clientv3.Client, node string, isLeader func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !isLeader() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, s.SaveTimeout)
		_, _ = s.Save(sctx, cli, node) // logged and counted by Save
		cancel()
	}
}

// snapshotKey is snapshots/<unix-nanos>-<revision>-<node>.db; characters of
// node that could make a path are replaced.
func snapshotKey(t time.Time, rev int64, node string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, node)
	return fmt.Sprintf("%s%019d-%d-%s%s", snapshotPrefix, t.UnixNano(), rev, safe, snapshotExt)
}

// snapshotNanos reads the time back from a key snapshotKey made; false for
// anything else (an upload's temporary file, a stranger's object).
func snapshotNanos(key string) (int64, bool) {
	name, ok := strings.CutPrefix(key, snapshotPrefix)
	name = strings.TrimSuffix(name, sealedExt)
	if !ok || !strings.HasSuffix(name, snapshotExt) || strings.Contains(name, "/") {
		return 0, false
	}
	digits, _, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	nanos, err := strconv.ParseInt(digits, 10, 64)
	return nanos, err == nil
}
