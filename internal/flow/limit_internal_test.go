package flow

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestDefaultLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := cgroupMemoryMax
	defer func() { cgroupMemoryMax = old }()
	oldLimit := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(oldLimit)
	for _, c := range []struct {
		name     string
		gomem    int64 // 0: none
		cgroup   string
		want     int64
		wantFrom string
	}{
		{"nothing set", 0, "", FallbackLimit, "fallback"},
		{"cgroup without a limit", 0, write("max", "max\n"), FallbackLimit, "fallback"},
		{"cgroup file unreadable", 0, filepath.Join(dir, "missing"), FallbackLimit, "fallback"},
		{"cgroup garbage", 0, write("junk", "lots\n"), FallbackLimit, "fallback"},
		{"cgroup", 0, write("1g", "1073741824\n"), 512 << 20, "half of cgroup memory.max"},
		{"GOMEMLIMIT", 800 << 20, "", 400 << 20, "half of GOMEMLIMIT"},
		{"GOMEMLIMIT smaller than the cgroup", 800 << 20, write("1g", "1073741824\n"), 400 << 20, "half of GOMEMLIMIT"},
		{"cgroup smaller than GOMEMLIMIT", 2 << 30, write("1g", "1073741824\n"), 512 << 20, "half of cgroup memory.max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cgroupMemoryMax = c.cgroup
			if c.cgroup == "" {
				cgroupMemoryMax = filepath.Join(dir, "none")
			}
			if c.gomem > 0 {
				debug.SetMemoryLimit(c.gomem)
			} else {
				debug.SetMemoryLimit(math.MaxInt64)
			}
			got, from := DefaultLimit()
			if got != c.want || from != c.wantFrom {
				t.Errorf("DefaultLimit() = %d, %q; want %d, %q", got, from, c.want, c.wantFrom)
			}
		})
	}
}

// TestSetGoMemoryLimit: without GOMEMLIMIT the Go limit is 1.3 × the
// budget + 16 MiB (docs/flow_control.md, "The memory bound"), the cgroup's
// memory.max when smaller, and a GOMEMLIMIT already set is left alone.
func TestSetGoMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	old := cgroupMemoryMax
	defer func() { cgroupMemoryMax = old }()
	oldLimit := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(oldLimit)
	defer goLimitSet.Store(0)
	cgroupMemoryMax = filepath.Join(dir, "none")
	debug.SetMemoryLimit(math.MaxInt64)
	const budget = 128 << 20
	want := int64(budget)*13/10 + 16<<20
	if got := SetGoMemoryLimit(budget); got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("SetGoMemoryLimit(128 MiB) = %d (runtime %d), want %d", got, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	cg := filepath.Join(dir, "cg")
	if err := os.WriteFile(cg, []byte("104857600\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cgroupMemoryMax = cg
	if got := SetGoMemoryLimit(budget); got != 100<<20 {
		t.Errorf("with a cgroup of 100 MiB: %d, want %d", got, 100<<20)
	}
	debug.SetMemoryLimit(300 << 20)
	goLimitSet.Store(0)
	if got := SetGoMemoryLimit(budget); got != 0 || debug.SetMemoryLimit(-1) != 300<<20 {
		t.Errorf("with GOMEMLIMIT set: %d, limit %d; want it left alone", got, debug.SetMemoryLimit(-1))
	}
}
