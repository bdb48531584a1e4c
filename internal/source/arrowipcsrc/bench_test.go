package arrowipcsrc

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/source"
)

// benchRows and benchBatchRows size the benchmark's data: the same rows
// as one Arrow IPC file and as one NDJSON file of their JSON payloads.
const (
	benchRows      = 200_000
	benchBatchRows = 4096
)

// benchData writes the rows into dir as data.arrow and data.ndjson; the
// NDJSON lines are the payloads arrowrec makes of the rows, so both
// sources write the same records' bytes.
func benchData(b *testing.B, dir string) {
	b.Helper()
	var sizes []int
	for n := benchRows; n > 0; n -= benchBatchRows {
		sizes = append(sizes, min(n, benchBatchRows))
	}
	ipcBytes := writeIPC(b, true, sizes...)
	if err := os.WriteFile(filepath.Join(dir, "data.arrow"), ipcBytes, 0o644); err != nil {
		b.Fatal(err)
	}
	var nd bytes.Buffer
	rd := newReader(bytes.NewReader(ipcBytes), limits{maxMeta: DefaultMaxMetadataBytes, maxBody: DefaultMaxMessageBytes, maxRows: DefaultMaxBatchRows})
	for {
		ev, err := rd.next(int64(len(ipcBytes)))
		if err != nil {
			b.Fatal(err)
		}
		if ev.kind != evBatch {
			break
		}
		dec, err := arrowrec.NewDecoder(ev.rec.Schema(), arrowrec.Columns{})
		if err != nil {
			b.Fatal(err)
		}
		rows, err := dec.Rows(nil, ev.rec)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			nd.Write(r.Payload)
			nd.WriteByte('\n')
		}
		ev.rec.Release()
	}
	if err := os.WriteFile(filepath.Join(dir, "data.ndjson"), nd.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSourceVsNDJSON: rows/s of the arrow_ipc source reading an IPC
// file of benchRows rows, and of the file source reading the same rows
// as NDJSON, each through a real write-ahead buffer gate (fdatasync per
// write) in gate writes of 1024 records, from start until the cursor
// covers every row. Run with -benchtime=1x or a few x:
//
//	go test -run '^$' -bench SourceVsNDJSON -benchtime 3x ./internal/source/arrowipcsrc/
func BenchmarkSourceVsNDJSON(b *testing.B) {
	dir := b.TempDir()
	benchData(b, dir)
	ndSize := int64(0)
	if fi, err := os.Stat(filepath.Join(dir, "data.ndjson")); err == nil {
		ndSize = fi.Size()
	}
	quiet := slog.New(slog.DiscardHandler)
	run := func(b *testing.B, open func(done chan<- struct{}) source.Source) {
		for range b.N {
			b.StopTimer()
			wab := enginetest.OpenWAB(b, 1)
			cursors, err := engine.OpenFileCursorStore(nil, b.TempDir(), "")
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{}, 1)
			src := open(done)
			b.StartTimer()
			r := enginetest.Start(context.Background(), src, wab.Gate(b), cursors)
			select {
			case <-done:
			case <-time.After(10 * time.Minute):
				b.Fatal("the source did not finish")
			}
			b.StopTimer()
			r.Stop(b)
			_ = wab.Close()
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	signal := func(done chan<- struct{}, finished bool) {
		if finished {
			select {
			case done <- struct{}{}:
			default:
			}
		}
	}
	b.Run("arrow_ipc", func(b *testing.B) {
		run(b, func(done chan<- struct{}) source.Source {
			s, err := New(Options{Name: "bench", Glob: filepath.Join(dir, "*.arrow"), PollInterval: time.Millisecond, Logger: quiet,
				OnCommit: func(_ string, batch, _ int64) { signal(done, batch*benchBatchRows >= benchRows) }})
			if err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
	b.Run("ndjson_file", func(b *testing.B) {
		run(b, func(done chan<- struct{}) source.Source {
			s, err := filesrc.New(filesrc.Options{Name: "bench", Glob: filepath.Join(dir, "*.ndjson"), PollInterval: time.Millisecond, Logger: quiet,
				OnCommit: func(_ string, next int64) { signal(done, next >= ndSize) }})
			if err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
}
