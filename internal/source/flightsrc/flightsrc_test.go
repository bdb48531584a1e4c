package flightsrc

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/source"
)

// slowGate delays every write, then passes it to the buffer's gate, and
// notes when each write returned, by the OriginPos of its first record.
type slowGate struct {
	inner source.Gate
	delay time.Duration
	mu    sync.Mutex
	done  map[string]time.Time
}

func (g *slowGate) Write(ctx context.Context, recs []source.Record) error {
	time.Sleep(g.delay)
	if err := g.inner.Write(ctx, recs); err != nil {
		return err
	}
	g.mu.Lock()
	g.done[recs[0].OriginPos] = time.Now()
	g.mu.Unlock()
	return nil
}

func batches(t *testing.T, n, rows int) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for b := range n {
		js := "["
		for r := range rows {
			if r > 0 {
				js += ","
			}
			js += fmt.Sprintf(`{"id": %d, "customer": "c%d", "at": %d}`, b*rows+r, r%3, 1709298245000+int64(b*rows+r))
		}
		out = append(out, batchOf(t, ordersSchema, js+"]"))
	}
	return out
}

// TestPutResultAfterDurableWrite: every PutResult comes after the gate's
// Write of its batch returned nil, in the order the batches were sent,
// carrying the batch's sequence number; a resend of the same batches by
// the same producer gives the same ids, so the buffer holds each row's id
// once however often it was sent; the payloads are the mapping's.
func TestPutResultAfterDurableWrite(t *testing.T) {
	var g *slowGate
	cols := arrowrec.Columns{Key: "customer", EventTime: "at"}
	r := startSource(t, Options{Columns: cols}, func(in source.Gate) source.Gate {
		g = &slowGate{inner: in, delay: 30 * time.Millisecond, done: map[string]time.Time{}}
		return g
	})
	c := dial(t, r.addr)
	bs := batches(t, 5, 4)
	seqs := []uint64{10, 11, 12, 13, 14}
	ctx := context.Background()
	acks, err := put(ctx, c, []string{"orders", "producer-a"}, bs, seqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != len(bs) {
		t.Fatalf("%d PutResults for %d batches", len(acks), len(bs))
	}
	for i, a := range acks {
		if a.seq != seqs[i] {
			t.Errorf("PutResult %d carries sequence %d, want %d (in order)", i, a.seq, seqs[i])
		}
		g.mu.Lock()
		wrote, ok := g.done[fmt.Sprintf("orders/%d:0", a.seq)]
		g.mu.Unlock()
		if !ok || a.at.Before(wrote) {
			t.Errorf("PutResult of batch %d at %v, before its durable write returned (%v, %v)", a.seq, a.at, wrote, ok)
		}
	}
	// The producer lost its PutResults: it sends everything again.
	if _, err := put(ctx, c, []string{"orders", "producer-a"}, bs, seqs); err != nil {
		t.Fatal(err)
	}
	r.stop()
	stored := r.wab.Records(t)
	if len(stored) != 2*5*4 {
		t.Fatalf("%d records stored, want 40 (20 rows sent twice)", len(stored))
	}
	ids := map[string]int{}
	d := decoder(t, ordersSchema, cols)
	want := map[string]bool{}
	for _, b := range bs {
		rows, err := d.Rows(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			want[string(row.Payload)] = true
		}
	}
	for _, s := range stored {
		ids[s.ID.String()]++
		if !want[s.Payload] {
			t.Errorf("stored payload %s is not a row's mapping", s.Payload)
		}
		if s.Source != "fl" {
			t.Errorf("record source %q", s.Source)
		}
	}
	if len(ids) != 20 {
		t.Errorf("%d distinct ids for 20 rows sent twice by one producer, want 20", len(ids))
	}
	for id, n := range ids {
		if n != 2 {
			t.Errorf("id %s stored %d times, want 2", id, n)
		}
	}
}

// TestIdsDependOnProducerAndSequence: another producer, or another
// sequence number, is another row; a call without a producer id gets
// fresh ids each time.
func TestIdsDependOnProducerAndSequence(t *testing.T) {
	r := startSource(t, Options{}, nil)
	c := dial(t, r.addr)
	b := batches(t, 1, 2)
	ctx := context.Background()
	for _, p := range []struct {
		path []string
		seqs []uint64
	}{
		{[]string{"orders", "a"}, []uint64{1}},
		{[]string{"orders", "a"}, []uint64{1}}, // the same again
		{[]string{"orders", "b"}, []uint64{1}},
		{[]string{"orders", "a"}, []uint64{2}},
		{[]string{"other", "a"}, []uint64{1}},
		{[]string{"orders"}, nil},
		{[]string{"orders"}, nil},
	} {
		if _, err := put(ctx, c, p.path, b, p.seqs); err != nil {
			t.Fatalf("%v: %v", p.path, err)
		}
	}
	r.stop()
	ids := map[string]bool{}
	for _, s := range r.wab.Records(t) {
		ids[s.ID.String()] = true
	}
	if len(ids) != 12 {
		t.Errorf("%d distinct ids, want 12: 7 calls of 2 rows, one a resend", len(ids))
	}
}

func TestRefusals(t *testing.T) {
	r := startSource(t, Options{Tokens: tokenFile(t)}, nil)
	c := dial(t, r.addr)
	b := batches(t, 1, 1)
	bearer := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		path []string
		seqs []uint64
		code codes.Code
	}{
		{"no token", context.Background(), []string{"orders"}, nil, codes.Unauthenticated},
		{"unknown token", bearer("nope"), []string{"orders"}, nil, codes.Unauthenticated},
		{"admin-only token", bearer("admin-token"), []string{"orders"}, nil, codes.PermissionDenied},
		{"unknown stream", bearer("push-token"), []string{"nope"}, nil, codes.NotFound},
		{"named producer without sequences", bearer("push-token"), []string{"orders", "p"}, nil, codes.InvalidArgument},
		{"three path elements", bearer("push-token"), []string{"orders", "p", "x"}, []uint64{1}, codes.InvalidArgument},
		{"push token", bearer("push-token"), []string{"orders", "p"}, []uint64{1}, codes.OK},
	} {
		acks, err := put(tc.ctx, c, tc.path, b, tc.seqs)
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: %v (code %v), want %v", tc.name, err, got, tc.code)
		}
		if tc.code != codes.OK && len(acks) > 0 {
			t.Errorf("%s: refused, yet %d PutResults", tc.name, len(acks))
		}
	}
	lf, err := c.ListFlights(context.Background(), &flight.Criteria{})
	if err == nil {
		_, err = lf.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListFlights without a token: %v, want Unauthenticated", err)
	}
}

// TestCriticalRefusesNewPuts: while flow control has the source paused
// (Critical), a new DoPut gets RESOURCE_EXHAUSTED with a RetryInfo hint;
// once resumed it is taken.
func TestCriticalRefusesNewPuts(t *testing.T) {
	r := startSource(t, Options{RetryAfter: 1500 * time.Millisecond}, nil)
	c := dial(t, r.addr)
	b := batches(t, 1, 1)
	r.src.Pause()
	_, err := put(context.Background(), c, []string{"orders"}, b, nil)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("DoPut while Critical: %v, want ResourceExhausted", err)
	}
	var hint *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			hint = ri
		}
	}
	if hint == nil || hint.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("retry hint %v, want RetryInfo of 1.5s", hint)
	}
	r.src.Resume()
	if acks, err := put(context.Background(), c, []string{"orders"}, b, nil); err != nil || len(acks) != 1 {
		t.Fatalf("after Resume: %d PutResults, %v", len(acks), err)
	}
}

// TestPausedCallStopsReading: a call in progress when the source is
// paused reads no further batch until it is resumed.
func TestPausedCallStopsReading(t *testing.T) {
	r := startSource(t, Options{}, nil)
	c := dial(t, r.addr)
	bs := batches(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.DoPut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan uint64, 2)
	go func() {
		for {
			res, err := stream.Recv()
			if err != nil {
				close(results)
				return
			}
			results <- binary.BigEndian.Uint64(res.AppMetadata)
		}
	}()
	w := flight.NewRecordWriter(stream, ipc.WithSchema(ordersSchema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"orders", "p"}})
	if err := w.WriteWithAppMetadata(bs[0], binary.BigEndian.AppendUint64(nil, 1)); err != nil {
		t.Fatal(err)
	}
	if seq := <-results; seq != 1 {
		t.Fatalf("first PutResult %d", seq)
	}
	r.src.Pause()
	if err := w.WriteWithAppMetadata(bs[1], binary.BigEndian.AppendUint64(nil, 2)); err != nil {
		t.Fatal(err)
	}
	select {
	case seq := <-results:
		t.Fatalf("PutResult %d while paused: the batch was read", seq)
	case <-time.After(300 * time.Millisecond):
	}
	r.src.Resume()
	if seq := <-results; seq != 2 {
		t.Fatalf("after Resume: PutResult %d, want 2", seq)
	}
	_ = w.Close()
	_ = stream.CloseSend()
	for range results {
	}
}

func TestListFlightsAndInfo(t *testing.T) {
	r := startSource(t, Options{}, nil)
	c := dial(t, r.addr)
	ctx := context.Background()
	if _, err := put(ctx, c, []string{"orders"}, batches(t, 2, 3), nil); err != nil {
		t.Fatal(err)
	}
	lf, err := c.ListFlights(ctx, &flight.Criteria{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		fi, err := lf.Recv()
		if err != nil {
			break
		}
		names = append(names, fi.FlightDescriptor.Path[0])
	}
	if fmt.Sprint(names) != "[orders other]" {
		t.Errorf("ListFlights: %v", names)
	}
	fi, err := c.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := flight.DeserializeSchema(fi.Schema, memory.DefaultAllocator)
	if err != nil || !s.Equal(ordersSchema) || fi.TotalRecords != 6 {
		t.Errorf("GetFlightInfo: schema %v (%v), %d records; want the put's schema and 6", s, err, fi.TotalRecords)
	}
	if _, err := c.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"nope"}}); status.Code(err) != codes.NotFound {
		t.Errorf("GetFlightInfo of an unknown stream: %v", err)
	}
}

// TestStopEndsCalls: a stop of the source with a call open and idle (its
// producer keeps the stream for later batches) acknowledges what the call
// sent, ends it with UNAVAILABLE and returns at once, not at the stop
// timeout.
func TestStopEndsCalls(t *testing.T) {
	r := startSource(t, Options{}, nil)
	c := dial(t, r.addr)
	stream, err := c.DoPut(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(ordersSchema))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"orders", "idle"}})
	if err := w.WriteWithAppMetadata(batches(t, 1, 2)[0], binary.BigEndian.AppendUint64(nil, 7)); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil || binary.BigEndian.Uint64(res.AppMetadata) != 7 {
		t.Fatalf("PutResult %v, %v", res, err)
	}
	t0 := time.Now()
	r.stop()
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("the stop took %v with an idle call open", took)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the idle call ended with %v, want UNAVAILABLE", err)
	}
	_ = w.Close()
}
