package wab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/weir-io/weir/internal/vfs"
)

// DamagedDirName is the directory, under a WAB directory, where Salvage
// keeps the damaged originals: DamagedDirName/shard-NNN/<segment file>.
// Open does not look into it.
const DamagedDirName = "damaged"

// ErrCannotSalvage is returned (wrapped) for a damaged segment that Salvage
// leaves as it is: its header is damaged (without it the records' ids
// cannot be kept), or the resynchronisation scan gave up.
var ErrCannotSalvage = errors.New("segment cannot be salvaged")

// Range is a byte range [Off, End) of a segment file.
type Range struct {
	Off, End int64
	// Records counts the record frames in a kept range (0 in a lost one).
	Records uint64
	// Frames, in a lost range when Counted, is how many frames it held:
	// their length fields, read from its start, are plausible and lead
	// exactly to its end (the damage is in their bodies). Otherwise a
	// length field is damaged too and the count cannot be known.
	Frames  uint64
	Counted bool
}

// Salvaged describes what Salvage did with one damaged segment.
type Salvaged struct {
	// Kept are the ranges of valid frames copied into the new segment, in
	// file order: the frames before the first damage, then every run of
	// valid frames found after it by resynchronising.
	Kept []Range
	// Lost are the ranges that hold no valid frame and were not copied.
	// How many frames one held is known only when the length fields in it
	// are intact (Range.Counted).
	Lost []Range
	// Records is the number of records kept; BytesLost the bytes of Lost.
	Records   uint64
	BytesLost int64
	// Moved counts the kept records that follow a lost range: their index
	// in the segment is lower than it was. A record whose id derives from
	// its position (one with neither an id of its own nor an idempotent
	// producer's sequence in its meta) gets a new id; the others keep
	// theirs.
	Moved uint64
	// Aside is where the damaged original was kept: a byte-for-byte copy
	// under DamagedDirName (or the original itself, moved there, when no
	// record was left to keep).
	Aside string
	// Removed reports that no record was left, so the segment was moved
	// aside and no new one written.
	Removed bool
	// Progress reports that the segment's .confirmed sidecar was lowered
	// to the records kept before the first damage.
	Progress bool
}

// Salvage is Repair's alternative to cutting: it finds the same damaged
// segments and, for each, writes a new segment holding every valid frame
// of the old one — those before the damage and those after it, found by
// resynchronising on frame boundaries as recovery does — byte for byte,
// under the old header (so the same shard, sequence and uid). The new
// segment replaces the old one under its name; a sealed one gets a new
// footer. A damaged original is never deleted: a byte-for-byte copy of it
// is made durable under DamagedDirName before the new segment replaces it
// (with a rename, so that there is always one of the two in place), and
// where it went is in the report.
//
// Every step follows the WAB's crash-safety rules: the new file is created
// under a temporary name (which Open removes after a crash), its header
// written, fdatasynced and its directory fsynced before anything else is
// written; then its frames, fdatasynced; then it is renamed and the
// directory fsynced. A failed fdatasync is never retried: the salvage of
// that segment stops, the original is left in place, and the error is
// returned.
//
// A segment with a damaged header is not salvaged (ErrCannotSalvage); Salvage
// goes on with the next one and returns the errors joined. The returned
// Damage has Salvaged set for each segment it salvaged.
func Salvage(ctx context.Context, fsys vfs.FS, dir string) ([]Damage, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	var errs []error
	out, err := eachDamage(ctx, fsys, dir, func(d *Damage) error {
		s, err := salvageSegment(fsys, dir, d.Path)
		if errors.Is(err, ErrCannotSalvage) {
			errs = append(errs, err)
			return nil
		}
		d.Salvaged = s
		return err
	})
	return out, errors.Join(append(errs, err)...)
}

// salvageSegment salvages one damaged segment (see Salvage).
func salvageSegment(fsys vfs.FS, wabDir, path string) (*Salvaged, error) {
	info, err := InspectSegment(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("wab: salvage: %w", err)
	}
	if !info.HeaderOK {
		return nil, fmt.Errorf("wab: salvage %s: %w: its header is damaged (%s)", path, ErrCannotSalvage, info.Corruption.Reason)
	}
	if info.Corruption == nil {
		return nil, fmt.Errorf("wab: salvage %s: the segment is not damaged", path)
	}
	src, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wab: salvage: %w", err)
	}
	defer src.Close()
	dm, err := damageAfter(src, info.Header, info.Corruption.Offset, info.Size)
	if errors.Is(err, errScanBudget) {
		return nil, fmt.Errorf("wab: salvage %s: %w: %w", path, ErrCannotSalvage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("wab: salvage %s: scan: %w", path, err)
	}
	s := plan(info, dm)
	for i := range s.Lost {
		if err := countFrames(src, info, &s.Lost[i]); err != nil {
			return nil, fmt.Errorf("wab: salvage %s: %w", path, err)
		}
	}

	shardDir := filepath.Dir(path)
	asideDir := filepath.Join(wabDir, DamagedDirName, filepath.Base(shardDir))
	if s.Aside, err = asideName(fsys, asideDir, filepath.Base(path)); err != nil {
		return nil, err
	}
	if s.Records == 0 {
		// Nothing to write: move the original aside (a durable rename) and
		// remove its sidecar.
		if err := moveAside(fsys, src, path, s.Aside); err != nil {
			return nil, err
		}
		s.Removed = true
		return s, nil
	}

	tmp := path + suffixTemp
	if err := writeSalvaged(fsys, src, tmp, info, s); err != nil {
		return nil, err
	}
	removeTmp := func() { _ = fsys.Remove(tmp) }
	if err := copyDurably(fsys, src, s.Aside); err != nil {
		removeTmp()
		return nil, err
	}
	// The drain never confirms records past the first damage it reads, but
	// a sidecar may count records that were delivered before their bytes
	// went bad: lower it to what the new segment holds at the same
	// offsets, first (a sidecar may lag, never lead).
	p, err := ReadProgress(fsys, path)
	if err != nil {
		removeTmp()
		return nil, fmt.Errorf("wab: salvage: %w", err)
	}
	if p.Records > info.Records || p.Records == info.Records && p.Offset != 0 && p.Offset != info.RecordsEnd {
		if err := WriteProgress(fsys, path, Progress{Records: info.Records, Offset: info.RecordsEnd}); err != nil {
			removeTmp()
			return nil, fmt.Errorf("wab: salvage: %w", err)
		}
		s.Progress = true
	}
	if err := fsys.Rename(tmp, path); err != nil {
		removeTmp()
		return nil, fmt.Errorf("wab: salvage: replace %s: %w", path, err)
	}
	if err := fsys.SyncDir(shardDir); err != nil {
		return nil, fmt.Errorf("wab: salvage: replace %s: %w", path, err)
	}
	return s, nil
}

// plan works out which ranges of a damaged segment a salvage keeps and
// which are lost.
func plan(info SegmentInfo, dm damage) *Salvaged {
	s := &Salvaged{Records: info.Records}
	if info.RecordsEnd > HeaderSize {
		s.Kept = append(s.Kept, Range{Off: HeaderSize, End: info.RecordsEnd, Records: info.Records})
	}
	// Valid mark frames (or a valid footer) may lie between the last
	// record and the damage: passed over, not lost.
	covered := info.Corruption.Offset
	lose := func(end int64) {
		if end > covered {
			s.Lost = append(s.Lost, Range{Off: covered, End: end})
			s.BytesLost += end - covered
		}
	}
	for _, sp := range dm.spans {
		lose(sp.off)
		covered = sp.end
		if sp.footer {
			continue
		}
		s.Kept = append(s.Kept, Range{Off: sp.off, End: sp.end, Records: sp.records})
		s.Records += sp.records
		if len(s.Lost) > 0 {
			s.Moved += sp.records
		}
	}
	lose(info.Size)
	return s
}

// countFrames follows the length fields of a lost range from its start
// and sets r.Frames and r.Counted when they lead exactly to its end.
func countFrames(src vfs.File, info SegmentInfo, r *Range) error {
	marks := info.Header.Flags&FlagSyncMarks != 0
	var n uint64
	for off := r.Off; off < r.End; n++ {
		var h [FrameOverhead]byte
		if off+FrameOverhead > r.End {
			return nil
		}
		if _, err := src.ReadAt(h[:], off); err != nil {
			return fmt.Errorf("read at offset %d: %w", off, err)
		}
		bodyLen, ok := plausibleFrame(h[:], info.Size-off, marks)
		if !ok {
			return nil
		}
		off += FrameHeaderSize + bodyLen
		if off > r.End {
			return nil
		}
	}
	r.Frames, r.Counted = n, true
	return nil
}

// writeSalvaged writes the kept frames of src under its header into a new
// file at tmp, with a footer when the segment is sealed, durably: create,
// header, fdatasync, directory fsync, frames, fdatasync. On error the file
// is removed and fdatasync is not retried.
func writeSalvaged(fsys vfs.FS, src vfs.File, tmp string, info SegmentInfo, s *Salvaged) (err error) {
	f, err := createFresh(fsys, tmp)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("wab: salvage: close %s: %w", tmp, cerr)
		}
		if err != nil {
			_ = fsys.Remove(tmp)
		}
	}()
	hdr := make([]byte, HeaderSize)
	if _, err := src.ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("wab: salvage: read header of %s: %w", info.Path, err)
	}
	if _, err := f.Write(hdr); err != nil {
		return fmt.Errorf("wab: salvage: write %s: %w", tmp, classify(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: salvage: fdatasync %s: %w", tmp, classify(err))
	}
	if err := fsys.SyncDir(filepath.Dir(tmp)); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	var ft Footer
	var buf []byte
	for _, r := range s.Kept {
		for off := r.Off; off < r.End; {
			var fh [FrameOverhead]byte
			if _, err := src.ReadAt(fh[:], off); err != nil {
				return fmt.Errorf("wab: salvage: read %s at offset %d: %w", info.Path, off, err)
			}
			n := FrameHeaderSize + int64(binary.BigEndian.Uint32(fh[0:]))
			if n < FrameOverhead || off+n > r.End {
				return fmt.Errorf("wab: salvage: %s: frame at offset %d runs past its range", info.Path, off)
			}
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			b := buf[:n]
			if _, err := src.ReadAt(b, off); err != nil {
				return fmt.Errorf("wab: salvage: read %s at offset %d: %w", info.Path, off, err)
			}
			if crc(b[FrameHeaderSize:]) != binary.BigEndian.Uint32(b[4:]) {
				return fmt.Errorf("wab: salvage: %s: frame at offset %d changed while being read", info.Path, off)
			}
			if b[8] == kindRecord {
				received := int64(binary.BigEndian.Uint64(b[12:]))
				if ft.Records == 0 {
					ft.FirstReceived = received
				}
				ft.LastReceived = received
				ft.Records++
			}
			if _, err := f.Write(b); err != nil {
				return fmt.Errorf("wab: salvage: write %s: %w", tmp, classify(err))
			}
			off += n
		}
	}
	if ft.Records != s.Records {
		return fmt.Errorf("wab: salvage: %s: copied %d records, expected %d", info.Path, ft.Records, s.Records)
	}
	if info.Sealed {
		if _, err := f.Write(appendFooter(nil, ft)); err != nil {
			return fmt.Errorf("wab: salvage: write footer of %s: %w", tmp, classify(err))
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: salvage: fdatasync %s: %w", tmp, classify(err))
	}
	return nil
}

// asideName picks the path under dir where the original of a segment
// named name is kept: name itself, or name.N for the first N from 2 that is
// free.
func asideName(fsys vfs.FS, dir, name string) (string, error) {
	for n := 1; ; n++ {
		p := filepath.Join(dir, name)
		if n > 1 {
			p += "." + strconv.Itoa(n)
		}
		_, err := fsys.Stat(p)
		if isNotExist(err) {
			return p, nil
		}
		if err != nil {
			return "", fmt.Errorf("wab: salvage: %w", err)
		}
	}
}

// copyDurably copies src whole into a new file at dst: written under a
// temporary name, fdatasynced, renamed, the directory fsynced.
func copyDurably(fsys vfs.FS, src vfs.File, dst string) (err error) {
	dir := filepath.Dir(dst)
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wab: salvage: %w", classify(err))
	}
	tmp := dst + suffixTemp
	f, err := createFresh(fsys, tmp)
	if err != nil {
		return err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			_ = fsys.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, io.NewSectionReader(src, 0, 1<<62)); err != nil {
		return fmt.Errorf("wab: salvage: copy to %s: %w", tmp, classify(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: salvage: fdatasync %s: %w", tmp, classify(err))
	}
	cerr := f.Close()
	f = nil
	if cerr != nil {
		return fmt.Errorf("wab: salvage: close %s: %w", tmp, cerr)
	}
	if err := fsys.Rename(tmp, dst); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	return nil
}

// moveAside renames a segment to dst durably (fdatasync, rename, fsync of
// both directories) and removes its sidecar.
func moveAside(fsys vfs.FS, f vfs.File, path, dst string) error {
	dir := filepath.Dir(dst)
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wab: salvage: %w", classify(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: salvage: fdatasync %s: %w", path, err)
	}
	if err := fsys.Rename(path, dst); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	if err := fsys.Remove(ConfirmedPath(path)); err != nil && !isNotExist(err) {
		return fmt.Errorf("wab: salvage: remove sidecar: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("wab: salvage: %w", err)
	}
	return nil
}

// createFresh creates a temporary file, replacing one a crash left.
func createFresh(fsys vfs.FS, tmp string) (vfs.File, error) {
	if err := fsys.Remove(tmp); err != nil && !isNotExist(err) {
		return nil, fmt.Errorf("wab: salvage: remove stale %s: %w", tmp, err)
	}
	f, err := fsys.Create(tmp, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wab: salvage: create %s: %w", tmp, classify(err))
	}
	return f, nil
}
