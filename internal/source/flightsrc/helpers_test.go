package flightsrc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/source"
)

var ordersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "customer", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, Nullable: true},
}, nil)

// batchOf builds a batch of schema from rows as array.RecordFromJSON
// (arrow-go's own reader) takes them.
func batchOf(t testing.TB, schema *arrow.Schema, rows string) arrow.RecordBatch {
	t.Helper()
	b, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	return b
}

// running is a Flight source serving in a test, over a real write-ahead
// buffer.
type running struct {
	src  *Source
	wab  *enginetest.WAB
	addr string
	stop func()
}

// startSource runs a source named "fl" with streams "orders" and
// "other" through gate (the buffer's own gate when nil).
func startSource(t *testing.T, o Options, gate func(source.Gate) source.Gate) *running {
	return startSourceTB(t, o, gate)
}

// startSourceB is startSource for a benchmark.
func startSourceB(b *testing.B) *running { return startSourceTB(b, Options{}, nil) }

func startSourceTB(t testing.TB, o Options, gate func(source.Gate) source.Gate) *running {
	t.Helper()
	w := enginetest.OpenWAB(t, 1)
	var g source.Gate = w.Gate(t)
	if gate != nil {
		g = gate(g)
	}
	o.Name, o.Listen, o.Streams = "fl", "127.0.0.1:0", []string{"orders", "other"}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = 64 << 20
	}
	o.MaxMessageBytes, o.StopTimeout, o.Logger = 64<<20, 5*time.Second, slog.New(slog.DiscardHandler)
	if o.RetryAfter == 0 {
		o.RetryAfter = 250 * time.Millisecond
	}
	m, err := NewMetrics(prometheus.NewRegistry(), o.Streams)
	if err != nil {
		t.Fatal(err)
	}
	o.Metrics = m
	src, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, g, nil) }()
	deadline := time.Now().Add(5 * time.Second)
	for src.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the source did not listen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := &running{src: src, wab: w, addr: src.Addr().String()}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// dial is arrow-go's own Flight client.
func dial(t testing.TB, addr string) flight.Client {
	t.Helper()
	c, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ack is a PutResult as the client saw it.
type ack struct {
	seq uint64
	at  time.Time
}

// put sends batches on one DoPut with path as its descriptor, each with
// its sequence number as app_metadata unless seqs is nil, and returns
// the PutResults in the order they came, and the call's error.
func put(ctx context.Context, c flight.Client, path []string, batches []arrow.RecordBatch, seqs []uint64) ([]ack, error) {
	stream, err := c.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	var acks []ack
	recvd := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				recvd <- err
				return
			}
			acks = append(acks, ack{seq: binary.BigEndian.Uint64(r.AppMetadata), at: time.Now()})
		}
	}()
	w := flight.NewRecordWriter(stream, ipc.WithSchema(batches[0].Schema()))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path})
	for i, b := range batches {
		if seqs == nil {
			err = w.Write(b)
		} else {
			err = w.WriteWithAppMetadata(b, binary.BigEndian.AppendUint64(nil, seqs[i]))
		}
		if err != nil {
			break
		}
	}
	_ = w.Close()
	_ = stream.CloseSend()
	rerr := <-recvd
	if rerr != nil {
		return acks, rerr
	}
	return acks, err
}

// tokenFile writes a token file with a push token and an admin-only one.
func tokenFile(t *testing.T) *httpin.Tokens {
	t.Helper()
	path := t.TempDir() + "/tokens"
	content := sha("push-token") + " scopes=push\n" + sha("admin-token") + " scopes=admin\n"
	writeFile(t, path, content)
	tk, err := httpin.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// decoder is the mapping a test checks the stored payloads against.
func decoder(t testing.TB, s *arrow.Schema, cols arrowrec.Columns) *arrowrec.Decoder {
	t.Helper()
	d, err := arrowrec.NewDecoder(s, cols)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
