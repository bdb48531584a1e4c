package flightsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// ErrClosed is returned, marked permanent, by Commit after Close.
var ErrClosed = errors.New("flightsink: sink is closed")

// msgSlack is what an Arrow message holds besides its rows' bytes (the
// flatbuffer header, buffer padding) and gRPC's framing, kept free under
// max_message_bytes.
const msgSlack = 64 << 10

// maxProbes bounds the bisection of a batch the server refuses.
const maxProbes = 32

// pingWait bounds Health's wait for the connection to come up.
const pingWait = 2 * time.Second

// Options configure a Sink.
type Options struct {
	// Name labels the sink's metrics and logs.
	Name string
	// Endpoint is grpc://host:port or grpc+tls://host:port.
	Endpoint string
	// Path is the flight descriptor's path.
	Path            []string
	MaxBatchSize    int           // default DefaultMaxBatchSize
	MaxMessageBytes int           // default DefaultMaxMessageBytes
	CommitTimeout   time.Duration // default DefaultCommitTimeout
	Compression     string        // CompressionNone (default), CompressionLZ4, CompressionZstd
	TokenFile       string        // bearer token file; or
	TokenEnv        string        // the variable holding it
	TLS             TLSFiles      // with a grpc+tls:// endpoint
	// Columns is ColumnsGeneric (default) or ColumnsArrow: rows of an
	// Arrow source in typed columns of their own schema.
	Columns string
	// SchemaDir keeps the Arrow schemas seen, with ColumnsArrow (on FS,
	// default vfs.OS); "" keeps them in memory only.
	SchemaDir string
	FS        vfs.FS
	// Typed, with ColumnsJSONSchema, is the schema every record's payload
	// is sent in (ArrowFromJSONSchema of a JSON Schema).
	Typed  *arrow.Schema
	Logger *slog.Logger
	// Metrics receives the sink's metrics; nil: a private registry.
	Metrics prometheus.Registerer
}

func (o *Options) defaults() {
	if o.MaxBatchSize <= 0 {
		o.MaxBatchSize = DefaultMaxBatchSize
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = DefaultCommitTimeout
	}
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = prometheus.NewRegistry()
	}
	if o.Name == "" {
		o.Name = Kind
	}
}

// Sink sends batches to a Flight server with DoPut; see the package
// documentation.
type Sink struct {
	opts    Options
	conn    *grpc.ClientConn
	client  flight.Client
	desc    *flight.FlightDescriptor
	ipcOpt  []ipc.Option
	budget  int // row bytes per Arrow message
	core    *sinkcore.Core
	m       sinkMetrics
	schemas *schemas // with ColumnsArrow; else nil
	fixed   *group   // with ColumnsJSONSchema; else nil
}

// New opens a sink. It does not wait for the server: the connection is
// made by the first Commit or Health, and remade whenever it breaks.
func New(_ context.Context, o Options) (*Sink, error) {
	o.defaults()
	if len(o.Path) == 0 {
		return nil, errors.New("flightsink: an empty descriptor path")
	}
	if o.MaxMessageBytes < 4*msgSlack {
		return nil, fmt.Errorf("flightsink: max message bytes %d: want at least %d", o.MaxMessageBytes, 4*msgSlack)
	}
	s := &Sink{opts: o,
		desc:   &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: o.Path},
		budget: o.MaxMessageBytes - msgSlack,
		ipcOpt: []ipc.Option{ipc.WithAllocator(memory.DefaultAllocator)}}
	switch o.Columns {
	case ColumnsArrow:
		if o.FS == nil {
			o.FS = vfs.OS
		}
		s.schemas = newSchemas(o.FS, o.SchemaDir)
	case ColumnsJSONSchema:
		if o.Typed == nil {
			return nil, errors.New("flightsink: typed columns from a JSON Schema without the schema")
		}
		if err := arrowrec.CheckSchema(o.Typed); err != nil {
			return nil, fmt.Errorf("flightsink: %w", err)
		}
		send, err := typedSchema(o.Typed)
		if err != nil {
			return nil, fmt.Errorf("flightsink: %w", err)
		}
		sch := arrowrec.NewSchema(o.Typed)
		s.fixed = &group{send: send, typed: &sch}
	}
	switch o.Compression {
	case CompressionLZ4:
		s.ipcOpt = append(s.ipcOpt, ipc.WithLZ4())
	case CompressionZstd:
		s.ipcOpt = append(s.ipcOpt, ipc.WithZstd())
	}
	m, err := newMetrics(o.Metrics, o.Name)
	if err != nil {
		return nil, err
	}
	conn, err := dial(o)
	if err != nil {
		return nil, fmt.Errorf("flightsink: %w", err)
	}
	s.m, s.conn, s.client = m, conn, flight.NewClientFromConn(conn, nil)
	s.core = sinkcore.New(sinkcore.Config{
		Name: "flightsink", Server: "the Flight server", ErrClosed: ErrClosed,
		Timeout: o.CommitTimeout, MaxProbes: maxProbes, Log: o.Logger,
		Check:       s.check,
		CommitRows:  s.commitRows,
		IsDataError: isDataError,
		Ping:        s.ping,
		Close:       conn.Close,
	})
	return s, nil
}

// Probe connects to the endpoint (TLS and the token included) and lists
// the server's actions, writing nothing.
func Probe(ctx context.Context, o Options) error {
	o.defaults()
	conn, err := dial(o)
	if err != nil {
		return fmt.Errorf("flightsink: %w", err)
	}
	defer conn.Close()
	s := &Sink{opts: o, conn: conn, client: flight.NewClientFromConn(conn, nil)}
	return s.ping(ctx)
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return s.opts.Name }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// Commit implements sink.Sink: records too large for one Arrow message are
// rejected as oversize, the rest are sent in one DoPut, and Commit returns
// once the server has sent a PutResult for every record batch of it.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	return s.core.Commit(ctx, b)
}

// Health implements sink.Sink: Down while the connection cannot be made,
// Degraded while the last commit failed.
func (s *Sink) Health(ctx context.Context) sink.Health { return s.core.Health(ctx) }

// Close implements sink.Sink. Committed records were acknowledged by the
// server; Close only drops the connection.
func (s *Sink) Close() error { return s.core.Close() }

// check rejects a record that cannot fit one Arrow message.
func (s *Sink) check(r *sink.Record) (string, sink.Code) {
	n := rowBytes(r)
	if s.schemas != nil || s.fixed != nil {
		n = max(n, typedRowBytes(r))
	}
	if n > s.budget {
		return fmt.Sprintf("record of about %d bytes does not fit one Arrow message of max_message_bytes %d", n, s.opts.MaxMessageBytes), sink.CodeOversize
	}
	return "", 0
}

// rowBytes estimates what a record adds to a generic record batch: its
// bytes and their offsets, validity and fixed-width columns.
func rowBytes(r *sink.Record) int {
	n := 16 + len(r.Payload) + len(r.Source) + len("buffered") + 8 + len(r.Key) + 8 + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 12
	}
	return n
}

// typedRowBytes estimates a typed row: the JSON text of a value can be
// shorter than its column's width (1 is one byte of JSON, eight of int64).
func typedRowBytes(r *sink.Record) int { return 16 + 2*len(r.Payload) + 64 }

// chunks splits rows into runs whose rows fit one Arrow message each.
func (s *Sink) chunks(g group, recs []sink.Record, rows []int) [][]int {
	size := rowBytes
	if g.typed != nil {
		size = typedRowBytes
	}
	var out [][]int
	start, sum := 0, 0
	for k, i := range rows {
		n := size(&recs[i])
		if k > start && sum+n > s.budget {
			out = append(out, rows[start:k])
			start, sum = k, 0
		}
		sum += n
	}
	return append(out, rows[start:])
}

// groups splits a commit by schema: with typed columns, the rows of each
// Arrow schema form a group (in the order first seen) and rows without
// one the generic group; a row whose schema the sink cannot know is
// rejected. Without typed columns, all rows are one generic group.
func (s *Sink) groups(recs []sink.Record, idx []int) ([]group, []sink.Rejection, error) {
	if s.fixed != nil {
		g := *s.fixed
		g.rows = idx
		return []group{g}, nil, nil
	}
	generic := group{send: GenericSchema}
	if s.schemas == nil {
		generic.rows = idx
		return []group{generic}, nil, nil
	}
	var out []group
	var bad []sink.Rejection
	at := map[*group]int{}
	for _, i := range idx {
		t, err := s.schemas.lookup(&recs[i])
		switch {
		case err != nil && sink.IsTransient(err):
			return nil, nil, err
		case err != nil:
			bad = append(bad, sink.Rejection{Index: i, Code: sink.CodeDecode, Reason: "flightsink: typed columns: " + err.Error()})
			continue
		case t == nil:
			generic.rows = append(generic.rows, i)
			continue
		}
		k, ok := at[t]
		if !ok {
			k = len(out)
			at[t] = k
			out = append(out, group{send: t.send, typed: t.typed})
		}
		out[k].rows = append(out[k].rows, i)
	}
	if len(generic.rows) > 0 {
		out = append(out, generic)
	}
	return out, bad, nil
}

// commitRows sends recs[idx...], one DoPut per schema, and waits for a
// PutResult per record batch; a refusal of the data (InvalidArgument) is
// bisected to the rows at fault, each probe a DoPut of its own.
func (s *Sink) commitRows(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	groups, bad, err := s.groups(recs, idx)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		rej, err := s.put(ctx, g, recs, g.rows)
		bad = append(bad, rej...)
		if err == nil {
			continue
		}
		if !isDataError(err) {
			return nil, err
		}
		s.opts.Logger.Warn("the Flight server refused a batch's data; isolating the rows", "rows", len(g.rows), "err", err)
		good := slices.DeleteFunc(slices.Clone(g.rows), func(i int) bool {
			return slices.ContainsFunc(rej, func(r sink.Rejection) bool { return r.Index == i })
		})
		refused, err := s.core.Bisect([][]int{good}, func(sub []int) error {
			_, err := s.put(ctx, g, recs, sub)
			return err
		})
		if err != nil {
			return nil, err // classified by put
		}
		bad = append(bad, refused...)
	}
	return bad, nil
}

// put is one DoPut of g's rows: the descriptor and schema, one record
// batch per chunk, then the half-close; it returns once every batch has
// its PutResult. Rows whose payload does not fit typed columns are left
// out and returned as rejections. The error is classified, except for
// InvalidArgument, returned as the server's status for bisection.
func (s *Sink) put(parent context.Context, g group, recs []sink.Record, rows []int) ([]sink.Rejection, error) {
	var batches []arrow.RecordBatch
	var bad []sink.Rejection
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	for _, c := range s.chunks(g, recs, rows) {
		rec, ok, rej, err := encode(memory.DefaultAllocator, g, recs, c)
		if err != nil {
			return nil, sink.Permanent(fmt.Errorf("flightsink: encode: %w", err))
		}
		bad = append(bad, rej...)
		if len(ok) == 0 {
			rec.Release()
			continue
		}
		batches = append(batches, rec)
	}
	if len(batches) == 0 {
		return bad, nil
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stream, err := s.client.DoPut(ctx)
	if err != nil {
		return nil, s.fail(parent, "open DoPut", err)
	}
	sent := make(chan sentBatch, len(batches))
	type result struct {
		n   int
		err error
	}
	acked := make(chan result, 1)
	go func() { n, err := s.acks(stream, sent); acked <- result{n, err} }()

	w := flight.NewRecordWriter(stream, append(s.ipcOpt, ipc.WithSchema(g.send))...)
	w.SetFlightDescriptor(s.desc)
	var sendErr error
	for _, b := range batches {
		if sendErr = w.Write(b); sendErr != nil {
			break
		}
		sent <- sentBatch{at: time.Now(), rows: int(b.NumRows())}
	}
	close(sent)
	if sendErr == nil {
		sendErr = w.Close()
	}
	if sendErr == nil {
		sendErr = stream.CloseSend()
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		cancel()
		<-acked
		return nil, s.fail(parent, "send", sendErr)
	}
	// On io.EOF the stream ended; the server's status, if it sent one,
	// is what the receiver gets.
	res := <-acked
	switch {
	case res.err != nil:
		return nil, s.fail(parent, "DoPut", res.err)
	case sendErr != nil:
		return nil, s.fail(parent, "send", sendErr)
	case res.n < len(batches):
		return nil, s.fail(parent, "DoPut", errShortAck{acked: res.n, sent: len(batches)})
	}
	return bad, nil
}

// sentBatch is a record batch written to the stream, waiting for its
// PutResult.
type sentBatch struct {
	at   time.Time
	rows int
}

// acks reads PutResults until the server ends the stream, matching each
// to the next batch sent, and returns how many there were.
func (s *Sink) acks(stream flight.FlightService_DoPutClient, sent <-chan sentBatch) (int, error) {
	n := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		b, ok := <-sent
		if !ok {
			continue // more results than batches: not ours to read
		}
		s.m.ack.Observe(time.Since(b.at).Seconds())
		s.m.batches.Inc()
		s.m.rows.Add(float64(b.rows))
		n++
	}
}

// errShortAck is a DoPut the server ended cleanly without acknowledging
// every batch: it does not send a PutResult per durable batch, which this
// sink needs (permanent: retrying cannot change the server).
type errShortAck struct{ acked, sent int }

func (e errShortAck) Error() string {
	return fmt.Sprintf("the server ended the DoPut after %d PutResults for %d record batches: a server must send one PutResult per record batch once it is durable (docs/sinks/flight.md)", e.acked, e.sent)
}

// fail classifies a DoPut failure, keeping InvalidArgument as the bare
// status for bisection.
func (s *Sink) fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if isDataError(err) {
		return err
	}
	var short errShortAck
	if errors.As(err, &short) {
		return sink.Permanent(fmt.Errorf("flightsink: %w", err))
	}
	if e := ctxErr(ctx, err); e != nil {
		return e
	}
	return classify(op, err)
}

// ping asks the server to list its actions, within pingWait: any answer,
// an error status included (most servers implement no action), shows it
// reachable, except Unavailable and DeadlineExceeded, and a refusal of the
// credentials (Unauthenticated, PermissionDenied). A connection in its
// reconnection backoff is retried at once.
func (s *Sink) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingWait)
	defer cancel()
	switch s.conn.GetState() {
	case connectivity.Shutdown:
		return ErrClosed
	case connectivity.TransientFailure:
		s.conn.ResetConnectBackoff()
	}
	err := listActions(ctx, s.client)
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%s: %w", s.opts.Endpoint, err)
	}
	return nil
}

func listActions(ctx context.Context, c flight.Client) error {
	st, err := c.ListActions(ctx, &flight.Empty{})
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
