package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/wab"
)

// repair runs `weir repair [--cut | --salvage] [DIR]`: it finds every
// segment that wab.Open refuses (or that the drain could not read past)
// and, only when asked, cuts each at its damage (--cut) or rewrites it
// with every valid frame it still holds (--salvage). It takes the WAB
// directory's lock, so it cannot run beside a daemon.
func repair(args []string, stdout, stderr io.Writer) int {
	return repairOn(vfs.OS, args, stdout, stderr)
}

// repairOn is repair on a given file system (tests inject faults).
func repairOn(fsys vfs.FS, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	cut := fs.Bool("cut", false, "cut every damaged segment at its damage, dropping the records after it")
	salvage := fs.Bool("salvage", false, "rewrite every damaged segment with all its valid frames, those after the damage included; the original is kept under DIR/"+wab.DamagedDirName)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: weir repair [--cut | --salvage] [--wab-dir DIR | DIR]

Checks every segment of a stopped daemon's WAB directory in full and lists
those that weir serve refuses to start with (or whose records the drain
cannot read): where the damage starts, the records before it, and the valid
records after it, which cutting drops and which may have been acknowledged.
Nothing is changed without --cut or --salvage.

With --cut each file is truncated at its damage (a sealed one gets a new
footer; a file left without records is removed).

With --salvage each file is rewritten into a new segment that keeps every
valid frame, before and after the damage (found by resynchronising on frame
boundaries, as start-up does), byte for byte under the same header, so
records keep their ids unless their id derives from their position and
records before them were lost. The new segment is made durable and replaces
the damaged file only after a copy of the damaged file is durable under
DIR/damaged/shard-NNN/ (a file with no valid record left is moved there);
nothing is deleted. The report lists, per file, the byte ranges kept (with
their record counts) and lost (with their size and, when their length
fields are intact, their frame count). A file whose header is damaged is
left as it is (exit 1).

Torn tails of open segments are left to weir serve, which cuts them.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch fs.NArg() {
	case 0:
	case 1:
		*dir = fs.Arg(0)
	default:
		fs.Usage()
		return 2
	}
	if *cut && *salvage {
		fmt.Fprintln(stderr, "weir repair: --cut and --salvage exclude each other")
		return 2
	}
	var found []wab.Damage
	var err error
	if *salvage {
		found, err = wab.Salvage(context.Background(), fsys, *dir)
		reportSalvage(stdout, fsys, *dir, found)
	} else {
		found, err = wab.Repair(context.Background(), fsys, *dir, *cut)
		report(stdout, *dir, found)
	}
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			fmt.Fprintf(stderr, "weir repair: %s is in use (is weir serve running?): %v\n", *dir, err)
		} else {
			fmt.Fprintf(stderr, "weir repair: %v\n", err)
		}
		return 1
	}
	switch {
	case len(found) == 0:
		fmt.Fprintln(stdout, "no damaged segments")
		return 0
	case !*cut && !*salvage:
		fmt.Fprintln(stdout, "nothing changed; run again with --salvage to keep the valid records after the damage, or --cut to cut these files at their damage")
		return 1
	}
	return 0
}

// reportSalvage prints, per damaged file, what --salvage kept and lost and
// where the original went, then a summary.
func reportSalvage(w io.Writer, fsys vfs.FS, dir string, found []wab.Damage) {
	rel := func(p string) string {
		if r, err := filepath.Rel(dir, p); err == nil {
			return r
		}
		return p
	}
	var files, kept, moved uint64
	var lost int64
	for _, d := range found {
		state := "open"
		if d.Sealed {
			state = "sealed"
		}
		fmt.Fprintf(w, "%s (%s): damage at offset %d: %s\n", rel(d.Path), state, d.Offset, d.Reason)
		s := d.Salvaged
		if s == nil {
			fmt.Fprintln(w, "  not salvaged (the error is on stderr)")
			continue
		}
		files++
		kept += s.Records
		lost += s.BytesLost
		moved += s.Moved
		for _, r := range mergeRanges(s) {
			if r.lost {
				frames := "frame count unknown (a length field is damaged)"
				if r.Counted {
					frames = fmt.Sprintf("%d frames", r.Frames)
				}
				fmt.Fprintf(w, "  lost  [%d, %d)  %d bytes, %s\n", r.Off, r.End, r.End-r.Off, frames)
			} else {
				fmt.Fprintf(w, "  kept  [%d, %d)  %d records\n", r.Off, r.End, r.Records)
			}
		}
		switch {
		case s.Removed:
			fmt.Fprintf(w, "  no record left: the file was moved to %s\n", rel(s.Aside))
		default:
			fmt.Fprintf(w, "  salvaged: %d records kept, %d bytes in %d ranges lost; the damaged original is kept at %s\n",
				s.Records, s.BytesLost, len(s.Lost), rel(s.Aside))
		}
		if s.Moved > 0 {
			n, err := positionIDs(fsys, d.Path, s.Records-s.Moved)
			switch {
			case err != nil:
				fmt.Fprintf(w, "  %d kept records follow lost bytes; could not tell how many of them have an id derived from their position: %v\n", s.Moved, err)
			case n > 0:
				fmt.Fprintf(w, "  %d kept records follow lost bytes, %d of them with an id derived from their position (wire version-1 producers): those get a new id\n", s.Moved, n)
			}
		}
		if s.Progress {
			fmt.Fprintln(w, "  delivery progress lowered to the records before the damage (they are delivered again, with the same ids)")
		}
	}
	if len(found) > 0 {
		fmt.Fprintf(w, "%d damaged files, %d salvaged: %d records kept, %d bytes lost; originals are under %s (remove them once the salvaged segments are delivered)\n",
			len(found), files, kept, lost, filepath.Join(dir, wab.DamagedDirName))
	}
}

// salvageRange is a kept or lost range, for the report.
type salvageRange struct {
	wab.Range
	lost bool
}

// mergeRanges returns a salvage's kept and lost ranges in file order.
func mergeRanges(s *wab.Salvaged) []salvageRange {
	out := make([]salvageRange, 0, len(s.Kept)+len(s.Lost))
	for _, r := range s.Kept {
		out = append(out, salvageRange{Range: r})
	}
	for _, r := range s.Lost {
		out = append(out, salvageRange{Range: r, lost: true})
	}
	slices.SortFunc(out, func(a, b salvageRange) int { return cmp.Compare(a.Off, b.Off) })
	return out
}

// report prints one line per damaged file and a summary.
func report(w io.Writer, dir string, found []wab.Damage) {
	if len(found) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tSTATE\tDAMAGE AT\tRECORDS KEPT\tRECORDS DROPPED\tBYTES DROPPED\tACTION")
	var dropped uint64
	for _, d := range found {
		rel, err := filepath.Rel(dir, d.Path)
		if err != nil {
			rel = d.Path
		}
		state := "open"
		if d.Sealed {
			state = "sealed"
		}
		action := "none (report only)"
		switch {
		case d.Removed:
			action = "removed"
		case d.Cut:
			action = "cut"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", rel, state, d.Offset, d.RecordsKept, d.RecordsDropped, d.BytesDropped, action)
		dropped += d.RecordsDropped
	}
	tw.Flush()
	for _, d := range found {
		fmt.Fprintf(w, "  %s\n", d.Reason)
	}
	fmt.Fprintf(w, "%d damaged files; %d valid records after the damage (they may have been acknowledged)\n", len(found), dropped)
}

// positionIDs counts the records of a segment, from index from on, whose
// id derives from their position in it: those without an id of their own
// or an idempotent producer's sequence (drain.SinkRecord).
func positionIDs(fsys vfs.FS, path string, from uint64) (uint64, error) {
	r, err := wab.OpenSegment(fsys, path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var n uint64
	for i := uint64(0); ; i++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if i < from {
			continue
		}
		m, err := record.Decode(rec.Meta, record.LegacyOrigin)
		if err != nil || !m.HasID && !m.HasProducer {
			n++
		}
	}
}
