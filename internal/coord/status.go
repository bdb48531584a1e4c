package coord

import (
	"context"
	"fmt"
	"slices"
)

// Status is what `weir status` shows of the coordination tier.
type Status struct {
	Role    Role
	Leader  string // the leader's name; empty when none is known
	Members []MemberStatus
	Nodes   []NodeStatus // checked-in nodes, lowest ordinal first
}

// MemberStatus is one etcd member.
type MemberStatus struct {
	Name     string
	ID       uint64
	Learner  bool
	Started  bool // the member has started and published its name
	Leader   bool
	Departed bool // left on purpose (departed or handing off), not failed
}

// NodeStatus is one checked-in node.
type NodeStatus struct {
	Node    string
	Ordinal int // -1: none
	Role    Role
	Peer    string
	Client  string
}

// Status reads the membership, the leader and the checked-in nodes.
func (n *Node) Status(ctx context.Context) (Status, error) {
	v, err := n.readView(ctx)
	if err != nil {
		return Status{}, err
	}
	lead, err := n.leaderID(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Role: n.Role()}
	for _, m := range v.members {
		ms := MemberStatus{Name: m.Name, ID: m.ID, Learner: m.Learner, Started: m.Name != "",
			Leader: m.ID == lead, Departed: v.departed[m.Name] || v.handoff[m.Name]}
		if ms.Leader {
			st.Leader = m.Name
		}
		st.Members = append(st.Members, ms)
	}
	for _, name := range v.sortedNodes() {
		c := v.nodes[name]
		st.Nodes = append(st.Nodes, NodeStatus{Node: name, Ordinal: c.Ordinal, Role: c.Role, Peer: c.Peer, Client: c.Client})
	}
	return st, nil
}

// leaderID asks the local member, or else the endpoints one by one.
func (n *Node) leaderID(ctx context.Context) (uint64, error) {
	if srv := n.server(); srv != nil && n.Role() == RoleVoter {
		return uint64(srv.Server.Leader()), nil
	}
	var last error
	for _, ep := range n.cli.Endpoints() {
		resp, err := n.cli.Status(ctx, ep)
		if err == nil {
			return resp.Leader, nil
		}
		last = err
	}
	return 0, fmt.Errorf("coord: no endpoint answered for the leader: %w", last)
}

func (v view) sortedNodes() []string {
	var out []string
	for name := range v.nodes {
		out = append(out, name)
	}
	slices.SortFunc(out, cmpNode)
	return out
}
