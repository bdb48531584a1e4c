package engine_test

import (
	"testing"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
)

// The offset file's fencing, with every store on one file in one raw
// directory.
func TestOffsetFileFences(t *testing.T) {
	enginetest.Fences(t, func(t *testing.T) enginetest.StoreOpener {
		dir := t.TempDir()
		return func(t *testing.T) *engine.OffsetStore { return openStore(t, dir) }
	})
}
