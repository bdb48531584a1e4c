package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// Errors a caller can tell apart with errors.Is.
var (
	// ErrScheme: the backup URL's scheme is neither file nor s3.
	ErrScheme = errors.New("backup: unsupported URL scheme")
	// ErrPointer: the "latest" object is not a pointer this package wrote.
	ErrPointer = errors.New("backup: bad latest pointer")
	// ErrChecksum: a downloaded snapshot's size or SHA-256 differs from its pointer.
	ErrChecksum = errors.New("backup: snapshot checksum mismatch")
	// ErrDataDirNotEmpty: Restore was asked to write into a data directory that holds something.
	ErrDataDirNotEmpty = errors.New("backup: data directory not empty")

	errSuperseded = errors.New("backup: a newer snapshot is already pointed to")
)

const (
	latestKey      = "latest"
	snapshotPrefix = "snapshots/"
	snapshotExt    = ".db"
)

// Info describes one stored snapshot; it is what the "latest" pointer holds.
type Info struct {
	Key         string    `json:"key"`               // object key, relative to the URL's prefix
	Revision    int64     `json:"revision"`          // the store's revision as the snapshot began (it holds at least this)
	Cluster     string    `json:"cluster,omitempty"` // etcd cluster id, hex
	Bytes       int64     `json:"bytes"`
	SHA256      string    `json:"sha256"` // hex, over the whole object
	Time        time.Time `json:"time"`
	Node        string    `json:"node"` // the node that took it
	EtcdVersion string    `json:"etcd_version,omitempty"`
	KeyID       string    `json:"key_id,omitempty"` // the key it is sealed with; "" for a plain snapshot
}

// Store is a backup location. Set its exported fields before first use.
type Store struct {
	// Keep is how many snapshots a successful Save leaves (default 5; at
	// least 1).
	Keep int
	// RevisionBump is added to the restored store's revision (default 1e9;
	// 0 keeps it), so revisions never go backwards across a restore.
	RevisionBump uint64
	// ClusterToken is the initial cluster token of a restored cluster.
	ClusterToken string
	// SaveTimeout bounds each save Run makes (default 10 minutes).
	SaveTimeout time.Duration
	// Keys encrypt backups (ParseKeys): the first seals new snapshots, any
	// opens old ones. With none, snapshots are stored plain.
	Keys [][]byte

	bucket   *blob.Bucket
	localDir string // the directory behind a file:// bucket, for fsync; "" for s3
	log      *slog.Logger
	m        *metrics
}

// Open opens the backup location at rawURL: file:///dir (created if absent)
// or s3://bucket/prefix with the query parameters gocloud.dev's s3blob takes
// (region, endpoint, use_path_style, …). A ?prefix= parameter is honoured for
// both. Metrics are registered on reg (nil: not registered). Open checks that
// the location can be listed.
func Open(ctx context.Context, rawURL string, log *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	b, localDir, err := openBucket(ctx, rawURL, true)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		b.Close()
		return nil, err
	}
	return &Store{Keep: 5, RevisionBump: 1e9, ClusterToken: "weir", SaveTimeout: 10 * time.Minute,
		bucket: b, localDir: localDir, log: log.With("component", "coord.backup"), m: m}, nil
}

// Probe checks the backup location at rawURL as Open does — the URL, the
// credentials, that the bucket can be listed — but writes nothing and
// creates no directory: a file:// directory that does not exist yet
// passes when the nearest existing directory above it could hold it
// (Open creates it). For weir validate --connect.
func Probe(ctx context.Context, rawURL string) error {
	if u, err := url.Parse(rawURL); err == nil && u.Scheme == fileblob.Scheme {
		dir := localPath(u)
		if p := u.Query().Get("prefix"); p != "" {
			dir = joinLocal(dir, strings.Trim(p, "/"))
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			for up := filepath.Dir(dir); ; up = filepath.Dir(up) {
				fi, err := os.Stat(up)
				if err == nil {
					if !fi.IsDir() {
						return fmt.Errorf("backup: %s: %s is not a directory", u.Redacted(), up)
					}
					return nil
				}
				if !errors.Is(err, fs.ErrNotExist) || up == filepath.Dir(up) {
					return fmt.Errorf("backup: %s: %w", u.Redacted(), err)
				}
			}
		}
	}
	b, _, err := openBucket(ctx, rawURL, false)
	if err != nil {
		return err
	}
	return b.Close()
}

// openBucket opens the bucket of rawURL (see Open) and checks that it can
// be listed; with create, a file:// directory is created when missing.
// The second result is the directory behind a file:// bucket.
func openBucket(ctx context.Context, rawURL string, create bool) (*blob.Bucket, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("backup: parse URL: %w", err)
	}
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	var b *blob.Bucket
	var localDir string
	switch u.Scheme {
	case fileblob.Scheme:
		if u.Host != "" && u.Host != "." && u.Host != "localhost" {
			// file://var/lib/x would quietly mean /lib/x
			return nil, "", fmt.Errorf("backup: file URL %q names host %q: want file:///absolute/dir or file://./relative/dir",
				u.Redacted(), u.Host)
		}
		b, localDir, err = openFile(ctx, u, q, create)
	case s3blob.Scheme:
		prefix = strings.Trim(u.Path, "/") + "/" + prefix
		b, err = openS3(ctx, u, q)
	default:
		return nil, "", fmt.Errorf("%w %q in %q: want file:// or s3://", ErrScheme, u.Scheme, u.Redacted())
	}
	if err != nil {
		return nil, "", fmt.Errorf("backup: open %s: %w", u.Redacted(), err)
	}
	if prefix = strings.TrimLeft(prefix, "/"); prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		b = blob.PrefixedBucket(b, prefix)
		localDir = joinLocal(localDir, prefix)
	}
	if ok, err := b.IsAccessible(ctx); err != nil || !ok {
		b.Close()
		if err == nil {
			err = errors.New("bucket does not exist")
		}
		return nil, "", fmt.Errorf("backup: %s not accessible: %w", u.Redacted(), err)
	}
	return b, localDir, nil
}

// openFile opens a directory bucket, creating the directory, writing its
// temporary files beside their targets (a rename from os.TempDir would fail
// across file systems) and without metadata sidecar files, unless the URL
// says otherwise.
func openFile(ctx context.Context, u *url.URL, q url.Values, create bool) (*blob.Bucket, string, error) {
	defaults := map[string]string{"no_tmp_dir": "1", "metadata": "skip"}
	if create {
		defaults["create_dir"] = "1"
	}
	for k, v := range defaults {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	v := *u
	v.RawQuery = q.Encode()
	b, err := (&fileblob.URLOpener{}).OpenBucketURL(ctx, &v)
	return b, localPath(u), err
}

// localPath is the directory a file:// URL names.
func localPath(u *url.URL) string {
	dir := u.Path
	if u.Host == "." { // file://./rel: a relative directory
		dir = strings.TrimPrefix(dir, "/")
	}
	return filepath.Clean(filepath.FromSlash(dir))
}

// openS3 opens an S3 bucket named by the URL's host; the path is the prefix.
func openS3(ctx context.Context, u *url.URL, q url.Values) (*blob.Bucket, error) {
	v := *u
	v.Path, v.RawPath = "", ""
	v.RawQuery = q.Encode()
	return (&s3blob.URLOpener{}).OpenBucketURL(ctx, &v)
}

func joinLocal(dir, prefix string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, filepath.FromSlash(prefix))
}

// Latest reads the pointer to the newest complete snapshot; false when there
// is none.
func (s *Store) Latest(ctx context.Context) (Info, bool, error) {
	data, err := s.bucket.ReadAll(ctx, latestKey)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, fmt.Errorf("backup: read %s: %w", latestKey, err)
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return Info{}, false, fmt.Errorf("%w: %v", ErrPointer, err)
	}
	if err := info.check(); err != nil {
		return Info{}, false, err
	}
	return info, true, nil
}

// check refuses a pointer that names no snapshot of ours or carries no hash.
func (i Info) check() error {
	if !strings.HasPrefix(i.Key, snapshotPrefix) || strings.Contains(i.Key, "..") ||
		!strings.HasSuffix(strings.TrimSuffix(i.Key, sealedExt), snapshotExt) {
		return fmt.Errorf("%w: key %q", ErrPointer, i.Key)
	}
	if len(i.SHA256) != 64 || i.Bytes <= 0 {
		return fmt.Errorf("%w: sha256 %q, %d bytes", ErrPointer, i.SHA256, i.Bytes)
	}
	return nil
}

// Close closes the bucket.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("backup: close: %w", err)
	}
	return nil
}

type metrics struct {
	ok, failed prometheus.Counter
	last       prometheus.Gauge
	bytes      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_coordination_backups_total",
		Help: "Coordination store snapshots saved to the backup location, by result (ok, error)."}, []string{"result"})
	last := prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_coordination_backup_last_success_timestamp_seconds",
		Help: "Unix time of the last snapshot saved and pointed to (0: none by this process)."})
	size := prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_coordination_backup_bytes",
		Help: "Size of the last snapshot saved."})
	if reg != nil {
		for _, c := range []prometheus.Collector{total, last, size} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("backup: register metrics: %w", err)
			}
		}
	}
	return &metrics{ok: total.WithLabelValues("ok"), failed: total.WithLabelValues("error"), last: last, bytes: size}, nil
}
