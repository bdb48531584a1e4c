package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testSupport are the packages outside weir that only tests may import;
// weir's own test support is recognised by name (testOnly).
var testSupport = []string{
	"testing",
	"go.uber.org/goleak",
	"pgregory.net/rapid",
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/chromedp/chromedp",
}

// TestDaemonBuildHasNoTestSupport: the weir binary's build graph holds no
// test-support package — no enginetest, sinktest, testenv, errorfs or
// memfs of weir's own, no testing or test library. Test helpers live in
// packages that only tests import, so they are never compiled into the
// daemon. (The faultinject build tag adds errorfs on purpose; this checks
// the default build.)
func TestDaemonBuildHasNoTestSupport(t *testing.T) {
	// go test runs with its toolchain's go on PATH; fall back to GOROOT's.
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, serr := os.Stat(goTool); serr != nil {
			t.Fatalf("no go command to list the daemon's dependencies with: %v; %v", err, serr)
		}
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, p := range deps {
		if why := testOnly(p); why != "" {
			t.Errorf("the daemon's build imports %s (%s)", p, why)
		}
	}
}

// testOnly says why package p must not be in the daemon's build, or "".
func testOnly(p string) string {
	const weir = "github.com/weir-io/weir/"
	for _, s := range testSupport {
		if p == s {
			return "a test library"
		}
	}
	if !strings.HasPrefix(p, weir) {
		return ""
	}
	last := p[strings.LastIndexByte(p, '/')+1:]
	switch {
	case strings.HasSuffix(last, "test"), strings.HasPrefix(last, "test"):
		return "weir's test support"
	case last == "errorfs", last == "memfs":
		return "weir's fault-injection file systems, for tests and the faultinject build"
	case strings.HasPrefix(p, weir+"internal/systest"):
		return "the system tests"
	}
	return ""
}

func TestTestOnly(t *testing.T) {
	for p, want := range map[string]bool{
		"github.com/weir-io/weir/internal/engine/enginetest": true,
		"github.com/weir-io/weir/sink/sinktest":              true,
		"github.com/weir-io/weir/internal/testenv":           true,
		"github.com/weir-io/weir/internal/vfs/errorfs":       true,
		"github.com/weir-io/weir/internal/systest":           true,
		"testing":            true,
		"pgregory.net/rapid": true,
		"github.com/weir-io/weir/internal/engine": false,
		"github.com/weir-io/weir/internal/daemon": false,
		"internal/synctest":                       false,
		"github.com/twmb/franz-go/pkg/kgo":        false,
	} {
		if got := testOnly(p) != ""; got != want {
			t.Errorf("testOnly(%s) = %v, want %v", p, got, want)
		}
	}
}
