package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weir-io/weir/internal/vfs"
)

// RestoreHook returns the function the cluster code calls when it would
// bootstrap with an empty data directory: it restores the latest snapshot
// there and reports true, or reports false when there is no backup.
func (s *Store) RestoreHook() func(ctx context.Context, dataDir, name, peerURL string) (bool, error) {
	return func(ctx context.Context, dataDir, name, peerURL string) (bool, error) {
		info, ok, err := s.Latest(ctx)
		if err != nil || !ok {
			return false, err
		}
		if err := s.Restore(ctx, info, dataDir, name, peerURL); err != nil {
			return false, err
		}
		return true, nil
	}
}

// Restore builds in dataDir, which must be absent or empty, the data
// directory of a new single-member cluster — member name, advertising
// peerURL — holding the snapshot info names, after checking its size and
// SHA-256 against info.
func (s *Store) Restore(ctx context.Context, info Info, dataDir, name, peerURL string) error {
	if err := info.check(); err != nil {
		return err
	}
	dataDir = filepath.Clean(dataDir)
	if err := absentOrEmpty(dataDir); err != nil {
		return err
	}
	parent := filepath.Dir(dataDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("backup: restore: %w", err)
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(dataDir)+".restore-")
	if err != nil {
		return fmt.Errorf("backup: restore: %w", err)
	}
	defer os.RemoveAll(stage)
	obj, db := filepath.Join(stage, "object"), filepath.Join(stage, "snapshot.db")
	if err := s.download(ctx, info, obj); err != nil {
		return err
	}
	if err := s.open(obj, db); err != nil {
		return fmt.Errorf("backup: restore %s: %w", info.Key, err)
	}
	out := filepath.Join(stage, "data")
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: db, Name: name, OutputDataDir: out,
		PeerURLs: []string{peerURL}, InitialCluster: name + "=" + peerURL, InitialClusterToken: s.ClusterToken,
		RevisionBump: s.RevisionBump, MarkCompacted: s.RevisionBump > 0,
	})
	if err != nil {
		return fmt.Errorf("backup: restore %s: %w", info.Key, err)
	}
	// rename(2) replaces an empty directory and refuses one that filled
	// meanwhile (os.Rename refuses any existing directory).
	if err := unix.Rename(out, dataDir); err != nil {
		return fmt.Errorf("backup: restore: move into place: %w", err)
	}
	if err := vfs.OS.SyncDir(parent); err != nil {
		return fmt.Errorf("backup: restore: %w", err)
	}
	s.log.Info("coordination store restored from backup", "key", info.Key, "revision", info.Revision,
		"taken", info.Time, "by", info.Node, "data_dir", dataDir, "member", name)
	return nil
}

// download copies the snapshot to path, refusing it unless it matches info.
func (s *Store) download(ctx context.Context, info Info, path string) error {
	r, err := s.bucket.NewReader(ctx, info.Key, nil)
	if err != nil {
		return fmt.Errorf("backup: read %s: %w", info.Key, err)
	}
	defer r.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("backup: download: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backup: download %s: %w", info.Key, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != info.Bytes || sum != info.SHA256 {
		return fmt.Errorf("%w: %s is %d bytes, sha256 %s; the pointer says %d bytes, sha256 %s",
			ErrChecksum, info.Key, n, sum, info.Bytes, info.SHA256)
	}
	return nil
}

// open writes to db the snapshot in the downloaded object obj: unsealed
// with the configured keys when sealed, as it is when plain. A plain one is
// refused while keys are configured: the pointer is not authenticated, so
// whoever can write the bucket could otherwise substitute any snapshot.
func (s *Store) open(obj, db string) error {
	in, err := os.Open(obj)
	if err != nil {
		return err
	}
	defer in.Close()
	r := bufio.NewReaderSize(in, sealChunk)
	if !isSealed(r) {
		in.Close()
		if len(s.Keys) > 0 {
			return fmt.Errorf("%w: restore it with no key configured, or take a new backup first", ErrPlain)
		}
		return os.Rename(obj, db)
	}
	out, err := os.OpenFile(db, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unseal(out, r, s.Keys)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// absentOrEmpty refuses a data directory that holds anything.
func absentOrEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("backup: restore: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: %s holds %s", ErrDataDirNotEmpty, dir, entries[0].Name())
	}
	return nil
}
