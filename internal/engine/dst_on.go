//go:build dst

package engine

import "sync/atomic"

// DSTBreakCoverEarly, in the simulation build only (build tag dst), makes
// every secondary cover a chunk before its commit instead of after the
// sink's ack: a deliberately broken fan-out that the whole-engine
// simulation must catch (internal/sim, TestEngineSimCatches).
var DSTBreakCoverEarly atomic.Bool

func dstCoverEarly() bool { return DSTBreakCoverEarly.Load() }
