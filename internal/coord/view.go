package coord

import (
	"slices"
)

// member is one etcd member as the cluster lists it.
type member struct {
	ID         uint64
	Name       string // empty until the member has started
	PeerURLs   []string
	ClientURLs []string
	Learner    bool
}

// checkIn is the value of /weir/coord/nodes/<node>.
type checkIn struct {
	Node    string `json:"-"`
	Peer    string `json:"peer,omitempty"`
	Client  string `json:"client,omitempty"`
	Ordinal int    `json:"ordinal"`
	Role    Role   `json:"role"`
}

// view is one reading of membership and the coordination keys; the rules
// that decide who steps up are its methods, free of I/O.
type view struct {
	members  []member
	nodes    map[string]checkIn // by node name
	departed map[string]bool
	handoff  map[string]bool
}

// nodeOf is the checked-in node a member belongs to, by name or peer URL.
func (v view) nodeOf(m member) (checkIn, bool) {
	if c, ok := v.nodes[m.Name]; ok && m.Name != "" {
		return c, true
	}
	for _, c := range v.nodes {
		if c.Peer != "" && slices.Contains(m.PeerURLs, c.Peer) {
			return c, true
		}
	}
	return checkIn{}, false
}

func (v view) alive(m member) bool { _, ok := v.nodeOf(m); return ok }

// gone: departed, handing off, or its node is back as a worker (data lost).
func (v view) gone(m member) bool {
	if v.departed[m.Name] || v.handoff[m.Name] {
		return true
	}
	c, ok := v.nodeOf(m)
	return ok && c.Role == RoleWorker
}

func (v view) voters() []member {
	var out []member
	for _, m := range v.members {
		if !m.Learner {
			out = append(out, m)
		}
	}
	return out
}

func (v view) effective() int {
	n := 0
	for _, m := range v.voters() {
		if !v.gone(m) {
			n++
		}
	}
	return n
}

// learnerBusy: a learner other than self's whose node is checked in is
// being promoted; a membership change is in progress.
func (v view) learnerBusy(self string) bool {
	for _, m := range v.members {
		if c, ok := v.nodeOf(m); m.Learner && ok && c.Node != self {
			return true
		}
	}
	return false
}

// workers are the checked-in nodes holding no membership, lowest ordinal first.
func (v view) workers() []string {
	var out []string
	for name, c := range v.nodes {
		if c.Role == RoleWorker {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, cmpNode)
	return out
}

func cmpNode(a, b string) int {
	switch {
	case lessNode(a, b):
		return -1
	case lessNode(b, a):
		return 1
	}
	return 0
}

// target is the voter count to grow to: the largest odd number not above
// what the effective voters and waiting workers can reach, capped at mode.
func target(effective, workers, mode int) int {
	t := effective + workers
	if t%2 == 0 {
		t--
	}
	return min(t, mode)
}

// shouldStepUp: self is the lowest-ordinal worker and the cluster is short.
func (v view) shouldStepUp(self string, mode int) bool {
	ws := v.workers()
	if len(ws) == 0 || ws[0] != self || v.learnerBusy(self) {
		return false
	}
	eff := v.effective()
	return target(eff, len(ws), mode) > eff
}

// stale are members a node stepping up removes first: learners whose node
// is not checked in, and members that are self's (from a lost data dir or
// an earlier attempt).
func (v view) stale(self, selfPeer string) []member {
	var out []member
	for _, m := range v.members {
		mine := m.Name == self || slices.Contains(m.PeerURLs, selfPeer)
		if mine || (m.Learner && !v.alive(m)) {
			out = append(out, m)
		}
	}
	return out
}

// surplus are gone voters that are down, once the effective voters reach
// mode again; only the lowest-ordinal effective live voter removes them.
func (v view) surplus(self string, mode int) []member {
	if v.learnerBusy("") || v.effective() < mode || v.lowestVoter("") != self {
		return nil
	}
	var out []member
	for _, m := range v.voters() {
		if v.gone(m) && !v.alive(m) {
			out = append(out, m)
		}
	}
	return out
}

// lowestVoter is the lowest-ordinal started, live, effective voter other
// than except.
func (v view) lowestVoter(except string) string {
	best := ""
	for _, m := range v.voters() {
		if m.Name == "" || m.Name == except || v.gone(m) || !v.alive(m) {
			continue
		}
		if best == "" || lessNode(m.Name, best) {
			best = m.Name
		}
	}
	return best
}

func (v view) member(name string) (member, bool) {
	for _, m := range v.members {
		if m.Name == name {
			return m, true
		}
	}
	return member{}, false
}

// otherClientURLs are the client URLs of started voters other than self.
func (v view) otherClientURLs(self string) []string {
	var out []string
	for _, m := range v.voters() {
		if m.Name != self && m.Name != "" {
			out = append(out, m.ClientURLs...)
		}
	}
	return out
}
