package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLoopExt4Unavailable runs a test that asks for a loop-device ext4
// file system where the tools cannot be found (an empty PATH): it skips,
// loudly, and fails under WEIR_REQUIRE_SERVICES=1 — whatever the user.
func TestLoopExt4Unavailable(t *testing.T) {
	if os.Getenv("WEIR_TESTENV_CHILD") == "1" {
		LoopExt4(t, 16<<20)
		t.Fatal("LoopExt4 returned without its tools")
	}
	for _, tc := range []struct {
		require  string
		wantFail bool
		want     string
	}{
		{"", false, "SKIPPING"},
		{"1", true, "a missing service or tool is a failure"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoopExt4Unavailable$", "-test.v")
		cmd.Env = append(os.Environ(), "WEIR_TESTENV_CHILD=1", "PATH=/nonexistent", RequireEnv+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%q: exit %v, want a failure: %v, and %q in:\n%s", RequireEnv, tc.require, err, tc.wantFail, tc.want, out)
		}
	}
}
