package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/testenv"
)

// roundTrip saves a seeded store into s, restores the latest snapshot
// through RestoreHook into a new data directory, starts etcd on it and
// checks every key came back, with the revision moved forward.
func roundTrip(t *testing.T, s *Store) {
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	seed(t, cli, 50, "a")
	want, _ := keys(t, cli)
	info, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if info.Bytes <= 0 || info.Revision <= 0 || !strings.HasPrefix(info.Key, "snapshots/") {
		t.Fatalf("Save returned %+v", info)
	}
	latest, ok, err := s.Latest(ctx)
	if err != nil || !ok || latest.Key != info.Key || latest.SHA256 != info.SHA256 {
		t.Fatalf("Latest = %+v, %v, %v; want %+v", latest, ok, err, info)
	}
	dir, peer := filepath.Join(t.TempDir(), "member-data"), freePeer(t)
	restored, err := s.RestoreHook()(ctx, dir, "weir-1", peer)
	if err != nil || !restored {
		t.Fatalf("RestoreHook = %v, %v", restored, err)
	}
	got, rev := keys(t, startRestored(t, dir, "weir-1", peer))
	if !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d: %v", len(got), len(want), got)
	}
	if rev < info.Revision+int64(s.RevisionBump) {
		t.Fatalf("restored revision %d, want at least %d + bump %d", rev, info.Revision, s.RevisionBump)
	}
}

func TestFileRoundTrip(t *testing.T) {
	s, reg := openStore(t, fileURL(t))
	roundTrip(t, s)
	if v := testenv.Metric(t, reg, "weir_coordination_backups_total", map[string]string{"result": "ok"}); v != 1 {
		t.Fatalf("backups ok = %v, want 1", v)
	}
	if v := testenv.Metric(t, reg, "weir_coordination_backup_bytes", nil); v <= 0 {
		t.Fatalf("backup bytes = %v", v)
	}
	if v := testenv.Metric(t, reg, "weir_coordination_backup_last_success_timestamp_seconds", nil); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last success = %v", v)
	}
}

func TestS3RoundTrip(t *testing.T) {
	rawURL, _ := fakeS3(t, "cluster-a/coord")
	s, _ := openStore(t, rawURL)
	roundTrip(t, s)
	// The URL's path is the prefix: a store opened one level up sees the
	// objects beneath it.
	up, _ := openStore(t, strings.Replace(rawURL, "cluster-a/coord", "cluster-a", 1))
	if _, err := up.bucket.Attributes(testCtx(t), "coord/latest"); err != nil {
		t.Fatalf("latest not under the URL's prefix: %v", err)
	}
}

func TestRestoreHookWithoutBackup(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	dir := filepath.Join(t.TempDir(), "data")
	restored, err := s.RestoreHook()(testCtx(t), dir, "weir-0", freePeer(t))
	if err != nil || restored {
		t.Fatalf("RestoreHook on an empty bucket = %v, %v; want false, nil", restored, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir touched: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, u := range []string{"gs://bucket/x", "mem://", "/var/lib/weir/backup", "azblob://c"} {
		if _, err := Open(testCtx(t), u, testLog(), nil); !errors.Is(err, ErrScheme) {
			t.Errorf("Open(%q) = %v, want ErrScheme", u, err)
		}
	}
	// Two slashes: "var" would be a host and the directory /lib/weir/backup.
	if _, err := Open(testCtx(t), "file://var/lib/weir/backup", testLog(), nil); err == nil ||
		!strings.Contains(err.Error(), "names host") {
		t.Errorf("Open of a file URL with a host = %v, want refused", err)
	}
	// A relative directory is fine, and created.
	t.Chdir(t.TempDir())
	s, err := Open(testCtx(t), "file://./rel/backups", testLog(), nil)
	if err != nil {
		t.Fatalf("Open of a relative file URL: %v", err)
	}
	defer s.Close()
	if s.localDir != "rel/backups" {
		t.Errorf("local directory %q, want rel/backups", s.localDir)
	}
	if _, err := os.Stat("rel/backups"); err != nil {
		t.Errorf("directory not created: %v", err)
	}
}

// TestFailedUploadKeepsLatest breaks the second snapshot's upload midway
// (the S3 server drops the connection after a KiB of the body): Save fails,
// "latest" still names the first snapshot, which still restores.
func TestFailedUploadKeepsLatest(t *testing.T) {
	rawURL, broken := fakeS3(t, "")
	s, reg := openStore(t, rawURL)
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	seed(t, cli, 20, "first")
	want, _ := keys(t, cli)
	first, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	seed(t, cli, 20, "second")
	broken.Store(true)
	if _, err := s.Save(ctx, cli, "weir-0"); err == nil {
		t.Fatal("Save through a broken upload succeeded")
	}
	// A cancelled save fails too, before anything is written.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Save(cctx, cli, "weir-0"); err == nil {
		t.Fatal("Save with a cancelled context succeeded")
	}
	broken.Store(false)
	latest, ok, err := s.Latest(ctx)
	if err != nil || !ok || latest != first {
		t.Fatalf("Latest = %+v, %v, %v; want the first snapshot %+v", latest, ok, err, first)
	}
	if got := snapshotKeys(t, s); !slices.Equal(got, []string{first.Key}) {
		t.Fatalf("snapshots = %v, want only %s", got, first.Key)
	}
	if v := testenv.Metric(t, reg, "weir_coordination_backups_total", map[string]string{"result": "error"}); v != 2 {
		t.Fatalf("backups error = %v, want 2", v)
	}
	dir, peer := filepath.Join(t.TempDir(), "data"), freePeer(t)
	if err := s.Restore(ctx, latest, dir, "weir-0", peer); err != nil {
		t.Fatal(err)
	}
	if got, _ := keys(t, startRestored(t, dir, "weir-0", peer)); !maps.Equal(got, want) {
		t.Fatalf("restored %v, want the first generation %v", got, want)
	}
}

// TestRestoreRefusesChecksumMismatch: a pointer whose hash does not match
// the object, and an object changed under its pointer, are both refused
// and leave no data directory.
func TestRestoreRefusesChecksumMismatch(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	seed(t, cli, 5, "a")
	info, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	wrong := info
	wrong.SHA256 = strings.Repeat("0", 64)
	if err := s.Restore(ctx, wrong, dir, "weir-0", freePeer(t)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Restore with a wrong hash = %v, want ErrChecksum", err)
	}
	data, err := s.bucket.ReadAll(ctx, info.Key)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff // same size, one byte flipped
	if err := s.bucket.WriteAll(ctx, info.Key, data, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, info, dir, "weir-0", freePeer(t)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Restore of a changed object = %v, want ErrChecksum", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 0 {
		t.Fatalf("refused restores left %v behind", entries)
	}
}

func TestRestoreRefusesNonEmptyDir(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	info, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep-me"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, info, dir, "weir-0", freePeer(t)); !errors.Is(err, ErrDataDirNotEmpty) {
		t.Fatalf("Restore into a non-empty dir = %v, want ErrDataDirNotEmpty", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "keep-me")); err != nil || string(b) != "x" {
		t.Fatalf("existing file disturbed: %q, %v", b, err)
	}
	// An empty existing directory is fine.
	empty := t.TempDir()
	if err := s.Restore(ctx, info, empty, "weir-0", freePeer(t)); err != nil {
		t.Fatalf("Restore into an empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, "member", "snap", "db")); err != nil {
		t.Fatalf("no etcd data in the restored dir: %v", err)
	}
}

func TestRetentionKeepsNewest(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	s.Keep = 2
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	var saved []string
	for i := range 4 {
		seed(t, cli, 1, string(rune('a'+i)))
		info, err := s.Save(ctx, cli, "weir-0")
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, info.Key)
	}
	if got := snapshotKeys(t, s); !slices.Equal(got, saved[2:]) {
		t.Fatalf("snapshots after 4 saves with Keep 2 = %v, want %v", got, saved[2:])
	}
	if latest, _, _ := s.Latest(ctx); latest.Key != saved[3] {
		t.Fatalf("latest = %s, want %s", latest.Key, saved[3])
	}
}

// TestRunSavesOnlyAsLeader: while isLeader says no, ticks pass without a
// snapshot; once it says yes, Run saves; Run returns when its context ends.
func TestRunSavesOnlyAsLeader(t *testing.T) {
	s, reg := openStore(t, fileURL(t))
	cli := etcdtest.Start(t).Client(t)
	var leader atomic.Bool
	var asked atomic.Int64
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, 20*time.Millisecond, cli, "weir-0", func() bool { asked.Add(1); return leader.Load() })
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return asked.Load() >= 5 })
	if keys := snapshotKeys(t, s); len(keys) != 0 || testenv.Metric(t, reg, "weir_coordination_backups_total", map[string]string{"result": "ok"}) != 0 {
		t.Fatalf("a follower saved: %v", keys)
	}
	leader.Store(true)
	waitFor(t, func() bool { _, ok, _ := s.Latest(testCtx(t)); return ok })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if v := testenv.Metric(t, reg, "weir_coordination_backups_total", map[string]string{"result": "ok"}); v < 1 {
		t.Fatalf("backups ok = %v", v)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSnapshotStreamCutKeepsLatest loses the etcd server in the middle of
// the snapshot stream (a proxy drops the connection after 128 KiB): the
// partial snapshot is aborted, not stored, and "latest" is unchanged.
func TestSnapshotStreamCutKeepsLatest(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	ctx := testCtx(t)
	srv := etcdtest.Start(t)
	proxy := startCutProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"), 128<<10)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	big := strings.Repeat("x", 16<<10)
	for i := range 40 { // a snapshot of well over 640 KiB
		if _, err := cli.Put(ctx, fmt.Sprintf("k/%03d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	if first.Bytes < 512<<10 {
		t.Fatalf("snapshot of %d bytes is too small to cut midway", first.Bytes)
	}
	proxy.arm()
	if _, err := s.Save(ctx, cli, "weir-0"); err == nil {
		t.Fatal("Save over a cut snapshot stream succeeded")
	}
	if latest, ok, err := s.Latest(ctx); err != nil || !ok || latest != first {
		t.Fatalf("Latest = %+v, %v, %v; want the first snapshot %+v", latest, ok, err, first)
	}
	if got := snapshotKeys(t, s); !slices.Equal(got, []string{first.Key}) {
		t.Fatalf("snapshots = %v, want only %s", got, first.Key)
	}
	entries, err := os.ReadDir(filepath.Join(s.localDir, "snapshots"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("snapshot directory holds %v (%v): a partial upload was left behind", entries, err)
	}
}

// The pointer moves only forward: a save at a lower revision of the same
// cluster than "latest" names leaves it, and deletes its own snapshot.
func TestPointerOnlyForward(t *testing.T) {
	s, _ := openStore(t, fileURL(t))
	ctx := testCtx(t)
	cli := etcdtest.Start(t).Client(t)
	first, err := s.Save(ctx, cli, "weir-0")
	if err != nil {
		t.Fatal(err)
	}
	ahead := first
	ahead.Revision += 1000
	ptr, _ := json.Marshal(ahead)
	if err := s.bucket.WriteAll(ctx, latestKey, ptr, nil); err != nil {
		t.Fatal(err)
	}
	seed(t, cli, 3, "b")
	got, err := s.Save(ctx, cli, "weir-1")
	if err != nil || got.Revision != ahead.Revision {
		t.Fatalf("Save behind the pointer = %+v, %v; want the pointer's snapshot", got, err)
	}
	if latest, _, _ := s.Latest(ctx); latest.Revision != ahead.Revision {
		t.Fatalf("pointer moved back to revision %d", latest.Revision)
	}
	if keys := snapshotKeys(t, s); len(keys) != 1 || keys[0] != first.Key {
		t.Fatalf("snapshots %v: want only %s", keys, first.Key)
	}
}
