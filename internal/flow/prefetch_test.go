package flow_test

import (
	"testing"

	"github.com/weir-io/weir/internal/flow"
)

func TestPrefetch(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		sources int
		want    int64
	}{
		{1 << 30, 1, 256 << 20},
		{1 << 30, 4, 64 << 20},
		{1 << 30, 0, 256 << 20}, // no source counts as one
		{128 << 10, 1, flow.MinPrefetch},
		{1 << 30, 1 << 20, flow.MinPrefetch},
	} {
		if got := flow.Prefetch(c.limit, c.sources); got != c.want {
			t.Errorf("Prefetch(%d, %d) = %d, want %d", c.limit, c.sources, got, c.want)
		}
	}
}
