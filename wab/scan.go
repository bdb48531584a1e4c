package wab

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/weir-io/weir/internal/vfs"
)

// Resynchronisation: after a frame that is not valid, is there a valid
// frame further on? Recovery needs the answer to tell a torn tail (nothing
// valid follows: the bytes are what a crash left of the last writes, and
// may be cut) from damage in the middle of a segment (something valid
// follows, so the records after the damage were written later and may have
// been acknowledged: refuse, as for a sealed segment).
//
// The scan tries every byte position after the bad frame's offset. A
// position is a candidate when the 20 bytes there parse as a plausible
// frame header (length in range and within the file, known kind,
// durability and a meta length that fits; a footer of the footer's exact
// shape); only candidates get their CRC checked. Zeros are skipped in bulk
// (a length of 0 is never valid), so the zero-filled pages a crash leaves
// cost next to nothing, and the scan never reads past the file's size: the
// space fallocate reserved beyond it is not part of the file.
//
// CRC work on candidates is bounded (scanCRCBudget); a scan that runs out of
// budget cannot rule out a valid frame and answers as if it had found one
// (the conservative answer: refuse rather than cut).

const (
	scanWindow = 1 << 20
	// scanCRCBudgetMin is the least CRC work a scan may do on candidates,
	// on top of twice the bytes it scans.
	scanCRCBudgetMin = 64 << 20
)

// errScanBudget is returned (wrapped) by nextValidFrame when it gave up.
var errScanBudget = errors.New("resynchronisation scan gave up (too many plausible frame headers)")

// plausibleFrame reports whether h (at least FrameOverhead bytes) starts a
// frame whose fixed fields are valid and which ends within remain bytes;
// marks allows the sync mark on a record frame.
func plausibleFrame(h []byte, remain int64, marks bool) (bodyLen int64, ok bool) {
	bodyLen = int64(binary.BigEndian.Uint32(h[0:]))
	if bodyLen < BodyFixedSize || bodyLen > maxBody || bodyLen > remain-FrameHeaderSize {
		return 0, false
	}
	kind, dur := h[8], Durability(h[9])
	metaLen := int64(binary.BigEndian.Uint16(h[10:]))
	if metaLen > bodyLen-BodyFixedSize {
		return 0, false
	}
	switch kind {
	case kindRecord:
		if marks {
			dur &^= syncMarkBit
		}
		return bodyLen, dur == Durable || dur == Buffered
	case kindFooter:
		return bodyLen, dur == Durable && metaLen == 0 && bodyLen == BodyFixedSize+FooterPayloadSize
	case kindMark:
		return bodyLen, marks && dur == 0 && bodyLen == BodyFixedSize
	}
	return 0, false
}

// frameScanner finds valid frames in a file by trying every position.
type frameScanner struct {
	f      vfs.File
	size   int64
	marks  bool // the segment's header has FlagSyncMarks
	win    []byte
	winOff int64 // file offset of win[0]
	budget int64 // CRC bytes left
	body   []byte
}

func newFrameScanner(f vfs.File, h Header, from, size int64) *frameScanner {
	return &frameScanner{f: f, size: size, marks: h.Flags&FlagSyncMarks != 0, winOff: -1, budget: 2*(size-from) + scanCRCBudgetMin}
}

// window makes s.win hold the file from off (at least FrameOverhead bytes
// when the file has them) and returns the slice starting at off.
func (s *frameScanner) window(off int64) ([]byte, error) {
	if s.winOff >= 0 && off >= s.winOff && off+FrameOverhead <= s.winOff+int64(len(s.win)) {
		return s.win[off-s.winOff:], nil
	}
	n := min(int64(scanWindow), s.size-off)
	if cap(s.win) < int(n) {
		s.win = make([]byte, n)
	}
	s.win = s.win[:n]
	if _, err := s.f.ReadAt(s.win, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	s.winOff = off
	return s.win, nil
}

// crcAt computes the CRC of n bytes at off, reading in pieces.
func (s *frameScanner) crcAt(off, n int64) (uint32, error) {
	s.budget -= n
	if off >= s.winOff && off+n <= s.winOff+int64(len(s.win)) {
		return crc(s.win[off-s.winOff : off-s.winOff+n]), nil
	}
	if s.body == nil {
		s.body = make([]byte, scanWindow)
	}
	var sum uint32
	for n > 0 {
		k := min(n, int64(len(s.body)))
		if _, err := s.f.ReadAt(s.body[:k], off); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		sum = crc32.Update(sum, castagnoli, s.body[:k])
		off += k
		n -= k
	}
	return sum, nil
}

// next returns the offset of the first valid frame starting at or after
// from, and whether there is one.
func (s *frameScanner) next(from int64) (int64, bool, error) {
	for p := from; p+FrameOverhead <= s.size; {
		w, err := s.window(p)
		if err != nil {
			return 0, false, err
		}
		// Candidates in this window (each needs FrameOverhead bytes).
		last := int64(len(w)) - FrameOverhead
		for i := int64(0); i <= last; i++ {
			if w[i] == 0 && w[i+1] == 0 && w[i+2] == 0 && w[i+3] == 0 {
				// A zero length: skip to just before the next non-zero byte.
				j := i + 4
				for j < int64(len(w)) && w[j] == 0 {
					j++
				}
				i = max(i, j-4)
				continue
			}
			bodyLen, ok := plausibleFrame(w[i:], s.size-(p+i), s.marks)
			if !ok {
				continue
			}
			if s.budget < 0 {
				return p + i, true, fmt.Errorf("at offset %d: %w", p+i, errScanBudget)
			}
			sum, err := s.crcAt(p+i+FrameHeaderSize, bodyLen)
			if err != nil {
				return 0, false, err
			}
			if sum == binary.BigEndian.Uint32(w[i+4:]) {
				return p + i, true, nil
			}
			// crcAt may have replaced nothing: w stays valid (window is
			// only changed by s.window).
		}
		p += last + 1
	}
	return 0, false, nil
}

// frameLen is the on-disk length of the (valid) frame at off.
func (s *frameScanner) frameLen(off int64) (int64, error) {
	w, err := s.window(off)
	if err != nil {
		return 0, err
	}
	return FrameHeaderSize + int64(binary.BigEndian.Uint32(w[0:])), nil
}

// kindAt returns the kind of the (valid) frame at off and whether it
// carries the sync mark.
func (s *frameScanner) kindAt(off int64) (kind uint8, marked bool, err error) {
	w, err := s.window(off)
	if err != nil {
		return 0, false, err
	}
	marked = w[8] == kindMark || w[8] == kindRecord && s.marks && w[9]&syncMarkBit != 0
	return w[8], marked, nil
}

// damage describes what a file holds after a bad frame.
type damage struct {
	// first is the offset of the first valid frame after the bad one; 0
	// when there is none (a torn tail).
	first int64
	// synced is the offset of the first valid frame after the bad one
	// that carries the sync mark: proof that the bad frame had been
	// fdatasynced before the crash. 0 when there is none.
	synced int64
	// records counts the valid records after the bad frame.
	records uint64
	// spans are the runs of valid frames found after the bad frame, in
	// file order: what a salvage keeps (see Salvage). A footer frame is a
	// span of its own, so that the frames a salvage copies never include
	// one.
	spans []span
}

// span is a run of valid frames, back to back, at [off, end) of a file.
type span struct {
	off, end int64
	// records counts the record frames in it.
	records uint64
	// footer reports a lone footer frame.
	footer bool
}

// damageAfter scans what a file holds after a bad frame at bad, by
// resynchronising at every bad frame up to the end of the file. A scan that
// gives up (errScanBudget) reports the position it stopped at as the first
// valid and first synced frame: it cannot rule either out.
func damageAfter(f vfs.File, h Header, bad, size int64) (damage, error) {
	var d damage
	s := newFrameScanner(f, h, bad, size)
	for p := bad + 1; p < size; {
		off, ok, err := s.next(p)
		if errors.Is(err, errScanBudget) {
			d.first = cmp.Or(d.first, off)
			d.synced = cmp.Or(d.synced, off)
			return d, err
		}
		if err != nil || !ok {
			return d, err
		}
		d.first = cmp.Or(d.first, off)
		// Follow the valid frames from here as a reader would.
		run := span{off: off}
		for ok {
			kind, marked, err := s.kindAt(off)
			if err != nil {
				return d, err
			}
			if kind == kindRecord {
				d.records++
				run.records++
			}
			if marked && d.synced == 0 {
				d.synced = off
			}
			n, err := s.frameLen(off)
			if err != nil {
				return d, err
			}
			if kind == kindFooter {
				d.addSpan(run.off, off, run.records, false)
				d.addSpan(off, off+n, 0, true)
				run = span{off: off + n}
			}
			off += n
			ok = s.validAt(off)
		}
		d.addSpan(run.off, off, run.records, false)
		p = off + 1
	}
	return d, nil
}

// addSpan records a run of valid frames, unless it is empty.
func (d *damage) addSpan(off, end int64, records uint64, footer bool) {
	if end > off {
		d.spans = append(d.spans, span{off: off, end: end, records: records, footer: footer})
	}
}

// validAt reports whether a valid frame starts exactly at off.
func (s *frameScanner) validAt(off int64) bool {
	if off+FrameOverhead > s.size {
		return false
	}
	w, err := s.window(off)
	if err != nil {
		return false
	}
	bodyLen, ok := plausibleFrame(w, s.size-off, s.marks)
	if !ok {
		return false
	}
	sum, err := s.crcAt(off+FrameHeaderSize, bodyLen)
	return err == nil && sum == binary.BigEndian.Uint32(w[4:])
}
