package metrics_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/metrics/metricstest"
)

// docs/monitoring.md lists every metric the daemon can export — those of
// metrics.New, those made on demand (flow control, secondaries and
// sources, the HTTP door, data contracts) and the coordination tier's —
// and names none that the daemon does not export.
func TestMonitoringDocListsEveryMetric(t *testing.T) {
	cat := metricstest.Catalogue(t)
	reg := metricstest.Registry(t)
	var missing, unknown []string
	for name := range reg {
		if strings.HasPrefix(name, "weir_") && !cat[name] {
			missing = append(missing, name)
		}
	}
	for name := range cat {
		if !reg[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	if len(missing) > 0 {
		t.Errorf("docs/monitoring.md does not list %d metrics: %v", len(missing), missing)
	}
	if len(unknown) > 0 {
		t.Errorf("docs/monitoring.md names %d metrics the daemon does not export: %v", len(unknown), unknown)
	}
}
