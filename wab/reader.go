package wab

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/weir-io/weir/internal/vfs"
)

// Reader reads one segment file sequentially, checking every record's
// length and CRC before using it. It never modifies the file.
//
// Whether a footer is required is decided by the file name: a path ending in
// ".sealed" must end with a footer (a clean end of file without one is
// corruption); any other path is read as an open segment, whose records may
// simply stop.
//
// The reader sees the file's size as of OpenSegment and never reads past it.
// It allocates at most one buffer as large as the largest frame, and only
// after checking that the frame fits in the file.
type Reader struct {
	f      vfs.File
	path   string
	size   int64
	sealed bool
	hdr    Header

	br     *bufio.Reader
	off    int64 // offset of the next frame
	recEnd int64 // offset just past the last record returned
	n      uint64
	skip   uint64 // records passed over by SkipTo (counted in n)
	first  int64
	last   int64
	buf    []byte
	fh     [FrameHeaderSize]byte

	footer    Footer
	hasFooter bool
	err       error // sticky: io.EOF or *CorruptionError or I/O error
}

// OpenSegment opens a segment (open or sealed) for reading and checks its
// header.
func OpenSegment(fs vfs.FS, path string) (*Reader, error) {
	if fs == nil {
		fs = vfs.OS
	}
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wab: open segment: %w", err)
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func newReader(f vfs.File, path string) (*Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wab: stat segment %s: %w", path, err)
	}
	r := &Reader{f: f, path: path, size: fi.Size(), sealed: strings.HasSuffix(path, ".sealed")}
	bufSize := int64(64 << 10)
	if r.size < bufSize {
		bufSize = max(r.size, 16)
	}
	r.br = bufio.NewReaderSize(f, int(bufSize))
	if r.size < HeaderSize {
		return nil, &CorruptionError{Path: path, Offset: 0, Reason: fmt.Sprintf("file is %d bytes, shorter than the %d-byte header", r.size, HeaderSize)}
	}
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r.br, hb[:]); err != nil {
		return nil, fmt.Errorf("wab: read header of %s: %w", path, err)
	}
	h, reason := decodeHeader(hb[:])
	if reason != "" {
		return nil, &CorruptionError{Path: path, Offset: 0, Reason: reason}
	}
	r.hdr = h
	r.off = HeaderSize
	r.recEnd = HeaderSize
	return r, nil
}

// Header is the segment's header.
func (r *Reader) Header() Header { return r.hdr }

// Size is the file size the reader works within.
func (r *Reader) Size() int64 { return r.size }

func (r *Reader) corrupt(off int64, format string, args ...any) error {
	r.err = &CorruptionError{Path: r.path, Offset: off, Reason: fmt.Sprintf(format, args...)}
	return r.err
}

// Next returns the next record, io.EOF after the last one (for a sealed
// segment: after the footer, which Footer then returns), or a
// *CorruptionError. Sync mark frames are passed over. The returned slices
// are valid until the next call.
func (r *Reader) Next() (Record, error) {
	for {
		if r.err != nil {
			return Record{}, r.err
		}
		off := r.off
		body, err := r.frame(off)
		if err != nil {
			return Record{}, err
		}
		metaLen := int64(binary.BigEndian.Uint16(body[2:]))
		if metaLen > int64(len(body))-BodyFixedSize {
			return Record{}, r.corrupt(off, "meta length %d exceeds frame body", metaLen)
		}
		switch kind := body[0]; {
		case kind == kindRecord:
			return r.record(off, body, metaLen)
		case kind == kindFooter:
			return Record{}, r.footerFrame(off, body, metaLen)
		case kind == kindMark && r.hdr.Flags&FlagSyncMarks != 0:
			if len(body) != BodyFixedSize || body[1] != 0 {
				return Record{}, r.corrupt(off, "malformed sync mark (body %d bytes, durability %d)", len(body), body[1])
			}
			r.off = off + FrameOverhead
		default:
			return Record{}, r.corrupt(off, "unknown frame kind %d", kind)
		}
	}
}

// frame reads the frame at off (the reader's position) and returns its
// body once its length and CRC are checked; at the end of the file it
// returns io.EOF (an open segment) or a corruption (a sealed one).
func (r *Reader) frame(off int64) ([]byte, error) {
	remain := r.size - off
	if remain == 0 {
		if r.sealed {
			return nil, r.corrupt(off, "sealed segment ends without a footer")
		}
		r.err = io.EOF
		return nil, io.EOF
	}
	if remain < FrameHeaderSize {
		return nil, r.corrupt(off, "truncated frame header (%d bytes left)", remain)
	}
	if _, err := io.ReadFull(r.br, r.fh[:]); err != nil {
		return nil, r.ioErr(off, err)
	}
	bodyLen := int64(binary.BigEndian.Uint32(r.fh[0:]))
	sum := binary.BigEndian.Uint32(r.fh[4:])
	if bodyLen < BodyFixedSize || bodyLen > maxBody {
		return nil, r.corrupt(off, "frame length %d out of range", bodyLen)
	}
	if bodyLen > remain-FrameHeaderSize {
		return nil, r.corrupt(off, "frame of %d bytes extends past end of file (%d bytes left)", bodyLen, remain-FrameHeaderSize)
	}
	if int64(cap(r.buf)) < bodyLen {
		r.buf = make([]byte, bodyLen)
	}
	body := r.buf[:bodyLen]
	if _, err := io.ReadFull(r.br, body); err != nil {
		return nil, r.ioErr(off, err)
	}
	if got := crc(body); got != sum {
		return nil, r.corrupt(off, "frame checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	return body, nil
}

// record returns the record frame at off.
func (r *Reader) record(off int64, body []byte, metaLen int64) (Record, error) {
	dur := Durability(body[1])
	if r.hdr.Flags&FlagSyncMarks != 0 {
		dur &^= syncMarkBit
	}
	if dur != Durable && dur != Buffered {
		return Record{}, r.corrupt(off, "unknown durability %d", body[1])
	}
	received := int64(binary.BigEndian.Uint64(body[4:]))
	r.off = off + FrameHeaderSize + int64(len(body))
	r.recEnd = r.off
	if r.n == 0 {
		r.first = received
	}
	r.last = received
	r.n++
	return Record{
		Durability: dur,
		Received:   received,
		Meta:       body[BodyFixedSize : BodyFixedSize+metaLen],
		Payload:    body[BodyFixedSize+metaLen:],
	}, nil
}

// footerFrame checks the footer frame at off against the records read and
// the file's end; it returns io.EOF when all is well.
func (r *Reader) footerFrame(off int64, body []byte, metaLen int64) error {
	if len(body) != BodyFixedSize+FooterPayloadSize || metaLen != 0 {
		return r.corrupt(off, "malformed footer (body %d bytes, meta %d)", len(body), metaLen)
	}
	p := body[BodyFixedSize:]
	ft := Footer{
		Records:       binary.BigEndian.Uint64(p[0:]),
		FirstReceived: int64(binary.BigEndian.Uint64(p[8:])),
		LastReceived:  int64(binary.BigEndian.Uint64(p[16:])),
	}
	if ft.Records != r.n {
		return r.corrupt(off, "footer counts %d records, segment holds %d", ft.Records, r.n)
	}
	if r.n > r.skip && (r.skip == 0 && ft.FirstReceived != r.first || ft.LastReceived != r.last) {
		return r.corrupt(off, "footer receive times [%d, %d] differ from records' [%d, %d]", ft.FirstReceived, ft.LastReceived, r.first, r.last)
	}
	end := off + FooterFrameSize
	if end != r.size {
		return r.corrupt(end, "%d trailing bytes after footer", r.size-end)
	}
	r.off = end
	r.footer = ft
	r.hasFooter = true
	r.err = io.EOF
	return io.EOF
}

func (r *Reader) ioErr(off int64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The file shrank under us.
		return r.corrupt(off, "file ended early while reading frame")
	}
	r.err = fmt.Errorf("wab: read %s at offset %d: %w", r.path, off, err)
	return r.err
}

// SkipTo positions a reader that has not returned anything yet at record
// index (counting from 0), which starts at byte offset off, without reading
// the records before it: the next Next returns that record (or, for index
// equal to the segment's record count, finds the footer). It is how the
// drain resumes after the records a sidecar (Progress) says were delivered.
//
// The records before it are not checked, and the footer's first-receive
// time cannot be compared. SkipTo checks that off is inside the file and
// that a plausible frame header starts there (a record or, in a sealed
// segment, the footer); it returns an error and leaves the reader as it was
// otherwise. The CRC of that frame is checked by Next as usual.
func (r *Reader) SkipTo(index uint64, off int64) error {
	if r.n != 0 || r.off != HeaderSize || r.err != nil {
		return fmt.Errorf("wab: %s: SkipTo after reading", r.path)
	}
	if off < HeaderSize || off > r.size {
		return fmt.Errorf("wab: %s: offset %d is outside the records (file is %d bytes)", r.path, off, r.size)
	}
	if off < r.size || r.sealed {
		var h [FrameOverhead]byte
		if off+FrameOverhead > r.size {
			return fmt.Errorf("wab: %s: no frame fits at offset %d", r.path, off)
		}
		if _, err := r.f.ReadAt(h[:], off); err != nil {
			return fmt.Errorf("wab: %s: read frame header at offset %d: %w", r.path, off, err)
		}
		if _, ok := plausibleFrame(h[:], r.size-off, r.hdr.Flags&FlagSyncMarks != 0); !ok {
			return fmt.Errorf("wab: %s: no frame starts at offset %d", r.path, off)
		}
	}
	if _, err := r.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("wab: %s: seek to %d: %w", r.path, off, err)
	}
	r.br.Reset(r.f)
	r.off, r.recEnd, r.n, r.skip = off, off, index, index
	return nil
}

// Footer is the footer, once Next has returned io.EOF on a sealed segment.
func (r *Reader) Footer() (Footer, bool) { return r.footer, r.hasFooter }

// Offset is the byte offset just past the last record returned.
func (r *Reader) Offset() int64 { return r.recEnd }

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// SegmentInfo describes one segment file as found by InspectSegment.
type SegmentInfo struct {
	Path string
	// Sealed reports whether the name says sealed (".sealed" suffix).
	Sealed bool
	// Size is the file size.
	Size int64
	// Header is valid only when HeaderOK.
	Header   Header
	HeaderOK bool
	// Records counts the valid records before any corruption.
	Records       uint64
	FirstReceived int64
	LastReceived  int64
	// RecordsEnd is the offset just past the last valid record (the point an
	// open segment is truncated to on recovery).
	RecordsEnd int64
	// HasFooter reports a valid footer that ends the file; Footer is it.
	HasFooter bool
	Footer    Footer
	// Corruption is the first invalid thing found, nil for a clean file. For
	// an open segment it is usually a torn tail.
	Corruption *CorruptionError
	// ValidAfter is the offset of the first complete, valid frame after the
	// corruption, found by trying every byte position after it; 0 when
	// there is none.
	ValidAfter int64
	// SyncedAfter is the offset of the first valid frame after the
	// corruption that carries a sync mark (see FlagSyncMarks): it was
	// written after an fdatasync that covered the corruption's offset, so
	// the damage is to bytes that had been made durable. 0 when there is
	// none.
	SyncedAfter int64
	// RecordsAfter counts the valid records found after the corruption by
	// resynchronising at every bad frame: what cutting the file at the
	// corruption would drop.
	RecordsAfter uint64
}

// OK reports whether the file is entirely valid for its kind: a sealed
// segment with a footer, or an open segment whose records end at its size.
func (i SegmentInfo) OK() bool { return i.HeaderOK && i.Corruption == nil }

// TornTail reports an open segment whose valid records are followed by
// bytes that are what a crash left of writes never made durable: the
// normal state after a crash, which recovery cuts. In a segment with sync
// marks that means no valid frame after the corruption carries a mark; in
// one without (written by an older version) that no valid frame follows at
// all.
func (i SegmentInfo) TornTail() bool {
	if i.Sealed || !i.HeaderOK || i.Corruption == nil {
		return false
	}
	if i.Header.Flags&FlagSyncMarks != 0 {
		return i.SyncedAfter == 0
	}
	return i.ValidAfter == 0
}

// Damaged reports corruption that recovery does not cut on its own: in a
// sealed segment, or followed by a valid frame in an open one.
func (i SegmentInfo) Damaged() bool { return i.Corruption != nil && !i.TornTail() }

// InspectSegment reads a whole segment and reports what it holds. It never
// modifies the file. Corruption (including a bad header) is reported in
// SegmentInfo.Corruption; the error is for I/O failures only.
func InspectSegment(fs vfs.FS, path string) (SegmentInfo, error) {
	if fs == nil {
		fs = vfs.OS
	}
	info := SegmentInfo{Path: path, Sealed: strings.HasSuffix(path, ".sealed")}
	f, err := fs.Open(path)
	if err != nil {
		return info, fmt.Errorf("wab: open segment: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		info.Size = fi.Size()
	}
	r, err := newReader(f, path)
	if err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			info.Corruption = ce
			return info, nil
		}
		return info, err
	}
	info.Size = r.size
	info.Header, info.HeaderOK = r.hdr, true
	for {
		_, err := r.Next()
		if err == nil {
			continue
		}
		info.Records, info.FirstReceived, info.LastReceived = r.n, r.first, r.last
		info.RecordsEnd = r.recEnd
		info.Footer, info.HasFooter = r.Footer()
		var ce *CorruptionError
		switch {
		case errors.Is(err, io.EOF):
			return info, nil
		case errors.As(err, &ce):
			info.Corruption = ce
			var d damage
			d, err = damageAfter(f, r.hdr, ce.Offset, r.size)
			info.ValidAfter, info.SyncedAfter, info.RecordsAfter = d.first, d.synced, d.records
			if errors.Is(err, errScanBudget) {
				ce.Reason += "; " + err.Error()
				err = nil
			}
			return info, err
		default:
			return info, err
		}
	}
}
