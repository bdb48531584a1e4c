//go:build dst

package wab

// Hooks for the deterministic simulation tests (dst_test.go), compiled only
// with -tags dst. A normal build gets the empty versions in
// flusher_nodst.go instead, so none of this exists in production.

import (
	"sync"
	"sync/atomic"

	"github.com/weir-io/weir/internal/vfs"
)

const dstBuild = true

var (
	// dstBrokenAckBeforeSync deliberately breaks the flusher: Durable
	// requests are acknowledged before fdatasync. Only tests that prove
	// the simulation catches it turn it on.
	dstBrokenAckBeforeSync atomic.Bool
	// dstBrokenSkipDirSync deliberately breaks segment creation: the
	// directory fsync of a new segment is skipped.
	dstBrokenSkipDirSync atomic.Bool
	// dstBrokenTailBeforeSync deliberately breaks the readable tail: a
	// batch's Durable records are published to the drain once written,
	// before fdatasync.
	dstBrokenTailBeforeSync atomic.Bool

	// dstSteppers maps a Log's vfs.FS to the dstStepper that schedules its
	// flushers. A Log whose FS is not registered runs freely.
	dstSteppers sync.Map
)

// dstStepper schedules flushers. park is called by a shard's flusher when it
// starts (before it prepares its first segment) and at the top of its loop,
// before it takes its next request (so after each batch and everything that
// follows the acknowledgements: sealing, preparing the next segment,
// extending the reservation). It returns when the flusher may take one more
// step.
// exited is called when a shard's flusher returns.
type dstStepper interface {
	park(shard int)
	exited(shard int)
}

// dstInliner is a dstStepper that lets a lone request be written inline:
// inline reports whether the scheduler still runs one goroutine at a time
// (its flushers parked), so that the caller may write in the flusher's
// place.
type dstInliner interface {
	inline(shard int) bool
}

// dstWriteInline is writeInline under the simulation: the shard's flusher
// is parked at the top of its loop, holding own, and the scheduler runs
// nothing else, so the submitting goroutine writes req in its place when
// the shard is idle — the state in which a real flusher waits for work
// with own free — with the same code (inlineBatch).
func (s *shard) dstWriteInline(req *Request) bool {
	v, ok := dstSteppers.Load(s.l.fs)
	if !ok {
		return false
	}
	in, ok := v.(dstInliner)
	if !ok || s.queuedBytes.Load() != 0 || s.holding() || !in.inline(s.id) {
		return false
	}
	s.inlineBatch(req)
	return true
}

func (s *shard) dstStep() {
	if v, ok := dstSteppers.Load(s.l.fs); ok {
		v.(dstStepper).park(s.id)
	}
}

func (s *shard) dstExit() {
	if v, ok := dstSteppers.Load(s.l.fs); ok {
		v.(dstStepper).exited(s.id)
	}
}

// dstSyncWatch, when set, is called just before every batch's fdatasync
// (the harness checks the readable tail there: the moment a batch is
// written and not yet synced).
var dstSyncWatch atomic.Pointer[func()]

// dstBeforeSync runs just before a batch's fdatasync.
func dstBeforeSync(batch []*Request) {
	if w := dstSyncWatch.Load(); w != nil {
		(*w)()
	}
	if !dstBrokenAckBeforeSync.Load() {
		return
	}
	for _, r := range batch {
		if r != nil && r.Durability == Durable {
			r.Done(nil)
			r.Done = func(error) {}
		}
	}
}

func dstSkipNewSegmentDirSync() bool { return dstBrokenSkipDirSync.Load() }

func dstTailBeforeSync() bool { return dstBrokenTailBeforeSync.Load() }

// DSTScheduler schedules a Log's flushers from outside the package: the
// whole-engine simulation (internal/sim) registers one for the FS of the
// node it boots, with SetDSTScheduler, before Open. Park is called by a
// shard's flusher when it starts and at the top of its loop (see
// dstStepper) and returns when the flusher may take one more step; Exited
// when it returns. Inline answers SubmitInline: true lets the caller write
// a lone request in the place of the shard's flusher, which must then be
// parked (see dstInliner). Simulation build only.
type DSTScheduler interface {
	Park(shard int)
	Exited(shard int)
	Inline(shard int) bool
}

type dstExternal struct{ s DSTScheduler }

func (d dstExternal) park(shard int)        { d.s.Park(shard) }
func (d dstExternal) exited(shard int)      { d.s.Exited(shard) }
func (d dstExternal) inline(shard int) bool { return d.s.Inline(shard) }

// SetDSTScheduler schedules the flushers of every Log opened on fs with s
// until the returned function is called.
func SetDSTScheduler(fs vfs.FS, s DSTScheduler) (unset func()) {
	dstSteppers.Store(fs, dstExternal{s})
	return func() { dstSteppers.Delete(fs) }
}
