// Package metricstest lists, for tests, the metrics the daemon can export
// and those its catalogue (docs/monitoring.md) documents: the catalogue's
// own test checks one against the other, and the tests of what refers to
// metrics by name — the Grafana dashboard and the Prometheus alert rules
// under deploy/ — check every name they use against both.
package metricstest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/coord"
	"github.com/weir-io/weir/internal/coord/backup"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/source/arrowipcsrc"
	"github.com/weir-io/weir/internal/source/flightsrc"
)

// RepoFile is the path of the file at rel (slash-separated) from the
// repository's root, found as the nearest directory above the test's
// working directory that holds go.mod.
func RepoFile(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, filepath.FromSlash(rel))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory: cannot find %s", rel)
		}
		dir = parent
	}
}

// catalogueName is a metric name as docs/monitoring.md writes it.
var catalogueName = regexp.MustCompile("`(weir_[a-z0-9_]+)`")

// Catalogue is the set of weir_ metric names docs/monitoring.md names
// (each in backquotes, in a table row or in the text).
func Catalogue(t testing.TB) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(RepoFile(t, "docs/monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range catalogueName.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

// InCatalogue reports whether name is documented by docs/monitoring.md:
// listed (cat is Catalogue's set), or a Go runtime or process metric, which
// the catalogue documents as `go_*` and `process_*`.
func InCatalogue(cat map[string]bool, name string) bool {
	return cat[name] || strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// Registry is the set of metric names the daemon can register, whatever
// its configuration: those of metrics.New (with the Go runtime and process
// collectors), of its on-demand parts — flow control, secondaries and
// sources, the HTTP door, data contracts, the taps, the Flight sinks — and of the coordination tier
// (coord, its backups, the member gauge). A name is in it once registered,
// whether or not it has a series yet.
func Registry(t testing.TB) map[string]bool {
	t.Helper()
	m, reg := metrics.New(metrics.Config{Shards: 1, Sink: "file", DeadLetterMaxBytes: 1})
	m.Flow(flow.DefaultThresholds())
	m.Topology()
	m.HTTP([]string{"/v1/records"}, []int{200}, []string{"decode"})
	m.Quality()
	m.Tap()
	if _, err := flightsrc.NewMetrics(reg, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := arrowipcsrc.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := coord.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := flightsink.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	bk, err := backup.Open(context.Background(), "file://"+t.TempDir(), slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	return names(t, reg)
}

// descName finds a metric's name in a *prometheus.Desc's String, which is
// the only way the client library shows it.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// names lists every metric reg holds: each registered collector's
// descriptions (a vector without a child yet included), and what a gather
// returns (collectors that describe nothing).
func names(t testing.TB, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}
