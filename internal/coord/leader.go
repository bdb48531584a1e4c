package coord

// IsLeader reports whether this node's embedded member leads the cluster
// (false for a worker and with an external cluster): the leader takes the
// periodic backups.
func (n *Node) IsLeader() bool { return n.isLeader() }
