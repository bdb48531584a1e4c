package coord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Config{Mode: 3, Node: "weir-0", DataDir: "/d", PeerListen: "127.0.0.1:2380", ClientListen: "127.0.0.1:2379"}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	cases := []struct {
		name string
		cfg  Config
		want string // "" valid; otherwise a substring of the error
	}{
		{"mode 0 needs nothing", Config{}, ""},
		{"mode 1", with(func(c *Config) { c.Mode = 1 }), ""},
		{"mode 3", ok, ""},
		{"mode 5", with(func(c *Config) { c.Mode = 5 }), ""},
		{"mode 7", with(func(c *Config) { c.Mode = 7 }), ""},
		{"mode 2", with(func(c *Config) { c.Mode = 2 }), "quorum of two is two"},
		{"mode 4", with(func(c *Config) { c.Mode = 4 }), "even size adds a voter"},
		{"mode 6", with(func(c *Config) { c.Mode = 6 }), "even size adds a voter"},
		{"mode -1", with(func(c *Config) { c.Mode = -1 }), "must be 0 (off), 1, 3, 5 or 7"},
		{"mode 9", with(func(c *Config) { c.Mode = 9 }), "must be 0 (off), 1, 3, 5 or 7"},
		{"no node", with(func(c *Config) { c.Node = "" }), "node"},
		{"slash in node", with(func(c *Config) { c.Node = "a/b" }), "node"},
		{"no data dir", with(func(c *Config) { c.DataDir = "" }), "data dir"},
		{"bad peer", with(func(c *Config) { c.PeerListen = "nope" }), "peer listen"},
		{"same addresses", with(func(c *Config) { c.ClientListen = c.PeerListen }), "must differ"},
		{"bad join", with(func(c *Config) { c.Join = []string{"x"} }), "join"},
		{"negative ttl", with(func(c *Config) { c.SessionTTL = -1 }), "negative"},
		{"external", Config{Mode: 3, Node: "w", Endpoints: []string{"http://10.0.0.1:2379"}}, ""},
		{"external and join", Config{Mode: 3, Node: "w", Endpoints: []string{"h:1"}, Join: []string{"h:2"}}, "exclude"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an ErrConfig error with %q, got %v", c.want, err)
			}
		})
	}
}

func TestStartOff(t *testing.T) {
	n, err := Start(context.Background(), Config{}, testLogger(t), nil)
	if !errors.Is(err, ErrOff) || n != nil {
		t.Fatalf("mode 0: got %v, %v; want ErrOff", n, err)
	}
}

func TestOrdinalOrder(t *testing.T) {
	names := []string{"zeta", "weir-10", "alpha", "weir-2", "x7", "weir-0"}
	slices.SortFunc(names, cmpNode)
	want := []string{"weir-0", "weir-2", "x7", "weir-10", "alpha", "zeta"}
	if !slices.Equal(names, want) {
		t.Fatalf("order %v, want %v", names, want)
	}
	if ordinal("weir-0") != 0 || ordinal("weir") != -1 || ordinal("99999999999999999999999") != -1 {
		t.Fatal("ordinal parsing")
	}
}

func TestTarget(t *testing.T) {
	cases := []struct{ eff, workers, mode, want int }{
		{1, 0, 3, 1}, {1, 1, 3, 1}, {1, 2, 3, 3}, {2, 1, 3, 3}, {2, 0, 3, 1},
		{3, 5, 3, 3}, {3, 1, 5, 3}, {3, 2, 5, 5}, {1, 9, 7, 7}, {0, 1, 3, 1},
	}
	for _, c := range cases {
		if got := target(c.eff, c.workers, c.mode); got != c.want {
			t.Errorf("target(%d, %d, %d) = %d, want %d", c.eff, c.workers, c.mode, got, c.want)
		}
	}
}

// A view of a cluster: voters v..., and checked-in nodes with roles.
func testView(voters []string, learners []string, nodes map[string]Role) view {
	v := view{nodes: map[string]checkIn{}, departed: map[string]bool{}, handoff: map[string]bool{}}
	for i, name := range append(slices.Clone(voters), learners...) {
		v.members = append(v.members, member{ID: uint64(i + 1), Name: name, PeerURLs: []string{"http://" + name},
			Learner: i >= len(voters)})
	}
	for name, r := range nodes {
		v.nodes[name] = checkIn{Node: name, Peer: "http://" + name, Role: r}
	}
	return v
}

func TestShouldStepUp(t *testing.T) {
	w, q := RoleWorker, RoleVoter
	// One worker alone does not take a cluster of one to two.
	v := testView([]string{"n0"}, nil, map[string]Role{"n0": q, "n2": w})
	if v.shouldStepUp("n2", 3) {
		t.Fatal("1 voter + 1 worker: must not rest at 2")
	}
	// Two workers: the lowest ordinal goes first.
	v = testView([]string{"n0"}, nil, map[string]Role{"n0": q, "n2": w, "n1": w})
	if !v.shouldStepUp("n1", 3) || v.shouldStepUp("n2", 3) {
		t.Fatal("n1 must step up first, n2 wait")
	}
	// A learner of a live node in progress: nobody else moves.
	v = testView([]string{"n0"}, []string{"n1"}, map[string]Role{"n0": q, "n1": RoleLearner, "n2": w})
	if v.shouldStepUp("n2", 3) {
		t.Fatal("a change is in progress")
	}
	// An orphan learner (node gone) does not block.
	v = testView([]string{"n0", "n1"}, []string{"n9"}, map[string]Role{"n0": q, "n1": q, "n2": w})
	if !v.shouldStepUp("n2", 3) || len(v.stale("n2", "http://n2")) != 1 {
		t.Fatal("orphan learner must not block and must be stale")
	}
	// Full: no step-up; a handoff makes room.
	v = testView([]string{"n0", "n1", "n2"}, nil, map[string]Role{"n0": q, "n1": q, "n2": q, "n3": w})
	if v.shouldStepUp("n3", 3) {
		t.Fatal("full cluster")
	}
	v.handoff["n0"] = true
	if !v.shouldStepUp("n3", 3) {
		t.Fatal("handoff: the worker replaces")
	}
	// A voter whose node checked in again as a worker lost its data: gone, and stale for itself.
	v = testView([]string{"n0", "n1", "n2"}, nil, map[string]Role{"n0": q, "n1": q, "n2": w})
	if v.effective() != 2 || !v.shouldStepUp("n2", 3) || len(v.stale("n2", "http://n2")) != 1 {
		t.Fatal("lost member: gone and stale")
	}
}

func TestSurplus(t *testing.T) {
	q := RoleVoter
	// n2 departed and down, replaced by n3: the lowest live voter removes it.
	v := testView([]string{"n0", "n1", "n2", "n3"}, nil, map[string]Role{"n0": q, "n1": q, "n3": q})
	v.departed["n2"] = true
	if s := v.surplus("n0", 3); len(s) != 1 || s[0].Name != "n2" {
		t.Fatalf("surplus %v, want n2", s)
	}
	if len(v.surplus("n1", 3)) != 0 {
		t.Fatal("only the lowest voter removes")
	}
	// Not replaced: kept.
	v = testView([]string{"n0", "n1", "n2"}, nil, map[string]Role{"n0": q, "n1": q})
	v.departed["n2"] = true
	if len(v.surplus("n0", 3)) != 0 {
		t.Fatal("3 with one departed keeps quorum without reconfiguration")
	}
}
