// Package wabtest holds test helpers that read a write-ahead buffer's
// directory (apart from testenv, which the wab package's own tests import).
package wabtest

import (
	"path/filepath"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// Undelivered counts the segments of the write-ahead buffer at
// wabDir that the drain is not done with: every sealed segment (the drain
// removes one once delivered), and every open segment whose sidecar does
// not yet count all its records (the drain delivers open segments' tails
// before the seal). A test that stops a daemon and then counts copies in
// a sink that keeps them waits for 0: a delivery stopped between the
// sink's commit and the drain's progress record is made again at the next
// start.
func Undelivered(tb testing.TB, wabDir string) int {
	tb.Helper()
	sealed, err := filepath.Glob(filepath.Join(wabDir, "shard-*", "*.wab.sealed"))
	if err != nil {
		tb.Fatal(err)
	}
	open, err := filepath.Glob(filepath.Join(wabDir, "shard-*", "*.wab"))
	if err != nil {
		tb.Fatal(err)
	}
	n := len(sealed)
	for _, p := range open {
		info, err := wab.InspectSegment(vfs.OS, p)
		if err != nil {
			continue // sealed meanwhile: counted at the next look
		}
		if done, err := wab.ReadConfirmed(vfs.OS, p); err != nil || done < info.Records {
			n++
		}
	}
	return n
}
