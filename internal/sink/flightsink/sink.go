package flightsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/sink/sinkcore"
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
	Logger          *slog.Logger
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
	opts   Options
	conn   *grpc.ClientConn
	client flight.Client
	desc   *flight.FlightDescriptor
	ipcOpt []ipc.Option
	budget int // row bytes per Arrow message
	core   *sinkcore.Core
	m      sinkMetrics
}

// New opens a sink. It does not wait for the server: the connection is
// made by the first Commit or Health, and remade whenever it breaks.
func New(_ context.Context, o Options) (*Sink, error) {
	o.defaults()
	if len(o.Path) == 0 {
		return nil, errors.New("flightsink: an empty descriptor path")
	}
	m, err := newMetrics(o.Metrics, o.Name)
	if err != nil {
		return nil, err
	}
	conn, err := dial(o)
	if err != nil {
		return nil, fmt.Errorf("flightsink: %w", err)
	}
	s := &Sink{opts: o, conn: conn, client: flight.NewClientFromConn(conn, nil), m: m,
		desc:   &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: o.Path},
		budget: o.MaxMessageBytes - msgSlack,
		ipcOpt: []ipc.Option{ipc.WithSchema(GenericSchema), ipc.WithAllocator(memory.DefaultAllocator)}}
	switch o.Compression {
	case CompressionLZ4:
		s.ipcOpt = append(s.ipcOpt, ipc.WithLZ4())
	case CompressionZstd:
		s.ipcOpt = append(s.ipcOpt, ipc.WithZstd())
	}
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
	if n := rowBytes(r); n > s.budget {
		return fmt.Sprintf("record of about %d bytes does not fit one Arrow message of max_message_bytes %d", n, s.opts.MaxMessageBytes), sink.CodeOversize
	}
	return "", 0
}

// rowBytes estimates what a record adds to a record batch: its bytes and
// their offsets, validity and fixed-width columns.
func rowBytes(r *sink.Record) int {
	n := 16 + len(r.Payload) + len(r.Source) + len("buffered") + 8 + len(r.Key) + 8 + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 12
	}
	return n
}

// chunks splits idx into runs whose rows fit one Arrow message each.
func (s *Sink) chunks(recs []sink.Record, idx []int) [][]int {
	var out [][]int
	start, size := 0, 0
	for k, i := range idx {
		n := rowBytes(&recs[i])
		if k > start && size+n > s.budget {
			out = append(out, idx[start:k])
			start, size = k, 0
		}
		size += n
	}
	return append(out, idx[start:])
}

// commitRows sends recs[idx...] in one DoPut stream and waits for a
// PutResult per record batch; a refusal of the data (InvalidArgument) is
// bisected to the rows at fault, each probe a DoPut of its own.
func (s *Sink) commitRows(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	err := s.put(ctx, recs, idx)
	if err == nil || !isDataError(err) {
		return nil, err
	}
	s.opts.Logger.Warn("the Flight server refused a batch's data; isolating the rows", "rows", len(idx), "err", err)
	bad, err := s.core.Bisect([][]int{idx}, func(g []int) error { return s.put(ctx, recs, g) })
	if err != nil {
		return nil, classify("put", err)
	}
	return bad, nil
}

// put is one DoPut: the descriptor and schema, one record batch per chunk,
// then the half-close; it returns once every batch has its PutResult. The
// error is classified, except for InvalidArgument, returned as the
// server's status for bisection.
func (s *Sink) put(parent context.Context, recs []sink.Record, idx []int) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stream, err := s.client.DoPut(ctx)
	if err != nil {
		return s.fail(parent, "open DoPut", err)
	}
	parts := s.chunks(recs, idx)
	sent := make(chan time.Time, len(parts))
	acked := make(chan error, 1)
	go func() { acked <- s.acks(stream, sent, parts, len(idx)) }()

	w := flight.NewRecordWriter(stream, s.ipcOpt...)
	w.SetFlightDescriptor(s.desc)
	var sendErr error
	for _, p := range parts {
		rec := encodeGeneric(memory.DefaultAllocator, recs, p)
		sendErr = w.Write(rec)
		rec.Release()
		if sendErr != nil {
			break
		}
		sent <- time.Now()
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
		return s.fail(parent, "send", sendErr)
	}
	// On io.EOF the stream ended; the server's status, if it sent one,
	// is what the receiver gets.
	if err := <-acked; err != nil {
		return s.fail(parent, "DoPut", err)
	}
	if sendErr != nil {
		return s.fail(parent, "send", sendErr)
	}
	return nil
}

// acks reads PutResults until the server ends the stream: one per record
// batch sent, each counted as it comes. Fewer acknowledgements than
// batches with a clean end is the server not keeping the protocol.
func (s *Sink) acks(stream flight.FlightService_DoPutClient, sent <-chan time.Time, parts [][]int, rows int) error {
	n := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			if n < len(parts) {
				return errShortAck{acked: n, sent: len(parts)}
			}
			return nil
		}
		if err != nil {
			return err
		}
		if n >= len(parts) {
			continue // more results than batches: extra metadata, not ours to read
		}
		if at, ok := <-sent; ok {
			s.m.ack.Observe(time.Since(at).Seconds())
		}
		s.m.batches.Inc()
		s.m.rows.Add(float64(len(parts[n])))
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
