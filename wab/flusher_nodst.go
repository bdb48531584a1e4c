//go:build !dst

package wab

// dstBuild is false in every normal build: the hooks the deterministic
// simulation tests use (flusher_dst.go) compile to nothing, and the guarded
// branches in flusher.go are removed as dead code.
const dstBuild = false

func (s *shard) dstStep()            {}
func (s *shard) dstExit()            {}
func dstBeforeSync([]*Request)       {}
func dstSkipNewSegmentDirSync() bool { return false }
func dstTailBeforeSync() bool        { return false }

func (s *shard) dstWriteInline(*Request) bool { return false }
