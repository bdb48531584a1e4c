package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// repair runs `weir repair [--cut] [DIR]`: it finds every segment that
// wab.Open refuses (or that the drain could not read past) and, only with
// --cut, cuts each at its damage. It takes the WAB directory's lock, so it
// cannot run beside a daemon.
func repair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	cut := fs.Bool("cut", false, "cut every damaged segment at its damage, dropping the records after it")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: weir repair [--cut] [--wab-dir DIR | DIR]

Checks every segment of a stopped daemon's WAB directory in full and lists
those that weir serve refuses to start with (or whose records the drain
cannot read): where the damage starts, the records before it, and the valid
records after it, which cutting drops and which may have been acknowledged.
Nothing is changed without --cut. With --cut each file is truncated at its
damage (a sealed one gets a new footer; a file left without records is
removed). Torn tails of open segments are left to weir serve, which cuts them.

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
	found, err := wab.Repair(context.Background(), vfs.OS, *dir, *cut)
	report(stdout, *dir, found)
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
	case !*cut:
		fmt.Fprintln(stdout, "nothing changed; run again with --cut to cut these files at their damage")
		return 1
	}
	return 0
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
