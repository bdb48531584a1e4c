// Command restartbench measures how long a restart takes with a large sealed
// backlog in the write-ahead buffer: wab.Open, then the drain's positioning
// at the first record it has not delivered yet, up to the moment the sink
// is handed that record.
//
//	go run ./internal/tools/restartbench gen -dir /var/tmp/wabbench -bytes 5GiB
//	go run ./internal/tools/restartbench run -dir /var/tmp/wabbench -runs 3 -drop-caches
//
// gen writes sealed segments of -segment bytes (1 KiB records) until the
// backlog holds -bytes, and a .confirmed sidecar for the first segment that
// marks all but its last -left records delivered (version 1, count only, or
// version 2, count and offset: -sidecar; the sidecar command rewrites it).
// run opens the directory with wab.Open, starts a drain whose sink stops
// the clock at its first Commit, and prints the times; with -drop-caches it
// writes 3 to /proc/sys/vm/drop_caches (root only) before each run, for a
// cold start. docs/benchmarks.md has the figures and the full recipe.
// The backlog is never modified (the sink refuses the batch, so nothing is
// confirmed); remove the directory afterwards.
//
// It uses only APIs that older versions of weir have too, so the same
// program measures a build from before the change (with -sidecar v1).
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: restartbench gen|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "sidecar":
		err = sidecar(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "restartbench:", err)
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

const (
	headerSize    = 64 // wab.HeaderSize
	frameOverhead = 20 // wab.FrameOverhead
)

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	dir := fs.String("dir", "", "WAB directory to create (must not exist)")
	total := fs.String("bytes", "5GiB", "backlog size")
	segSize := fs.String("segment", "256MiB", "segment size")
	recSize := fs.Int("record", 1024, "payload bytes per record")
	left := fs.Int("left", 16, "records of the first segment not yet delivered")
	sidecarV := fs.String("sidecar", "v2", "sidecar version: v1 (count) or v2 (count and offset)")
	fs.Parse(args)
	totalB, err := parseSize(*total)
	if err != nil {
		return err
	}
	segB, err := parseSize(*segSize)
	if err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	if _, err := os.Stat(*dir); err == nil {
		return fmt.Errorf("%s exists", *dir)
	}
	sdir := filepath.Join(*dir, wab.ShardDirName(0))
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return err
	}
	perSeg := int((segB - headerSize - 44) / int64(frameOverhead+*recSize))
	payload := []byte(strings.Repeat("r", *recSize))
	recs := make([]wab.Record, perSeg)
	for i := range recs {
		recs[i] = wab.Record{Received: int64(i + 1), Payload: payload}
	}
	var written int64
	seq := uint64(1)
	start := time.Now()
	for ; written < totalB; seq++ {
		path := filepath.Join(sdir, wab.SegmentName(seq)+".sealed")
		if err := wab.WriteSealed(nil, path, wab.Header{Shard: 0, Seq: seq}, recs); err != nil {
			return err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		written += fi.Size()
	}
	fmt.Printf("wrote %d segments, %d bytes (%d records each) in %v\n",
		seq-1, written, perSeg, time.Since(start).Round(time.Millisecond))
	return writeSidecar(*dir, *sidecarV, *recSize, *left)
}

// sidecar rewrites the first segment's sidecar in the given version.
func sidecar(args []string) error {
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	dir := fs.String("dir", "", "WAB directory made by gen")
	recSize := fs.Int("record", 1024, "payload bytes per record (as given to gen)")
	left := fs.Int("left", 16, "records of the first segment not yet delivered")
	version := fs.String("sidecar", "v2", "sidecar version: v1 (count) or v2 (count and offset)")
	fs.Parse(args)
	return writeSidecar(*dir, *version, *recSize, *left)
}

// writeSidecar marks all but left records of the first segment delivered.
func writeSidecar(dir, version string, recSize, left int) error {
	first := filepath.Join(dir, wab.ShardDirName(0), wab.SegmentName(1)+".sealed")
	fi, err := os.Stat(first)
	if err != nil {
		return err
	}
	perSeg := (fi.Size() - headerSize - 44) / int64(frameOverhead+recSize)
	n := uint64(perSeg - int64(left))
	switch version {
	case "v1":
		err = wab.WriteConfirmed(nil, first, n)
	case "v2":
		err = writeSidecarV2(first, n, headerSize+int64(n)*int64(frameOverhead+recSize))
	default:
		err = fmt.Errorf("-sidecar %q: want v1 or v2", version)
	}
	if err == nil {
		fmt.Printf("sidecar %s: %d of %d records of the first segment delivered\n", version, n, perSeg)
	}
	return err
}

// writeSidecarV2 writes a version-2 .confirmed sidecar as docs/wab_format.md
// specifies it, so that this program builds against versions of the wab
// package that cannot write one.
func writeSidecarV2(segPath string, n uint64, off int64) error {
	b := make([]byte, 32)
	copy(b, "WEIRCNF\x00")
	binary.BigEndian.PutUint32(b[8:], 2)
	binary.BigEndian.PutUint64(b[12:], n)
	binary.BigEndian.PutUint64(b[20:], uint64(off))
	binary.BigEndian.PutUint32(b[28:], crc32.Checksum(b[:28], crc32.MakeTable(crc32.Castagnoli)))
	path := strings.TrimSuffix(segPath, ".sealed") + ".confirmed"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	dir := fs.String("dir", "", "WAB directory made by gen")
	runs := fs.Int("runs", 3, "restarts to time")
	drop := fs.Bool("drop-caches", false, "drop the page cache before each run (root)")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("-dir is required")
	}
	for i := range *runs {
		if *drop {
			if err := dropCaches(); err != nil {
				return err
			}
		}
		open, first, err := restart(*dir)
		if err != nil {
			return err
		}
		fmt.Printf("run %d: open %v, first record to the sink after %v more, total %v\n",
			i+1, open.Round(time.Microsecond), first.Round(time.Microsecond), (open + first).Round(time.Microsecond))
	}
	return nil
}

func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

// restart times wab.Open, then a drain until its sink sees a record.
func restart(dir string) (open, first time.Duration, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	t0 := time.Now()
	l, err := wab.Open(ctx, wab.Options{Dir: dir, Shards: 1, Logger: quiet, SegmentMaxAge: -1, PreallocateBytes: -1})
	if err != nil {
		return 0, 0, err
	}
	open = time.Since(t0)
	defer l.Close(context.Background())
	s := &stopSink{cancel: cancel}
	d, err := drain.New(drain.Options{WABDir: dir, Source: l, Sink: s, Logger: quiet, PollInterval: time.Hour})
	if err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	if err := d.Run(ctx); err != nil {
		return 0, 0, err
	}
	if s.at.IsZero() {
		return 0, 0, errors.New("the drain stopped before handing the sink a record")
	}
	return open, s.at.Sub(t1), nil
}

// stopSink notes when its first Commit comes, cancels the run and refuses
// the batch, so that nothing is confirmed.
type stopSink struct {
	cancel context.CancelFunc
	at     time.Time
}

func (s *stopSink) Name() string      { return "stop" }
func (s *stopSink) MaxBatchSize() int { return 1000 }
func (s *stopSink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	if s.at.IsZero() {
		s.at = time.Now()
	}
	s.cancel()
	return sink.CommitResult{}, sink.Transient(errors.New("benchmark: stop"))
}
func (s *stopSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (s *stopSink) Close() error                       { return nil }
