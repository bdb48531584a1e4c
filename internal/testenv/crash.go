package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// ReadBack reads a destination for sinktest.
type ReadBack = func(context.Context) ([]sinktest.Stored, error)

// SinkFS is where the conformance harness of a sink on the file-system seam
// puts its directory: on memfs (mem), which can lose power, or in a
// temporary directory on the real file system, which cannot (m is nil).
// wrap, when set, wraps the memfs the sink sees (to break it).
func SinkFS(t *testing.T, mem bool, wrap func(vfs.FS) vfs.FS) (m *memfs.FS, fs vfs.FS, dir string) {
	if !mem {
		return nil, vfs.OS, t.TempDir()
	}
	m = memfs.New()
	fs = m
	if wrap != nil {
		fs = wrap(m)
	}
	return m, fs, "/sink"
}

// SetMemCrash gives h its Crash hook for a sink writing to m: a power loss
// that keeps only what was synced (memfs.CrashDropUnsynced); reopen opens
// the sink on the crashed file system and readBack reads it. Without m
// (the real file system) h says why it cannot crash.
func SetMemCrash(h *sinktest.Harness, m *memfs.FS, reopen func(*testing.T, vfs.FS) sink.Sink, readBack func(vfs.FS) ReadBack) {
	if m == nil {
		h.NoCrash = "the real file system cannot lose power in a test (the memfs variant does)"
		return
	}
	h.Crash = func(*testing.T) sinktest.Crashed {
		after := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
		return sinktest.Crashed{
			ReadBack: readBack(after),
			Reopen:   func(t *testing.T) sink.Sink { return reopen(t, after) },
		}
	}
}

// KillCrash is a sinktest Crash hook for a database sink: kill ends the
// sink's connections from the server side and says how many it ended (none
// is an error: nothing was crashed); readBack and reopen connect afresh.
func KillCrash(kill func(context.Context) (int, error), readBack ReadBack, reopen func(*testing.T) sink.Sink) func(*testing.T) sinktest.Crashed {
	return func(t *testing.T) sinktest.Crashed {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n, err := kill(ctx); err != nil || n == 0 {
			t.Fatalf("crash: ended %d connections of the sink: %v", n, err)
		}
		return sinktest.Crashed{ReadBack: readBack, Reopen: reopen}
	}
}
