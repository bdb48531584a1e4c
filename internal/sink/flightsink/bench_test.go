package flightsink_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/sink"
)

// BenchmarkSinkVsBareClient compares the Flight sink with a bare arrow-go
// DoPut client sending into the same test server (flighttest on disk:
// one Parquet file fdatasynced per record batch before its PutResult), in
// the same run, batch by batch with the order rotating (testenv.Race).
// Each run prints a "BENCH: {json}" line:
//
//	go test -run '^$' -bench SinkVsBareClient -benchtime 1x -count 5 ./internal/sink/flightsink
//
// Every contestant sends the same batches of 1,024 records with 256-byte
// payloads (WEIR_BENCH_BATCHES of them, default 64), each batch durable
// (its PutResult received) before the next is sent, as the drain commits:
//
//   - sink: Commit of each batch (the records encoded to Arrow on the
//     clock, a DoPut stream per commit);
//   - bare: the same Arrow batches, built off the clock, one DoPut stream
//     per batch — what is left is the sink's own cost, encoding included;
//   - bare_one_stream: the same Arrow batches on one long-lived DoPut,
//     each waiting for its PutResult before the next: the cost of a
//     stream per commit, which the sink pays (docs/sinks/flight.md).
//
// ratio is the sink's rate over bare's (the bar: ≥ 0.8);
// ratio_one_stream over bare_one_stream's.
func BenchmarkSinkVsBareClient(b *testing.B) {
	n := 64
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const per, payloadBytes = 1024, 256
	for range b.N {
		srv := flighttest.Start(b, flighttest.Options{})
		batches := testenv.BenchBatches(testenv.IDsTimeOrdered, n, per, payloadBytes)
		arrows := make(map[*sink.Record]arrow.RecordBatch, n)
		for _, recs := range batches {
			arrows[&recs[0]] = flightsink.EncodeGeneric(recs)
		}
		s, err := flightsink.New(context.Background(), flightsink.Options{Endpoint: srv.Endpoint(), Path: []string{"sink"}, MaxBatchSize: per})
		if err != nil {
			b.Fatal(err)
		}
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		client := flight.NewClientFromConn(conn, nil)
		long := newLongPut(b, client)
		writers := []testenv.Writer{
			testenv.SinkWriter("sink", s),
			{Name: "bare", Write: func(ctx context.Context, recs []sink.Record) error {
				return barePut(ctx, client, arrows[&recs[0]], "bare")
			}},
			{Name: "bare_one_stream", Write: func(ctx context.Context, recs []sink.Record) error { return long.put(arrows[&recs[0]]) }},
		}
		testenv.Race(b, batches[:min(2, n)], writers...) // warm-up: connections, the page cache
		rates := testenv.Race(b, batches, writers...)
		if err := long.close(); err != nil {
			b.Fatal(err)
		}
		s.Close()
		conn.Close()
		for _, r := range arrows {
			r.Release()
		}
		srv.Stop()
		got, bare, one := rates["sink"], rates["bare"], rates["bare_one_stream"]
		b.ReportMetric(got, "rows/s")
		testenv.BenchLine(map[string]any{
			"name": "flightsink", "rows_per_s": got,
			"bare_rows_per_s": bare, "ratio": got / bare,
			"bare_one_stream_rows_per_s": one, "ratio_one_stream": got / one,
			"batch": per, "payload_bytes": payloadBytes, "rows": n * per,
		})
	}
}

// barePut sends rec in a DoPut of its own on descriptor path and waits
// for its PutResult, as a plain arrow-go client does.
func barePut(ctx context.Context, c flight.Client, rec arrow.RecordBatch, path ...string) error {
	stream, err := c.DoPut(ctx)
	if err != nil {
		return err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(rec.Schema()))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path})
	if err := w.Write(rec); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	acks := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		acks++
	}
	if acks != 1 {
		return fmt.Errorf("%d PutResults for one batch", acks)
	}
	return nil
}

// longPut is one DoPut stream for every batch, each waiting for its
// PutResult.
type longPut struct {
	stream flight.FlightService_DoPutClient
	w      *flight.Writer
}

func newLongPut(b *testing.B, c flight.Client) *longPut {
	stream, err := c.DoPut(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(flightsink.GenericSchema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"bare_one_stream"}})
	return &longPut{stream: stream, w: w}
}

func (l *longPut) put(rec arrow.RecordBatch) error {
	if err := l.w.Write(rec); err != nil {
		return err
	}
	_, err := l.stream.Recv()
	return err
}

func (l *longPut) close() error {
	if err := l.w.Close(); err != nil {
		return err
	}
	if err := l.stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := l.stream.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
