package systest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// flightDaemon starts the real daemon with a Flight source "fl" on a
// fresh loopback port, streams "orders"; extra lines go into its
// [source.flight] table, args are the daemon's flags. It returns the
// daemon (started) and the Flight address.
func flightDaemon(t testing.TB, env []string, extra string, args ...string) (*daemon, string) {
	t.Helper()
	addr, _, err := pickPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`
[[source]]
name = "fl"
type = "flight"
[source.flight]
listen = %q
streams = ["orders"]
%s
`, addr, extra))
	d := newDaemon(t, append([]string{"--config", cfg}, args...)...)
	d.env = env
	d.start()
	waitFlight(t, d, addr)
	return d, addr
}

// waitFlight waits until the Flight source answers (the source starts
// beside the socket, not before it).
func waitFlight(t testing.TB, d *daemon, addr string) {
	t.Helper()
	c := flightClient(t, addr)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"orders"}})
		cancel()
		if err == nil || strings.Contains(err.Error(), "Unauthenticated") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Flight source did not answer within 15s: %v\n%s", err, tail(d.log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// flightClient is arrow-go's own Flight client, closed with the test.
func flightClient(t testing.TB, addr string) flight.Client {
	t.Helper()
	c, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// flightCall is one DoPut in progress: Send writes a batch with its
// sequence number; acks delivers each PutResult's sequence number and is
// closed with the call's end, whose error is in err.
type flightCall struct {
	stream flight.FlightService_DoPutClient
	w      *flight.Writer
	acks   chan uint64
	err    error
	done   chan struct{}
}

func openPut(ctx context.Context, c flight.Client, schema *arrow.Schema, path ...string) (*flightCall, error) {
	stream, err := c.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	fc := &flightCall{stream: stream, acks: make(chan uint64, 1<<16), done: make(chan struct{})}
	fc.w = flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	fc.w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: path})
	go func() {
		defer close(fc.done)
		defer close(fc.acks)
		for {
			r, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					fc.err = err
				}
				return
			}
			fc.acks <- binary.BigEndian.Uint64(r.AppMetadata)
		}
	}()
	return fc, nil
}

func (fc *flightCall) Send(b arrow.RecordBatch, seq uint64) error {
	return fc.w.WriteWithAppMetadata(b, binary.BigEndian.AppendUint64(nil, seq))
}

// Close ends the sending side and waits for the remaining PutResults.
func (fc *flightCall) Close() error {
	_ = fc.w.Close()
	_ = fc.stream.CloseSend()
	<-fc.done
	return fc.err
}

// arrowBatch builds a batch with arrow-go's own JSON reader.
func arrowBatch(t testing.TB, schema *arrow.Schema, rows string) arrow.RecordBatch {
	t.Helper()
	b, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
