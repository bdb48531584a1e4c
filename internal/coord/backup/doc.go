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
//	snapshots/<unix-nanos>-<revision>-<node>.db       the snapshots, as etcd streams them
//	snapshots/<unix-nanos>-<revision>-<node>.db.enc   the same, sealed (Store.Keys set)
//	latest                                             JSON: key, revision, cluster, bytes, sha256, time, node, key_id
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
// # Encryption: the sealed object format, version 1
//
// With Store.Keys set (coordination.backup_key_file or
// WEIR_COORDINATION_BACKUP_KEY: 32-byte keys, ParseKeys) every snapshot is
// sealed with AES-256-GCM from the standard library, in chunks, so neither
// end holds the snapshot in memory:
//
//	offset  size  field
//	0       6     magic "WEIRBK"
//	6       1     format version, 1
//	7       1     cipher, 1 = AES-256-GCM under an HKDF-SHA256 object key
//	8       8     key id: SHA-256("weir coordination backup key id\x00" || key)[:8]
//	16      16    salt, random for each object
//	32      4     chunk size C, big-endian (64 KiB when written; at most 16 MiB read)
//	36      …     chunks: each C bytes of snapshot (the last 0..C) sealed, + a 16-byte tag
//
// The object key is HKDF-SHA256(secret: the key, salt, info "weir
// coordination backup v1"), so nonces never repeat across objects. Chunk i
// is sealed with the nonce i as 8 big-endian bytes, three zero bytes and
// a last-chunk byte (1 on the final chunk, else 0), and the whole 36-byte
// header as additional data. A flipped bit anywhere, a changed header,
// chunks reordered or dropped, or an object cut short — at a chunk boundary
// too, since the chunk before it was not sealed as the last — fails
// authentication (ErrAuth). The pointer's SHA-256 and size are over the
// sealed object as stored.
//
// Keys and rotation: the first key seals, every configured key opens; the
// header's key id picks it, and a snapshot sealed under none of them is
// refused naming the ids (ErrKey). To rotate, put the new key first and
// keep the old one after it until every snapshot it sealed has been pruned
// (backup_keep newer snapshots) — then drop it. A snapshot sealed while no
// key is configured is refused at restore (ErrNoKey).
//
// Plain snapshots (taken before a key was set) restore only while no key
// is configured: with a key set they are refused (ErrPlain), since the
// pointer is not authenticated and whoever can write the bucket could
// otherwise have a forged snapshot restored. Setting a key makes the next
// backup (the leader's, every backup_interval, or any member's at stop) a
// sealed one; to restore an older plain one, start that once without a key.
//
// # What a restore gives
//
// Restore downloads the snapshot "latest" names into a temporary file beside
// the data directory, refuses it unless its size and SHA-256 match the
// pointer, unseals it when sealed (refusing it on any failure, as above;
// etcd's own trailing hash is checked too), and has etcdutl build a
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
