// Package backup copies the coordination store (etcd) to object storage and
// brings it back: a snapshot of the whole keyspace, taken through the client
// (Maintenance.Snapshot), written to a gocloud.dev/blob bucket — a directory
// (file://) or an S3 bucket (s3://) — and, when a node starts with no member
// holding data, restored into a fresh single-member data directory.
//
// # What is backed up, and when
//
// Everything etcd's backend holds — keys, values, their revisions, leases —
// which is the coordination state weir keeps there (recovery window claims,
// leases, election keys). The membership in it is replaced at restore. A snapshot is taken every backup interval
// by the node that is the etcd leader (Store.Run with an isLeader check), and
// by every member that stops gracefully while it still reaches quorum
// (Store.SaveHook, called by the cluster code before it hands off and stops
// the server). So when all members stop — at once, or one by one — the first
// of them to stop its server has saved a snapshot holding every write
// committed before its stop began. Losing a single-member (mode 1) node
// therefore costs at most one interval of coordination state.
//
// # Layout and the pointer-last protocol
//
// Under the URL's path (file://) or prefix (s3://bucket/prefix):
//
//	snapshots/<unix-nanos>-<revision>-<node>.db   the snapshots, as etcd streams them
//	latest                                         JSON: key, revision, bytes, sha256, time, node
//
// A Save streams the snapshot into its own new object while hashing it
// (SHA-256). Only when that upload has completed — the blob writer's Close
// succeeded, which for S3 means the object exists and for a directory means
// the file was fsynced and renamed into place and the directory fsynced — is
// the small "latest" object replaced to name it. A Save that fails at any
// point before that leaves "latest" naming the previous snapshot, which is
// still there: retention (Keep, default 5) runs only after a successful Save
// and never deletes the snapshot "latest" names. A reader therefore sees
// either the old pointer or the new one, and whatever it names is complete.
// The pointer moves only forward: a Save that finds "latest" naming a
// snapshot of the same cluster (the etcd cluster id in the pointer) at a
// higher revision deletes its own snapshot and leaves the pointer. Buckets
// offer no compare-and-swap, so two saves racing between that check and
// their pointer write may still leave the lower of the two named; both were
// taken after the stops began, so either holds every write made before.
//
// # What a restore gives
//
// Restore downloads the snapshot "latest" names into a temporary file beside
// the data directory, refuses it unless its size and SHA-256 match the
// pointer (etcd's own trailing hash is checked too), and has etcdutl build a
// data directory for a new single-member cluster — the given member name and
// peer URL — in a staging directory that is renamed into place only when
// complete, so a crash mid-restore never leaves a half-built data directory
// where etcd would start from it. The target must be absent or empty.
//
// The restored cluster holds the coordination state as of the snapshot. Its
// revision counter is moved forward (RevisionBump, default 1e9) and the old
// revisions marked compacted, so revisions — which fencing tokens may be —
// never go backwards across a restore and old watchers resynchronise.
// Leases and the claims made under them come back too; they are harmless,
// since their holders' sessions ended with the old server and they expire
// after their TTL, freeing the windows they claimed. Nothing here is the sole
// record of anything that matters: coverage and source cursors live in the
// offset store beside raw, so a restore from an older snapshot costs at most
// some recovery work done again, never data.
package backup
