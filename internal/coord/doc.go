// Package coord runs weir's coordination tier on etcd: an embedded member
// (go.etcd.io/etcd/server/v3/embed) inside the weir process, or a client of
// an external cluster, through the same clientv3 code. Quorum membership is a
// role some nodes hold, not a separate deployment: every node checks in, and
// the cluster takes new voters from the checked-in nodes only when it is
// short of members.
//
// # Modes
//
// Config.Mode is the number of voting members wanted: 0 (off: Start returns
// ErrOff and features that need coordination refuse to start), 1, 3, 5 or 7.
// Even sizes are refused: a quorum of two is two, so losing either node halts
// writes, which is worse than one node; 4 and 6 add a voter without adding
// failure tolerance.
//
// # Keys
//
//	/weir/coord/nodes/<node>      check-in, under the node's session lease:
//	                              {"peer","client","ordinal","role"}
//	/weir/coord/handoff/<node>    a departing voter asks for a replacement (no lease)
//	/weir/coord/departed/<node>   a voter left on purpose without being replaced (no lease)
//	/weir/coord/membership-lock/  concurrency.Mutex: one membership change at a time
//
// A restarting member deletes its own handoff and departed keys.
//
// # Ordering
//
// A node's ordinal is the trailing digits of its name ("weir-0" → 0); nodes
// without digits sort after all numbered ones, then by name. Quorum goes to
// the lowest ordinals, so a platform that removes the highest ordinal first
// takes workers before members.
//
// # Growth
//
// The first node (empty Join, no member data) calls Config.Restore and then
// self-elects a single-member cluster; a node whose data dir holds a member
// restarts as that member. A node with Join and no member data is a worker
// (no server, a client only). A voting member that is departed, handing off,
// or whose node checked in again as a worker (its data was lost) is gone;
// the rest are effective. The lowest-ordinal checked-in worker steps up when
// effective voters < the target, where the target is the largest odd number
// not above effective + checked-in workers, capped at Mode: so a cluster
// never grows to an even size it cannot leave at once (1 → 2 happens only
// when a second worker is waiting to make 3). Stepping up, under the lock:
// remove orphan learners and the node's own stale member, MemberAddAsLearner,
// start the embedded server against the existing cluster, wait until ready,
// and MemberPromote (retried while etcd says the learner is not caught up).
// The lowest-ordinal live voter removes gone members that are down once the
// effective voters reach Mode again. A member whose data dir names a member
// the cluster (reached through Join) no longer lists moves that data aside
// (member.removed-<time>) and starts as a worker.
//
// # Handoff
//
// Close of a voter, within Config.HandoffGrace: a leader moves leadership to
// the lowest-ordinal other live voter; if a worker is checked in, it writes
// its handoff key, waits until a replacement has been promoted, moves
// leadership again if it came back, and removes itself (MemberRemove, sent
// to the other members) — in mode 1 too, passing through two voters for a
// few seconds. Without a replacement it stays a member and writes its
// departed key: a three-member cluster with one departed keeps quorum with
// no reconfiguration, and two is never a resting size. Before any of this,
// a voter that reaches quorum calls Config.BeforeStop (a backup) through a
// client of its own member; one that reaches none skips it and the handoff,
// and logs why. Then the check-in is revoked (2 s at most), the client
// closed, the server stopped (Server.Stop) and closed; etcd's Close waits
// up to its request timeout (about 7 s) for other nodes' client streams on
// this member, so allow HandoffGrace + 10 s for a termination.
//
// # What each failure loses
//
// A crashed member keeps its membership; it is neither departed nor
// replaced, and its check-in lapses after SessionTTL. With one voter of three
// down, quorum holds; with two down, writes stop until one returns. A node
// that crashes mid-join leaves a learner that the next step-up removes once
// its check-in lapses. A voter that crashes mid-handoff stays gone (its
// handoff key persists) and is removed once replaced. Losing a mode-1 node
// loses what changed since the last backup. Nothing here is the sole record
// of anything that matters: leases expire anyway, dedup is best-effort,
// coverage lives in the offset store beside raw.
//
// # Limits
//
// A node with an empty Join always bootstraps a new cluster when its data
// dir is empty: give every node but the first a Join list. Learners are
// never served client requests (the client uses voting members only). Peer
// and client traffic is plain HTTP on the addresses given.
package coord
