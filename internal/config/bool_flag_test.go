package config

import "testing"

// TestBoolFlagAlone: a boolean flag given alone means true, and takes an
// explicit =false.
func TestBoolFlagAlone(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--debug-pprof"}, true},
		{[]string{"--debug-pprof", "--shards", "2"}, true},
		{[]string{"--debug-pprof=false"}, false},
		{nil, false},
	} {
		c, err := load(tc.args, nil, nil, "/srv/weir")
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.DebugPprof != tc.want {
			t.Errorf("%v: debug_pprof = %v, want %v", tc.args, c.DebugPprof, tc.want)
		}
	}
}
