package daemon

import (
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
)

// sinkDirPerm is the mode the directory sinks (file, parquet) give the
// directories they create.
const sinkDirPerm = 0o750

// makeDirs creates every directory a node with a write-ahead buffer
// opens at start — wab_dir, the drain's dead-letter lane, the [sink]'s and
// each [[secondary]]'s directory and quarantine_dir — before the buffer
// opens (the dq-audit directory is opened before it already; the gates'
// quarantine lanes only when first written). The buffer's shards reserve
// their first segments as they start, and on a nearly full disk those
// reservations may take every block left: a directory made afterwards
// could fail with ENOSPC and stop the start, where a node that cannot
// reserve must still start and answer DiskFull to what does not fit.
//
// Only the buffer's own directories are required: a sink's directory that
// cannot be made now (a mount not there yet, read-only) is logged and
// left to the sink, which opens in the background and is retried until
// it can (pendingSink) — a missing sink must not stop the start.
func makeDirs(fs vfs.FS, cfg *config.Config, log *slog.Logger) error {
	if err := fs.MkdirAll(cfg.WABDir, 0o700); err != nil {
		return fmt.Errorf("create wab_dir: %w", err)
	}
	if err := drain.PrepareDirs(fs, cfg.WABDir); err != nil {
		return err
	}
	sinks := []config.SinkConfig{cfg.Sink}
	for _, sc := range cfg.Secondaries {
		sinks = append(sinks, sc.Sink)
		if sc.QuarantinePostgresURL == "" && sc.QuarantineMaxBytes > 0 && sc.QuarantineDir != "" { // as openQuarantine opens it
			if err := fs.MkdirAll(sc.QuarantineDir, 0o700); err != nil {
				log.Warn("cannot create a secondary's quarantine_dir now; its lane opens it at start of the fan-out", "secondary", sc.Name, "dir", sc.QuarantineDir, "err", err)
			}
		}
	}
	for _, sc := range sinks {
		if dir := cfg.SinkDir(sc); dir != "" {
			if err := fs.MkdirAll(dir, sinkDirPerm); err != nil {
				log.Warn("cannot create a sink's directory now; the sink retries when it opens", "sink", sc.Type, "dir", dir, "err", err)
			}
		}
	}
	return nil
}
