// Package wab is weir's write-ahead buffer: the on-disk log every producer
// record passes through before it is acknowledged, and from which the drain
// delivers it to sinks — from an open segment's readable tail, and from
// sealed segments.
//
// # Promises
//
// A Durable acknowledgement (Request.Done(nil) for a Durable request) means
// the record's bytes were fdatasynced and, if the record opened a new
// segment, that segment's directory entry was fsynced too. A Buffered
// acknowledgement only means the bytes were handed to the kernel with
// write(2): they survive a crash of the weir process, not a power loss or a
// kernel crash.
//
// # Directory layout
//
//	<dir>/LOCK                      flock(2) held by Open until Close
//	<dir>/INSTANCE                  16 random bytes, written once
//	<dir>/shard-NNN/                one per shard (3 or more digits)
//	    SSSSSSSSSSSSSSSSSSSS.wab            open segment, being appended to
//	    SSSSSSSSSSSSSSSSSSSS.wab.sealed     sealed segment, ready for the drain
//	    SSSSSSSSSSSSSSSSSSSS.wab.confirmed  drain progress sidecar
//	    *.tmp                               temporary files, removed by Open
//	<dir>/damaged/shard-NNN/        damaged segments Salvage replaced (kept,
//	                                never read by Open; see Salvage)
//
// S is the segment's sequence number, 20 decimal digits. Within a shard it
// is one more than the largest sequence found on disk at Open (1 for an
// empty shard) and grows by one per segment created; gaps are normal.
// Because fully drained segments are deleted, a sequence number can be
// used again after every segment of a shard has been removed; record ids
// stay unique regardless (see below).
//
// # Integers and checksums
//
// Every integer is big endian. Every checksum is CRC-32C (Castagnoli).
//
// # Segment header (64 bytes)
//
//	off  size  field
//	  0     8  magic "WEIRWAB\x00"
//	  8     2  version (1)
//	 10     2  shard (0xFFFF for dead-letter files)
//	 12     4  flags: 1 (FlagSyncMarks) | 2 (FlagTimeOrderedIDs) in
//	           segments written by this version; 1 or 0 in older ones,
//	           0 in dead-letter files. A reader refuses a segment with
//	           a flag it does not know.
//	 16     8  sequence number
//	 24     8  uid: random, non-zero, chosen at creation
//	 32     8  created, Unix nanoseconds
//	 40    16  instance id of the WAB directory
//	 56     4  reserved (0)
//	 60     4  CRC-32C of bytes 0..59
//
// # Frames
//
// The header is followed by frames, back to back:
//
//	off  size  field
//	  0     4  body length L (12 <= L <= RecordLimit+MaxMetaBytes+12)
//	  4     4  CRC-32C of the body
//	  8     1  kind: 1 record, 2 footer, 3 mark  \
//	  9     1  durability: 0 Durable, 1 Buffered  |
//	           (+0x80: sync mark, see below)       |
//	 10     2  meta length M                      | body, L bytes
//	 12     8  received, Unix nanoseconds         |
//	 20     M  meta                               |
//	20+M  L-12-M payload                         /
//
// A reader checks the length before allocating anything: it must be in
// range and the frame must end within the file. Then the CRC is checked,
// and only then is any other field believed.
//
// The footer is a frame of kind 2 with durability 0, received 0, no meta,
// and a 24-byte payload: record count (u64), received time of the first
// record (i64), received time of the last record (i64). A sealed segment
// ends exactly at the end of its footer; an open segment has no footer.
//
// # Sync marks
//
// In a segment whose header has FlagSyncMarks, a sync mark on a frame says
// that everything in the file before the frame had been fdatasynced when
// the frame was written. It is either bit 7 (0x80) of a record frame's
// durability byte, which the flusher sets on the first frame of each batch
// that follows a completed fdatasync (or the segment's durable creation),
// or a mark frame: kind 3, durability 0, received 0, no meta, no payload
// (20 bytes), which the flusher writes after a synced batch when nothing is
// queued behind it (only into reserved space; it is not synced itself).
// Readers strip the bit and pass over mark frames; without the flag both
// are invalid. Recovery uses the marks to tell damage to durable bytes from
// the remains of writes a crash cut short (see Recovery).
//
// # Record ids
//
// The id of the i-th record (from 0) of a segment is the first 16 bytes of
// SHA-256(instance ‖ shard u16 ‖ uid u64 ‖ i u64 ‖ payload). Replaying a
// segment yields the same ids; two segments never share a uid in practice,
// so ids do not collide even when a sequence number is reused.
//
// # Writing
//
// Each shard has one flusher goroutine and a queue bounded in requests
// (QueueCapacity) and in payload and meta bytes (QueueCapacityBytes); a
// Submit waits up to its wait for room in both. The flusher
// takes the first queued request, then whatever else is queued (up to
// BatchMaxRecords records, waiting up to BatchDeadline for more, and no
// more than the open segment has room for), encodes the batch into one
// reused buffer, writes it with one write(2), acknowledges the Buffered
// requests, then - if any request is Durable - calls fdatasync once and
// acknowledges the Durable ones. SubmitInline writes a lone request the
// same way on the caller's goroutine when the flusher is waiting for work
// and nothing is queued (inline.go); a mutex keeps the two apart.
//
// A new segment is created with O_EXCL, its header written, its first
// PreallocateBytes reserved with fallocate (KEEP_SIZE), then fdatasynced and
// its directory fsynced, all before any record is written to it. The flusher
// creates the first segment of each shard when it starts and the next one
// right after sealing the previous, so creation normally happens between
// batches rather than in front of one — but only with a full chunk: on a
// disk that cannot hold one, an empty segment would keep its reservation
// for as long as no record comes, space the drain needs to deliver what is
// stored, so the next batch creates it instead. The reservation is extended (after
// the batch's acks) when less than half a chunk is left; if a batch would
// run past the reservation, it is extended before the write, so that an
// out-of-space condition fails that batch with ErrDiskFull before any byte
// is written.
//
// A disk with less free space than a chunk does not refuse everything: a
// reservation that does not fit is halved, down to PreallocFloor, and then
// only the batch's own bytes (and a footer's) are reserved; a new segment
// that cannot get PreallocFloor starts with no reservation. A reservation
// that runs out of space keeps nothing past the end of the file (ext4
// keeps what a failed fallocate found; vfs truncates it away), so each
// smaller one is made again from there, and when none fits, the one the
// segment had (a footer's room among it) is made again. The shard keeps
// the smaller chunk until a new segment gets a full one again. The
// first fallback is logged at warn, the return to full chunks at info, and
// an Observer that implements PreallocObserver sees each change. A batch
// fails with ErrDiskFull only when its own bytes cannot be reserved.
//
// A segment is sealed when a batch brings it to SegmentMaxBytes, or
// SegmentMaxAge after its first record was written (a timer does this on an
// idle shard). Sealing writes the footer, truncates the file to its real
// size (releasing the unused reservation), fdatasyncs, renames .wab to
// .wab.sealed and fsyncs the directory; then Log.Notify is signalled.
// Empty segments are never sealed; at Close they are removed.
//
// # Reading the open segment
//
// After each batch, whoever wrote it (the flusher, or an inline write)
// publishes the open segment's readable tail (Log.Tail, tail.go): its
// sequence, path, a record count N and the offset just past the N-th
// record. The first N records are the longest prefix of the segment in
// which every record holds its tier's promise: a Buffered record once the
// write(2) that carried it returned, a Durable one once the fdatasync
// after it returned. A batch mixing tiers makes its records up to its
// first Durable one readable after the write and the rest after the sync.
// Log.TailNotify is signalled whenever a tail grows. The tail is withdrawn
// (Tail reports false) when the segment is sealed; the sealed segment is
// then in the listing, with the same bytes before the tail's end.
//
// A reader of the tail (OpenTail) sees the file as ending at the tail's
// end, so it never reads a frame being written. Bytes before the end never
// change while the segment is open. What the tail promises about a crash
// follows from the tiers: a Durable record in it survives a power loss, a
// Buffered one a process crash only — a power loss may seal the segment
// at recovery with fewer records than a reader of its tail delivered (the
// drain's sidecar then counts past the sealed segment's records; see
// docs/drain.md). The deterministic simulation reads every tail between
// scheduling steps and between each batch's write and its fdatasync, and
// reports a record readable before its promise holds.
//
// # Failures
//
// A failed write or fdatasync fails the shard for good: the batch is not
// acknowledged, fdatasync is never called again on that file, and every
// later request on the shard fails with an error wrapping ErrShardFailed
// and the cause, until the process restarts and Open recovers the
// directory. Running out of space (ENOSPC, EDQUOT) is reported as
// ErrDiskFull; when nothing had been written yet (segment creation, the
// reservation, a write that wrote no byte) only the batch fails and the
// shard keeps serving.
//
// # Recovery
//
// Open removes temporary files, then for each shard:
//
// A sealed segment is trusted by its footer, not read whole: its header
// must be valid and name the shard and sequence, and its last 44 bytes must
// be a valid footer frame (its CRC guards it, and a footer found there ends
// the file exactly) whose record count the bytes before it can hold.
// Otherwise Open fails with a *CorruptionError naming the file and offset.
// A sealed segment was fdatasynced whole before it was renamed, so what can
// be wrong inside it is media damage; the drain finds that when it reads
// the records (every frame's CRC is checked), and InspectSegment (weir
// verify) checks every frame.
//
// An open segment is a crash's leftover. Its records are read up to the
// first frame that is not complete and valid. If that is the end of the
// file, or what follows is the remains of writes never made durable, the
// file is truncated there and fdatasynced, the footer is written and
// synced, and the file is sealed as above. What follows is scanned: every
// byte position after the bad frame is tried for a complete frame with a
// valid CRC. In a segment with sync marks, the bad frame is damage to
// durable bytes, not a torn tail, when a valid frame after it carries a
// sync mark (that frame was written after an fdatasync that covered the
// bad one); in an older segment, when any valid frame follows. Damage makes
// Open fail with a *CorruptionError naming the file and offset, as for a
// sealed segment: the records after it may have been acknowledged, and
// cutting them is for an operator to decide (Repair, weir repair --cut;
// or Salvage, weir repair --salvage, which keeps the valid frames after
// the damage, see below).
// An open segment without a record, or whose creation never completed (64
// bytes or less with a bad header), is removed. A sidecar whose segment no
// longer exists is removed.
//
// Damage in the frames written after the last sync mark of an open
// segment cannot be told from a torn write and is cut: a record lost that
// way was in the last batch the flusher wrote before the crash, with more
// requests already queued behind it (an idle flusher marks its last
// batch).
//
// # Salvage
//
// Salvage rewrites a damaged segment (sealed, or open with damage that is
// not a torn tail) instead of cutting it. The valid frames are found as
// recovery finds them: the records before the first bad frame, then every
// run of valid frames after it, resynchronising at each bad frame (the
// same scan). They are copied byte for byte, footers and the bytes that
// hold no valid frame left out, after a copy of the old header, into
// SSSS.wab[.sealed].tmp: created, header written, fdatasynced, directory
// fsynced; then the frames (and, for a sealed segment, a new footer),
// fdatasynced. Then a byte-for-byte copy of the damaged file is made
// durable as damaged/shard-NNN/<name> under the WAB directory (temporary
// name, fdatasync, rename, directory fsync), a sidecar that counts records
// past the first damage is lowered to the records before it, and the new
// file is renamed over the old one and the directory fsynced. At every
// point a crash leaves the damaged file or the salvaged one under the
// segment's name (a leftover .tmp is removed by Open), and the damaged
// bytes are never deleted: that is why the original is copied aside
// rather than renamed aside, which would leave a moment with neither in
// place. A segment with no valid record left is renamed into damaged/
// (fdatasync, rename, fsync of both directories) and its sidecar removed.
//
// The header, and so the shard, sequence and uid, is the old one, and the
// records before the first damage keep their index: every record keeps its
// id except one whose id derives from its position (no id or idempotent
// producer in its meta) and that follows lost bytes, whose index is lower.
// A segment whose header is damaged is not salvaged (ErrCannotSalvage).
//
// # Sidecars
//
// SSSS.wab.confirmed records how far the drain has durably delivered the
// segment. Version 2 (32 bytes): magic "WEIRCNF\x00" (8), version 2
// (u32), record count (u64), byte offset of the first record not delivered
// or of the footer once all are (u64), CRC-32C of the first 28 bytes (u32).
// Version 1 (20 bytes, written by older versions and WriteConfirmed):
// magic, count, CRC of the first 16 bytes; a reader of it must skip the
// counted records from the start. The drain replaces its sidecars
// atomically but not durably (NoteProgress: temporary file, rename; no
// fdatasync, no directory fsync): a process crash keeps the new one, a
// power loss may leave an older one or a torn one, which its reader must
// take as nothing delivered. Every sidecar the drain writes counts only
// records the sink had committed, so whichever one survives never leads.
// Repair and Salvage lower sidecars durably (WriteProgress: temporary
// file, fdatasync, rename, directory fsync), since a sidecar that counts
// past a repaired segment's records must not come back.
//
// All file access goes through a vfs.FS, so that tests can inject faults.
package wab
