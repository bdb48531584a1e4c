//go:build faultinject

package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
)

// FaultsEnv names the errorfs spec a faultinject build reads at start. It
// exists only in test builds: production binaries have no way to inject
// faults.
const FaultsEnv = "WEIR_FAULTS"

// faultFS wraps fs with the rules in $WEIR_FAULTS. Every injected fault is
// logged ("fault injected"; a call held by a delay rule, "fault delayed"),
// and so is any fdatasync of a file whose
// fdatasync failed before ("fdatasync retried after failure"), so system
// tests can assert from the outside that weir never retries one.
func faultFS(fs vfs.FS) (vfs.FS, error) {
	spec := os.Getenv(FaultsEnv)
	if spec == "" {
		return fs, nil
	}
	efs, err := errorfs.ParseFS(fs, spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FaultsEnv, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "errorfs")
	var mu sync.Mutex
	failedSync := map[string]bool{}
	efs.SetHook(func(e errorfs.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Op == errorfs.OpSync {
			if failedSync[e.Path] {
				log.Error("fdatasync retried after failure", "path", e.Path)
			}
			if e.Err != nil {
				failedSync[e.Path] = true
			}
		}
		switch {
		case e.Injected:
			log.Warn("fault injected", "op", e.Op.String(), "path", e.Path, "err", e.Err)
		case e.Delayed > 0:
			log.Info("fault delayed", "op", e.Op.String(), "path", e.Path, "delay", e.Delayed, "err", e.Err)
		}
	})
	log.Warn("fault injection active", "spec", spec)
	return efs, nil
}
