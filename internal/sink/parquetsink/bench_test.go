package parquetsink

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// BenchmarkSink commits batches of 4096 records with 256-byte payloads and
// prints a "BENCH: {json}" line:
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./internal/sink/parquetsink
//
// mb_per_s is payload MB (10^6 bytes) committed per second, including the
// Parquet files written when the stage rolls (and at Close); the baseline
// is the disk's durable write bandwidth in the same run and directory
// (1 MiB writes, each fdatasynced), in MB/s; ratio = mb_per_s ÷ baseline.
// WEIR_BENCH_BATCHES sets the number of batches (default 48: 48 MiB of
// payload, with one roll at the default 64 MiB of stage).
func BenchmarkSink(b *testing.B) {
	n := 48
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const per, payloadBytes = 4096, 256
	payload := []byte(strings.Repeat("abcdefghijklmnop", payloadBytes/16))
	now := time.Now().UTC()
	batches := make([]sink.Batch, n)
	for i := range batches {
		recs := make([]sink.Record, per)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", now.UnixNano(), i, j))
			recs[j] = sink.Record{ID: sink.RecordID(sum[:16]), Payload: payload, Received: now, Source: "socket"}
		}
		batches[i] = sink.NewBatch(recs)
	}
	ctx := context.Background()
	for range b.N {
		dir := b.TempDir()
		base := diskBandwidth(b, dir)
		s, err := New(ctx, Options{Dir: filepath.Join(dir, "out")})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, bt := range batches {
			if _, err := s.Commit(ctx, bt); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		mb := float64(n*per*payloadBytes) / 1e6
		rate := mb / el.Seconds()
		var pq int64
		files, _ := vfs.OS.ReadDir(filepath.Join(dir, "out"))
		for _, f := range files {
			if fi, err := os.Stat(filepath.Join(dir, "out", f)); err == nil && strings.HasSuffix(f, SuffixParquet) {
				pq += fi.Size()
			}
		}
		b.ReportMetric(rate, "MB/s")
		fields := map[string]any{
			"name": "parquet_sink", "mb_per_s": rate, "baseline_mb_per_s": base, "ratio": rate / base,
			"batch": per, "payload_bytes": payloadBytes, "batches": n, "parquet_bytes": pq,
			"commit_ms_mean": float64(el.Milliseconds()) / float64(n),
			"date":           time.Now().UTC().Format(time.RFC3339),
		}
		j, _ := json.Marshal(fields)
		fmt.Printf("BENCH: %s\n", j)
	}
}

// diskBandwidth is durable write bandwidth in MB/s: 1 MiB writes, each
// fdatasynced.
func diskBandwidth(b *testing.B, dir string) float64 {
	f, err := vfs.OS.Create(filepath.Join(dir, "bw"), 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	const n = 128
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	_ = vfs.OS.Remove(filepath.Join(dir, "bw"))
	return float64(n<<20) / 1e6 / el.Seconds()
}
