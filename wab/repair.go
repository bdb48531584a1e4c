package wab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/weir-io/weir/internal/vfs"
)

// Damage is one segment file that Open would refuse, as Repair found it.
type Damage struct {
	Path   string
	Sealed bool
	// Offset is where the damage starts: the file is cut there.
	Offset int64
	Reason string
	// RecordsKept is how many records precede the damage.
	RecordsKept uint64
	// RecordsDropped counts the valid records found after the damage (by
	// resynchronising at every bad frame): records that cutting drops and
	// that may have been acknowledged. The damaged frame itself is not
	// counted.
	RecordsDropped uint64
	// BytesDropped is the file's size beyond Offset.
	BytesDropped int64
	// Cut reports that Repair cut the file (it was asked to); Removed that
	// it removed it instead, because nothing before the damage was left.
	Cut     bool
	Removed bool
	// Salvaged, when Salvage was asked, says what it kept and lost and
	// where the original went; nil when the segment was left as it was.
	Salvaged *Salvaged
}

// Repair checks every segment of a WAB directory in full, as Open would not
// (a sealed segment is read to its footer, not just opened by it), and
// returns the files Open refuses or the drain could not read: sealed
// segments with any corruption, open segments whose damage is not a torn
// tail. With cut, each is cut at its damage: truncated right after its
// last valid record and fdatasynced; a sealed one gets a new footer and its
// .confirmed sidecar is lowered to the records kept; a file with no record
// left is removed (with its sidecar). Records after the damage are lost
// for good, which is why it is never done without being asked.
//
// Repair takes the directory's lock, so it cannot run beside a daemon (the
// error then wraps vfs.ErrLocked). Torn tails of open segments are not
// touched: Open cuts them.
func Repair(ctx context.Context, fsys vfs.FS, dir string, cut bool) ([]Damage, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	return eachDamage(ctx, fsys, dir, func(d *Damage) error {
		if !cut {
			return nil
		}
		return cutDamage(fsys, d)
	})
}

// eachDamage takes the WAB directory's lock, finds every damaged segment
// (see Repair) and calls fn on each; it returns them all, the one fn
// failed on included, and fn's first error.
func eachDamage(ctx context.Context, fsys vfs.FS, dir string, fn func(d *Damage) error) ([]Damage, error) {
	lk, err := fsys.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wab: repair: lock %s: %w", dir, err)
	}
	defer lk.Close()
	files, err := segmentPaths(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Damage
	for _, path := range files {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("wab: repair interrupted: %w", err)
		}
		d, ok, err := findDamage(fsys, path)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		err = fn(&d)
		out = append(out, d)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// segmentPaths lists every open and sealed segment under a WAB directory,
// by shard then name.
func segmentPaths(fsys vfs.FS, dir string) ([]string, error) {
	var out []string
	err := eachSegment(fsys, dir, func(_ int, _ uint64, _ segKind, path string) { out = append(out, path) })
	slices.Sort(out)
	return out, err
}

// findDamage inspects one segment in full and describes its damage, if it
// has any that Open or the drain would not get past.
func findDamage(fsys vfs.FS, path string) (Damage, bool, error) {
	info, err := InspectSegment(fsys, path)
	if err != nil {
		return Damage{}, false, fmt.Errorf("wab: repair: %w", err)
	}
	if info.Corruption == nil || info.TornTail() {
		return Damage{}, false, nil
	}
	d := Damage{
		Path: path, Sealed: info.Sealed,
		Offset: info.RecordsEnd, Reason: info.Corruption.Error(),
		RecordsKept: info.Records, RecordsDropped: info.RecordsAfter,
	}
	if !info.HeaderOK {
		// Nothing in the file can be trusted without its header: count
		// what looks valid after it, allowing either frame format.
		d.Offset = 0
		f, err := fsys.Open(path)
		if err != nil {
			return Damage{}, false, fmt.Errorf("wab: repair: %w", err)
		}
		dm, err := damageAfter(f, Header{Flags: FlagSyncMarks}, 0, info.Size)
		f.Close()
		if err != nil && !errors.Is(err, errScanBudget) {
			return Damage{}, false, fmt.Errorf("wab: repair: scan %s: %w", path, err)
		}
		d.RecordsDropped = dm.records
	}
	d.BytesDropped = info.Size - d.Offset
	return d, true, nil
}

// cutDamage cuts one file at d.Offset (see Repair).
func cutDamage(fsys vfs.FS, d *Damage) error {
	if d.RecordsKept == 0 {
		if err := RemoveSegment(fsys, d.Path); err != nil {
			return fmt.Errorf("wab: repair: %w", err)
		}
		d.Removed = true
		return nil
	}
	info, err := InspectSegment(fsys, d.Path)
	if err != nil {
		return fmt.Errorf("wab: repair: %w", err)
	}
	f, err := fsys.OpenReadWrite(d.Path)
	if err != nil {
		return fmt.Errorf("wab: repair: %w", err)
	}
	if err := truncateAndSeal(f, d.Path, info, d.Sealed); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("wab: repair %s: close: %w", d.Path, err)
	}
	d.Cut = true
	if !d.Sealed {
		return nil // Open seals it
	}
	p, err := ReadProgress(fsys, d.Path)
	if err != nil || p.Records <= info.Records {
		return err
	}
	// The drain had confirmed records that are gone now: all the kept ones
	// were delivered.
	end := info.RecordsEnd
	return WriteProgress(fsys, d.Path, Progress{Records: info.Records, Offset: end})
}

// truncateAndSeal truncates f after its last valid record and fdatasyncs
// it; with footer, it then appends a footer for the records kept and
// fdatasyncs again. Nothing is retried after a failed sync.
func truncateAndSeal(f vfs.File, path string, info SegmentInfo, footer bool) error {
	if err := f.Truncate(info.RecordsEnd); err != nil {
		return fmt.Errorf("wab: %s: truncate: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: %s: fdatasync: %w", path, err)
	}
	if !footer {
		return nil
	}
	if _, err := f.Seek(info.RecordsEnd, io.SeekStart); err != nil {
		return fmt.Errorf("wab: %s: %w", path, err)
	}
	ft := Footer{Records: info.Records, FirstReceived: info.FirstReceived, LastReceived: info.LastReceived}
	if _, err := f.Write(appendFooter(nil, ft)); err != nil {
		return fmt.Errorf("wab: %s: write footer: %w", path, classify(err))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wab: %s: fdatasync: %w", path, err)
	}
	return nil
}
