package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Record id layouts of the database sink benchmarks.
const (
	// IDsRandom: the 16 bytes of a hash, as weir's ids were before they
	// became time-ordered; every insert lands on a random page of a
	// primary-key index.
	IDsRandom = "random"
	// IDsTimeOrdered: a UUIDv7 layout — the first 48 bits a millisecond
	// timestamp (big-endian), then version 7, the RFC 9562 variant, and
	// the rest of the hash — so that keys grow at the right edge of the
	// index.
	IDsTimeOrdered = "time"
)

// BenchRecordsPerMilli is how many benchmark records share one
// millisecond of a time-ordered id: a stream of 100 000 records/s.
const BenchRecordsPerMilli = 100

// BenchID is a benchmark record's id: hash laid out as ids says
// (IDsRandom: as it is; IDsTimeOrdered: record.TimeOrdered at the i-th
// record of a stream of BenchRecordsPerMilli records a millisecond from
// start).
func BenchID(ids string, start time.Time, i int, hash []byte) sink.RecordID {
	id := sink.RecordID(hash[:16])
	if ids != IDsTimeOrdered {
		return id
	}
	return record.TimeOrdered(id, start.Add(time.Duration(i/BenchRecordsPerMilli)*time.Millisecond).UnixNano())
}

// BenchBatches makes the database sink benchmarks' records: batches
// (WEIR_BENCH_BATCHES overrides it) of per records, each payloadBytes of
// text, with ids laid out as ids says (IDsRandom or IDsTimeOrdered). The
// ids differ from one call to the next.
func BenchBatches(ids string, batches, per, payloadBytes int) [][]sink.Record {
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		batches, _ = strconv.Atoi(s)
	}
	payload := []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz", payloadBytes/26+1)[:payloadBytes])
	now := time.Now().Truncate(time.Microsecond)
	tag := now.UnixNano()
	out := make([][]sink.Record, batches)
	for i := range out {
		recs := make([]sink.Record, per)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", tag, i, j))
			recs[j] = sink.Record{ID: BenchID(ids, now, i*per+j, sum[:]), Payload: payload, Received: now, Source: "socket"}
		}
		out[i] = recs
	}
	return out
}

// EachIDLayout runs a database sink benchmark's rounds: for each of b.N
// and each id layout (IDsRandom, IDsTimeOrdered), run gets fresh
// BenchBatches and a prefix for table names unique to the call (the tables
// may then live until the benchmark ends).
func EachIDLayout(b *testing.B, batches, per, payloadBytes int, run func(ids, prefix string, recs [][]sink.Record)) {
	for n := range b.N {
		for _, ids := range []string{IDsRandom, IDsTimeOrdered} {
			run(ids, fmt.Sprintf("%s%d_", ids, n), BenchBatches(ids, batches, per, payloadBytes))
		}
	}
}

// Rows counts the records of batches.
func Rows(batches [][]sink.Record) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// Writer is one contestant of a database sink benchmark: a sink, or a bare
// client baseline, on a table of its own.
type Writer struct {
	Name string
	// Write stores one batch, durably, or fails.
	Write func(ctx context.Context, recs []sink.Record) error
}

// SinkWriter is the contestant that commits each batch to s; a rejected
// record fails the benchmark.
func SinkWriter(name string, s sink.Sink) Writer {
	return Writer{Name: name, Write: func(ctx context.Context, recs []sink.Record) error {
		res, err := s.Commit(ctx, sink.NewBatch(recs))
		if err == nil && len(res.Rejected) > 0 {
			err = fmt.Errorf("rejected %v", res.Rejected)
		}
		return err
	}}
}

// Race writes every batch with every writer, interleaved batch by batch
// with the order rotating, so that the load of a shared machine falls on
// all of them alike, and returns each writer's rows/s by name: the rows
// over the time spent in its own Writes.
func Race(b *testing.B, batches [][]sink.Record, ws ...Writer) map[string]float64 {
	ctx := context.Background()
	spent := make([]time.Duration, len(ws))
	for i, recs := range batches {
		for k := range ws {
			w := (i + k) % len(ws)
			start := time.Now()
			if err := ws[w].Write(ctx, recs); err != nil {
				b.Fatalf("%s: %v", ws[w].Name, err)
			}
			spent[w] += time.Since(start)
		}
	}
	rates := map[string]float64{}
	for w := range ws {
		rates[ws[w].Name] = float64(Rows(batches)) / spent[w].Seconds()
	}
	return rates
}

// BenchLine prints a "BENCH: {json}" line of fields and the date, as
// internal/tools/benchreport reads them.
func BenchLine(fields map[string]any) {
	fields["date"] = time.Now().UTC().Format(time.RFC3339)
	j, _ := json.Marshal(fields)
	fmt.Printf("BENCH: %s\n", j)
}
