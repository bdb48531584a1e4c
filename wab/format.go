package wab

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Format constants. The layout is described in the package documentation
// and in docs/wab_format.md; every integer is big endian.
const (
	// Version is the segment format version written by this package.
	Version uint16 = 1
	// HeaderSize is the size of a segment header.
	HeaderSize = 64
	// FrameHeaderSize is the size of a frame's length and checksum fields.
	FrameHeaderSize = 8
	// BodyFixedSize is the size of a frame body before its meta and payload:
	// kind, durability, meta length and received time.
	BodyFixedSize = 12
	// FrameOverhead is what a frame costs beyond its meta and payload.
	FrameOverhead = FrameHeaderSize + BodyFixedSize
	// FooterPayloadSize is the size of a footer frame's payload.
	FooterPayloadSize = 24
	// FooterFrameSize is the size of a complete footer frame.
	FooterFrameSize = FrameOverhead + FooterPayloadSize
	// MaxMetaBytes is the largest meta a record can carry.
	MaxMetaBytes = 1<<16 - 1
	// RecordLimit is the format's hard upper bound on a record payload;
	// Options.MaxRecordBytes may not exceed it. Readers refuse any frame
	// whose body would be larger than RecordLimit+MaxMetaBytes+BodyFixedSize.
	RecordLimit = 1 << 30
	// maxBody is the largest body length a reader accepts.
	maxBody = RecordLimit + MaxMetaBytes + BodyFixedSize

	kindRecord uint8 = 1
	kindFooter uint8 = 2
	// kindMark is a sync mark frame (only in segments with FlagSyncMarks):
	// durability 0, received 0, no meta, no payload. Everything before it
	// had been fdatasynced when it was written. The flusher writes one when
	// it goes idle after a synced batch.
	kindMark uint8 = 3

	// FlagSyncMarks (segment header flags): bit 7 of a record frame's
	// durability byte is its sync mark (syncMarkBit).
	FlagSyncMarks uint32 = 1
	// syncMarkBit, set in the durability byte of a record frame, says that
	// everything before the frame had been fdatasynced when it was
	// written. The flusher sets it on the first frame of a batch that
	// follows a completed fdatasync (or the segment's creation).
	syncMarkBit = 0x80
	// FlagTimeOrderedIDs (segment header flags): ids derived from the
	// segment's records (a record's position, an idempotent producer's
	// sequence) are laid out by time, record.TimeOrdered at the record's
	// event time else its receive time. A segment without it was written
	// before, and its records keep the ids they were first delivered under.
	FlagTimeOrderedIDs uint32 = 2
	// knownFlags are the header flags this version understands.
	knownFlags = FlagSyncMarks | FlagTimeOrderedIDs
)

// Magic opens every segment file.
var magic = [8]byte{'W', 'E', 'I', 'R', 'W', 'A', 'B', 0}

// confirmedMagic opens every .confirmed sidecar.
var confirmedMagic = [8]byte{'W', 'E', 'I', 'R', 'C', 'N', 'F', 0}

// File name suffixes inside a shard directory.
const (
	SuffixOpen      = ".wab"
	SuffixSealed    = ".wab.sealed"
	SuffixConfirmed = ".wab.confirmed"
	suffixTemp      = ".tmp"
	lockName        = "LOCK"
	instanceName    = "INSTANCE"
	shardPrefix     = "shard-"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ShardDirName is the directory name of a shard inside the WAB directory.
func ShardDirName(shard int) string { return fmt.Sprintf("%s%03d", shardPrefix, shard) }

// parseShardDir returns the shard number of a shard directory name.
func parseShardDir(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, shardPrefix)
	if !ok || len(digits) < 3 || !allDigits(digits) {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || n >= DeadLetterShard {
		return 0, false
	}
	return n, true
}

// SegmentName is the file name of an open segment with sequence seq; append
// ".sealed" for the sealed name.
func SegmentName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, SuffixOpen) }

// segKind classifies a name found in a shard directory.
type segKind int

const (
	kindUnknown segKind = iota
	kindOpenSeg
	kindSealedSeg
	kindConfirmed
	kindTemp
)

func parseSegmentName(name string) (uint64, segKind) {
	if strings.HasSuffix(name, suffixTemp) {
		return 0, kindTemp
	}
	if len(name) < 20 || !allDigits(name[:20]) {
		return 0, kindUnknown
	}
	seq, err := strconv.ParseUint(name[:20], 10, 64)
	if err != nil {
		return 0, kindUnknown
	}
	switch name[20:] {
	case SuffixOpen:
		return seq, kindOpenSeg
	case SuffixSealed:
		return seq, kindSealedSeg
	case SuffixConfirmed:
		return seq, kindConfirmed
	}
	return 0, kindUnknown
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// encodeHeader fills b (HeaderSize bytes) with h.
func encodeHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	copy(b[0:8], magic[:])
	binary.BigEndian.PutUint16(b[8:], h.Version)
	binary.BigEndian.PutUint16(b[10:], h.Shard)
	binary.BigEndian.PutUint32(b[12:], h.Flags)
	binary.BigEndian.PutUint64(b[16:], h.Seq)
	binary.BigEndian.PutUint64(b[24:], h.UID)
	binary.BigEndian.PutUint64(b[32:], uint64(h.Created))
	copy(b[40:56], h.Instance[:])
	binary.BigEndian.PutUint32(b[56:], 0) // reserved
	binary.BigEndian.PutUint32(b[60:], crc(b[:60]))
}

// decodeHeader parses and checks a header; reason is empty when it is valid.
func decodeHeader(b []byte) (h Header, reason string) {
	if len(b) < HeaderSize {
		return h, "short header"
	}
	if [8]byte(b[0:8]) != magic {
		return h, "bad magic"
	}
	if got, want := binary.BigEndian.Uint32(b[60:]), crc(b[:60]); got != want {
		return h, fmt.Sprintf("header checksum mismatch (stored %08x, computed %08x)", got, want)
	}
	h.Version = binary.BigEndian.Uint16(b[8:])
	if h.Version != Version {
		return h, fmt.Sprintf("unsupported version %d", h.Version)
	}
	h.Shard = binary.BigEndian.Uint16(b[10:])
	h.Flags = binary.BigEndian.Uint32(b[12:])
	if unknown := h.Flags &^ knownFlags; unknown != 0 {
		return h, fmt.Sprintf("unknown header flags %#x", unknown)
	}
	h.Seq = binary.BigEndian.Uint64(b[16:])
	h.UID = binary.BigEndian.Uint64(b[24:])
	h.Created = int64(binary.BigEndian.Uint64(b[32:]))
	copy(h.Instance[:], b[40:56])
	return h, ""
}

// appendFrame appends one frame to dst without allocating beyond dst's growth.
func appendFrame(dst []byte, kind uint8, d Durability, received int64, meta, payload []byte) []byte {
	bodyLen := BodyFixedSize + len(meta) + len(payload)
	start := len(dst)
	dst = append(dst, make([]byte, FrameOverhead)...)
	dst = append(dst, meta...)
	dst = append(dst, payload...)
	f := dst[start:]
	binary.BigEndian.PutUint32(f[0:], uint32(bodyLen))
	f[8] = kind
	f[9] = byte(d)
	binary.BigEndian.PutUint16(f[10:], uint16(len(meta)))
	binary.BigEndian.PutUint64(f[12:], uint64(received))
	binary.BigEndian.PutUint32(f[4:], crc(f[8:]))
	return dst
}

// appendRecord appends a record frame.
func appendRecord(dst []byte, d Durability, received int64, meta, payload []byte) []byte {
	return appendFrame(dst, kindRecord, d, received, meta, payload)
}

// appendMarkedRecord appends a record frame carrying the sync mark (only in
// segments whose header has FlagSyncMarks).
func appendMarkedRecord(dst []byte, d Durability, received int64, meta, payload []byte) []byte {
	return appendFrame(dst, kindRecord, d|syncMarkBit, received, meta, payload)
}

// appendMark appends a sync mark frame.
func appendMark(dst []byte) []byte { return appendFrame(dst, kindMark, 0, 0, nil, nil) }

// appendFooter appends a footer frame.
func appendFooter(dst []byte, ft Footer) []byte {
	var p [FooterPayloadSize]byte
	binary.BigEndian.PutUint64(p[0:], ft.Records)
	binary.BigEndian.PutUint64(p[8:], uint64(ft.FirstReceived))
	binary.BigEndian.PutUint64(p[16:], uint64(ft.LastReceived))
	return appendFrame(dst, kindFooter, 0, 0, nil, p[:])
}

// RecordSize is the number of bytes a record occupies in a segment.
func RecordSize(metaLen, payloadLen int) int64 {
	return int64(FrameOverhead + metaLen + payloadLen)
}

// RecordID is the deterministic id of the index-th record (0-based) of a
// segment: 128 bits of SHA-256 over the instance, shard, segment uid,
// index and payload.
func RecordID(h Header, index uint64, payload []byte) [16]byte {
	var pre [16 + 2 + 8 + 8]byte
	copy(pre[:16], h.Instance[:])
	binary.BigEndian.PutUint16(pre[16:], h.Shard)
	binary.BigEndian.PutUint64(pre[18:], h.UID)
	binary.BigEndian.PutUint64(pre[26:], index)
	d := sha256.New()
	d.Write(pre[:])
	d.Write(payload)
	var sum [sha256.Size]byte
	d.Sum(sum[:0])
	return [16]byte(sum[:16])
}

// randomUID returns a random non-zero segment uid.
func randomUID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("wab: random uid: %w", err)
		}
		if u := binary.BigEndian.Uint64(b[:]); u != 0 {
			return u, nil
		}
	}
}
