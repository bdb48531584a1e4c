package filesrc

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weir-io/weir/source"
)

// The origin index file (originIndexName in OriginOptions.Dir):
//
//	header:
//	  [8]byte magic "WEIRORG1"
//	  u16     source name length, then the name
//	  u32     CRC32C of the header's bytes before it
//	entries, one after the other, each a frame:
//	  u32     body length
//	  body:
//	    u8    entry version (1)
//	    u8    flags: 1 = first entry of its batch,
//	                 2 = the batch finished the file (a dropped rotated file)
//	    u64   first position
//	    u32   count of records (at least 1)
//	    u64   device, u64 inode, u32 generation
//	    u64   start, u64 end: the bytes [start, end) of the file the
//	          records were cut from
//	    u32   MaxLineBytes the lines were cut with
//	    u32   fingerprint length, u64 fingerprint: FNV-1a of the file's
//	          first bytes, as the source's cursor keeps it
//	    i64   read time (Unix nanoseconds; the records' Received)
//	    [8]   digest: the first 8 bytes of SHA-256 over the records' ids
//	    u16   path length, then the path the file had when read
//	  u32     CRC32C of the frame's bytes before it
//
// Integers are big-endian. The header is written to a temporary file,
// fdatasynced and renamed into place (then the directory is fsynced), so
// the index either does not exist or starts with a whole header. Entries
// are only appended, each Append's in one write and one fdatasync, and
// their positions are contiguous: every entry's first position is the one
// after the previous entry's last.
const (
	originIndexName = "origin.index"
	originLockName  = "origin.lock"
	originTmpSuffix = ".tmp"
	originMagic     = "WEIRORG1"

	entryVersion   = 1
	entryFixed     = 84 // body bytes before the path
	maxEntryPath   = 4096
	flagBatchStart = 1
	flagFinal      = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptIndex is returned by OpenOriginRaw for an index that fails its
// checks anywhere but in a torn last entry. Nothing is guessed.
var ErrCorruptIndex = errors.New("filesrc: corrupt origin index")

// inode is a file's identity across names.
type inode struct{ dev, ino uint64 }

// entry is one index entry: count records at positions [first,
// first+count), cut from bytes [start, end) of the file generation (dev,
// ino, gen).
type entry struct {
	first   uint64
	count   uint32
	flags   uint8
	dev     uint64
	ino     uint64
	gen     uint32
	start   int64
	end     int64
	maxLine uint32
	fpLen   uint32
	fp      uint64
	time    int64
	digest  [8]byte
	path    string
}

func (e *entry) inode() inode      { return inode{e.dev, e.ino} }
func (e *entry) next() uint64      { return e.first + uint64(e.count) }
func (e *entry) key() string       { return FileKey(e.dev, e.ino, e.gen) }
func (e *entry) has(p uint64) bool { return e.first <= p && p < e.next() }

// digestIDs is the entry digest of records' ids.
func digestIDs(recs []source.Record) [8]byte {
	h := sha256.New()
	for i := range recs {
		h.Write(recs[i].ID[:])
	}
	var d [8]byte
	copy(d[:], h.Sum(nil))
	return d
}

func encodeHeader(name string) []byte {
	b := append([]byte(nil), originMagic...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeHeader returns the source name and the header's length.
func decodeHeader(b []byte) (string, int, error) {
	if len(b) < len(originMagic)+6 || string(b[:len(originMagic)]) != originMagic {
		return "", 0, errors.New("bad magic or short header")
	}
	n := len(originMagic) + 2 + int(binary.BigEndian.Uint16(b[len(originMagic):]))
	if len(b) < n+4 {
		return "", 0, errors.New("short header")
	}
	if crc32.Checksum(b[:n], castagnoli) != binary.BigEndian.Uint32(b[n:]) {
		return "", 0, errors.New("header checksum mismatch")
	}
	return string(b[len(originMagic)+2 : n]), n + 4, nil
}

func appendEntry(b []byte, e *entry) []byte {
	at := len(b)
	b = binary.BigEndian.AppendUint32(b, uint32(entryFixed+len(e.path)))
	b = append(b, entryVersion, e.flags)
	b = binary.BigEndian.AppendUint64(b, e.first)
	b = binary.BigEndian.AppendUint32(b, e.count)
	b = binary.BigEndian.AppendUint64(b, e.dev)
	b = binary.BigEndian.AppendUint64(b, e.ino)
	b = binary.BigEndian.AppendUint32(b, e.gen)
	b = binary.BigEndian.AppendUint64(b, uint64(e.start))
	b = binary.BigEndian.AppendUint64(b, uint64(e.end))
	b = binary.BigEndian.AppendUint32(b, e.maxLine)
	b = binary.BigEndian.AppendUint32(b, e.fpLen)
	b = binary.BigEndian.AppendUint64(b, e.fp)
	b = binary.BigEndian.AppendUint64(b, uint64(e.time))
	b = append(b, e.digest[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.path)))
	b = append(b, e.path...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[at:], castagnoli))
}

// decodeEntry decodes the frame at the start of b, returning its length;
// ok is false unless a whole, well-formed frame with a good checksum is
// there. The cheap checks come before the checksum, so that looking for
// a frame at every offset (see decodeIndex) is cheap.
func decodeEntry(b []byte) (e entry, n int, ok bool) {
	if len(b) < 4 {
		return e, 0, false
	}
	l := int(binary.BigEndian.Uint32(b))
	if l < entryFixed || l > entryFixed+maxEntryPath || len(b) < 4+l+4 || b[4] != entryVersion {
		return e, 0, false
	}
	body := b[4 : 4+l]
	if crc32.Checksum(b[:4+l], castagnoli) != binary.BigEndian.Uint32(b[4+l:]) {
		return e, 0, false
	}
	u64 := func(at int) uint64 { return binary.BigEndian.Uint64(body[at:]) }
	u32 := func(at int) uint32 { return binary.BigEndian.Uint32(body[at:]) }
	e = entry{
		flags: body[1], first: u64(2), count: u32(10), dev: u64(14), ino: u64(22), gen: u32(30),
		start: int64(u64(34)), end: int64(u64(42)), maxLine: u32(50), fpLen: u32(54), fp: u64(58),
		time: int64(u64(66)),
	}
	copy(e.digest[:], body[74:82])
	if int(binary.BigEndian.Uint16(body[82:])) != l-entryFixed {
		return e, 0, false
	}
	e.path = string(body[entryFixed:])
	if e.count == 0 || e.start < 0 || e.end <= e.start || e.maxLine == 0 || e.first+uint64(e.count) < e.first {
		return e, 0, false
	}
	return e, 4 + l + 4, true
}

// decodeIndex decodes the entries from data[off:]. A bad entry with no
// good one anywhere after it is a torn tail (the last Append, interrupted):
// it returns the entries before it and where they end. A bad entry
// followed by a good one, or entries whose positions are not contiguous,
// are corruption.
func decodeIndex(path string, data []byte, off int) ([]entry, int, error) {
	var es []entry
	var next uint64
	for off < len(data) {
		e, n, ok := decodeEntry(data[off:])
		if !ok {
			for at := off + 1; at < len(data); at++ {
				if _, _, ok := decodeEntry(data[at:]); ok {
					return nil, 0, fmt.Errorf("%w: %s: bad entry at offset %d, followed by a good one at offset %d", ErrCorruptIndex, path, off, at)
				}
			}
			return es, off, nil
		}
		if e.first != next {
			return nil, 0, fmt.Errorf("%w: %s: entry at offset %d starts at position %d, want %d", ErrCorruptIndex, path, off, e.first, next)
		}
		es = append(es, e)
		next = e.next()
		off += n
	}
	return es, off, nil
}
