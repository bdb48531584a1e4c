package flightsink_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// poisonPayload is a payload the test server refuses (InvalidArgument),
// as a server refuses a row it cannot take.
var poisonPayload = []byte(`"the server refuses this row"`)

func refusePoison(rec arrow.RecordBatch, row int) bool {
	col, ok := column[*array.Binary](rec, "payload")
	return ok && bytes.Equal(col.Value(row), poisonPayload)
}

// column is rec's column called name, of type A.
func column[A arrow.Array](rec arrow.RecordBatch, name string) (A, bool) {
	var zero A
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return zero, false
	}
	a, ok := rec.Column(idx[0]).(A)
	return a, ok
}

const testMaxMessage = 1 << 20

func openSink(t testing.TB, endpoint string, mod ...func(*flightsink.Options)) *flightsink.Sink {
	t.Helper()
	o := flightsink.Options{Endpoint: endpoint, Path: []string{"weir", "test"}, MaxBatchSize: 1000,
		MaxMessageBytes: testMaxMessage, CommitTimeout: 20 * time.Second}
	for _, m := range mod {
		m(&o)
	}
	s, err := flightsink.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// stored reads the generic schema's rows back as sinktest sees them.
func stored(t testing.TB, recs []arrow.RecordBatch) ([]sinktest.Stored, error) {
	var out []sinktest.Stored
	for _, rec := range recs {
		ids, ok1 := column[*array.FixedSizeBinary](rec, flightsink.ColID)
		pay, ok2 := column[*array.Binary](rec, "payload")
		src, ok3 := column[*array.String](rec, flightsink.ColSource)
		dur, ok4 := column[*array.String](rec, flightsink.ColDurability)
		recv, ok5 := column[*array.Timestamp](rec, flightsink.ColReceived)
		key, ok6 := column[*array.Binary](rec, "key")
		hdrs, ok7 := column[*array.List](rec, "headers")
		ev, ok8 := column[*array.Timestamp](rec, "event_time")
		if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) {
			return nil, fmt.Errorf("stored batch of schema %s is not the generic schema", rec.Schema())
		}
		hs := hdrs.ListValues().(*array.Struct)
		hk, hv := hs.Field(0).(*array.String), hs.Field(1).(*array.Binary)
		for i := range int(rec.NumRows()) {
			var s sinktest.Stored
			copy(s.ID[:], ids.Value(i))
			s.Payload = bytes.Clone(pay.Value(i))
			s.Source = src.Value(i)
			switch dur.Value(i) {
			case "durable":
				s.Durability = sink.Durable
			case "buffered":
				s.Durability = sink.Buffered
			default:
				return nil, fmt.Errorf("durability %q", dur.Value(i))
			}
			s.Received = time.Unix(0, int64(recv.Value(i))).UTC()
			if !key.IsNull(i) {
				s.Key = bytes.Clone(key.Value(i))
			}
			start, end := hdrs.ValueOffsets(i)
			for j := start; j < end; j++ {
				s.Headers = append(s.Headers, sink.Header{Key: hk.Value(int(j)), Value: bytes.Clone(hv.Value(int(j)))})
			}
			if !ev.IsNull(i) {
				s.EventTime = time.Unix(0, int64(ev.Value(i))).UTC()
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func readBack(t testing.TB, fs vfs.FS, dir string) testenv.ReadBack {
	return func(ctx context.Context) ([]sinktest.Stored, error) {
		recs, err := flighttest.Read(ctx, fs, dir)
		if err != nil {
			return nil, err
		}
		defer func() {
			for _, r := range recs {
				r.Release()
			}
		}()
		return stored(t, recs)
	}
}

// TestConformance runs the shared sink suite against the test Flight
// server, through a proxy that can cut the connection (Break, Outage).
// The server keeps its Parquet files on memfs, so the Durability case
// stops it and crashes its file system right after a Commit returned —
// every record acknowledged must be in what survived, which holds only
// if Commit waited for the server's PutResult, sent after its fdatasync.
// The server stores replays again (KeepsDuplicates: deduplicating on
// weir_record_id is the server's duty). Poison records are of two kinds:
// one too large for max_message_bytes (rejected before sending) and one
// the server refuses with InvalidArgument (isolated by bisection).
func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
		const dir = "/flight"
		m := memfs.New()
		srv := flighttest.Start(t, flighttest.Options{FS: m, Dir: dir, Refuse: refusePoison})
		proxy := testenv.NewProxy(t, srv.Addr())
		t.Cleanup(proxy.Close)
		endpoint := "grpc://" + proxy.Addr()
		h := &sinktest.Harness{
			Sink:            openSink(t, endpoint),
			ReadBack:        readBack(t, m, dir),
			KeepsDuplicates: true,
			BinaryPayloads:  true,
			Metadata:        true,
			Poison: func(kind int) (sink.Record, bool) {
				switch kind {
				case 0:
					return sink.Record{Payload: bytes.Repeat([]byte("x"), 2*testMaxMessage)}, true
				case 1:
					return sink.Record{Payload: poisonPayload}, true
				}
				return sink.Record{}, false
			},
			Break:  func(context.Context) error { proxy.Kill(); return nil },
			Outage: func(context.Context) (func(), error) { proxy.Cut(); return func() { _ = proxy.Restore() }, nil },
			Reopen: func(t *testing.T) sink.Sink { return openSink(t, endpoint) },
			Crash: func(t *testing.T) sinktest.Crashed {
				srv.Stop()
				after := m.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced})
				srv2 := flighttest.Start(t, flighttest.Options{FS: after, Dir: dir, Refuse: refusePoison})
				return sinktest.Crashed{
					ReadBack: readBack(t, after, dir),
					Reopen:   func(t *testing.T) sink.Sink { return openSink(t, srv2.Endpoint()) },
				}
			},
		}
		return h
	})
}
