package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
)

// defaultWABDir is where the embedded default keeps the WAB.
func defaultWABDir() string {
	if d := os.Getenv("WEIR_WAB_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("WEIR_DATA_DIR"); d != "" {
		return filepath.Join(d, "wab")
	}
	return filepath.Join("data", "wab")
}

// segmentFiles lists every segment file of a WAB directory (open and
// sealed, every shard), in shard then sequence order. It reads only
// directory listings.
func segmentFiles(dir string) ([]string, error) {
	names, err := vfs.OS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, "shard-") {
			continue
		}
		files, err := vfs.OS.ReadDir(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f, wab.SuffixOpen) || strings.HasSuffix(f, wab.SuffixSealed) {
				out = append(out, filepath.Join(dir, n, f))
			}
		}
	}
	return out, nil
}

func fmtTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z")
}

// status is a segment's CRC/structure verdict for humans.
func segStatus(i wab.SegmentInfo) (string, bool) {
	switch {
	case i.OK():
		return "ok", true
	case i.TornTail():
		return fmt.Sprintf("torn tail at %d (%d bytes; cut on recovery)", i.Corruption.Offset, i.Size-i.Corruption.Offset), true
	case i.RecordsAfter > 0:
		return fmt.Sprintf("CORRUPT at %d: %s; %d valid records after it (see weir repair)", i.Corruption.Offset, i.Corruption.Reason, i.RecordsAfter), false
	default:
		return fmt.Sprintf("CORRUPT at %d: %s", i.Corruption.Offset, i.Corruption.Reason), false
	}
}

// inspect prints every segment (and dead-letter file) of a WAB directory;
// verify prints only problems and a summary. Neither modifies anything; both
// work while a daemon runs (they take no lock).
func inspect(args []string, stdout, stderr io.Writer, verifyOnly bool) int {
	name := "weir inspect"
	if verifyOnly {
		name = "weir verify"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("wab-dir", defaultWABDir(), "WAB directory (env WEIR_WAB_DIR)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 1 {
		*dir = fs.Arg(0)
	}
	files, err := segmentFiles(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	dls, err := drain.ListDeadLetters(vfs.OS, *dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: dead-letter lane: %v\n", name, err)
		return 1
	}
	for _, f := range dls {
		files = append(files, f.Path)
	}

	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	if !verifyOnly {
		fmt.Fprintln(tw, "FILE\tSHARD\tSEQ\tSTATE\tRECORDS\tBYTES\tFIRST\tLAST\tCHECK")
	}
	var bad, torn int
	var records uint64
	var bytes int64
	for _, path := range files {
		info, err := wab.InspectSegment(vfs.OS, path)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			bad++
			continue
		}
		verdict, ok := segStatus(info)
		if !ok {
			bad++
		} else if info.TornTail() {
			torn++
		}
		records += info.Records
		bytes += info.Size
		if verifyOnly && (ok && !info.TornTail()) {
			continue
		}
		state := "open"
		if info.Sealed {
			state = "sealed"
			if n, err := wab.ReadConfirmed(vfs.OS, path); err == nil && n > 0 {
				state = fmt.Sprintf("sealed, %d delivered", n)
			}
		}
		shard, seq := "-", "-"
		if info.HeaderOK {
			shard = strconv.Itoa(int(info.Header.Shard))
			if info.Header.Shard == wab.DeadLetterShard {
				shard, state = "dead-letter", "sealed"
			}
			seq = strconv.FormatUint(info.Header.Seq, 10)
		}
		rel, _ := filepath.Rel(*dir, path)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", rel, shard, seq, state, info.Records, info.Size,
			fmtTime(info.FirstReceived), fmtTime(info.LastReceived), verdict)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d files, %d records, %d bytes: %d corrupt, %d torn tails\n", len(files), records, bytes, bad, torn)
	if bad > 0 {
		return 1
	}
	return 0
}
