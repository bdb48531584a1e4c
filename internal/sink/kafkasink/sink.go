// Package kafkasink is weir's Kafka sink: every committed record becomes
// one record of a Kafka topic, produced with franz-go's idempotent
// producer and acks=all. It is meant as a [[secondary]] (or a [sink] fed by
// the write-ahead buffer); it has no raw mode, because a topic cannot be
// read back by weir's raw positions.
//
// # Records
//
// The record's key and payload are the Kafka key and value (a record
// without a key gets a null key; an empty payload is an empty value, never
// a null one, which a compacted topic would take for a tombstone). Its
// headers come first, in order, followed by weir's own:
//
//	weir_record_id    32 hex digits: the deduplication key
//	weir_source       the source's name
//	weir_durability   "durable" or "buffered"
//	weir_received_at  when the daemon accepted it, RFC 3339, UTC, to the ns
//	weir_event_time   the record's own time, same form; only when it has one
//
// Weir's headers start at the record's last weir_record_id header, so a
// record that already carried weir headers (a topic mirrored twice) keeps
// them among its own. The record's event time is the Kafka timestamp
// (CreateTime, to the millisecond) when it has one at or after 1970;
// otherwise the timestamp is the time it was produced. Decode reads a
// record back.
//
// # Partitions
//
// A record with a key goes to the partition Kafka's default partitioner
// picks for that key (murmur2), so keyed records mix with those of Java
// and other clients. A record without a key goes where its weir_record_id
// would as a key: every copy of it, a replay included, lands on the same
// partition. Placement never moves a record to another partition when its
// own is unavailable; it waits, up to the delivery timeout.
//
// # Commit
//
// Commit produces the batch and returns only when the broker has
// acknowledged every record (acks=all: every in-sync replica has it; how
// many that is, is the topic's min.insync.replicas) or the batch has
// failed. The records of one partition are appended in batch order. The
// producer is idempotent: a request the client resends after a lost reply
// is not stored twice. franz-go allows one produce request in flight per
// broker until the broker's first reply shows it supports more, then five,
// and the sequence numbers keep the order; throughput comes from batching
// (franz-go packs each partition's records into batches of up to
// MaxMessageBytes) and from spreading the topic over partitions and
// brokers.
//
// A record the broker refuses for good — MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP
// — is sent again on its own, because the broker refuses a partition's
// whole batch and does not say which record was at fault: refused again,
// it is rejected (sink.Rejection, CodeOversize for the size errors,
// CodeSinkRefused for the others); accepted, it is committed. A record
// larger than MaxMessageBytes is rejected as oversize without being sent.
//
// # Errors and timeouts
//
// Every Commit is bounded by DeliveryTimeout: each record carries the
// Commit's context, which cancels the requests still in flight at its
// deadline (AllowIdempotentProduceCancellation), and at the deadline the
// Commit abandons whatever it has not had acknowledged
// (UnsafeAbortBufferedRecords: the records are failed, and the client
// takes a new producer epoch before it produces again), so a dead or
// silent broker never holds the sink beyond it. franz-go's
// own RecordDeliveryTimeout is not used: it counts from a record's
// timestamp, which here is the event time, so a record whose event time is
// older than the timeout would fail at once. Unreachable brokers, timeouts, leader
// changes, NOT_ENOUGH_REPLICAS and an unknown topic are transient: Commit
// fails and the drain retries the batch. Authorization failures, an
// invalid topic name and a compression the brokers do not support are
// permanent.
//
// Delivery is at least once and the sink keeps duplicates: a batch that
// failed after some of its records were acknowledged is sent whole again,
// and a cancelled in-flight request may have been stored. Readers
// deduplicate on weir_record_id.
//
// Commit's skeleton (pre-checks, the deadline, rejections, the last error
// for Health, the counters) is package sinkcore's Core, which the SQL sinks
// share too; this package gives it the producing.
//
// # Left out
//
// TLS and SASL have no keys yet (Options.ClientOptions takes franz-go's
// options for them); the sink creates no topic; transactions (exactly-once
// into Kafka) are not used.
package kafkasink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/sink/sinkcore"
	"github.com/weir-io/weir/sink"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBatchSize    = 4096
	DefaultDeliveryTimeout = 30 * time.Second
	DefaultMaxMessageBytes = 1 << 20
	DefaultHealthTimeout   = 2 * time.Second
	DefaultClientID        = "weir"
	DefaultCompression     = CompressionNone
)

// Compression codecs.
const (
	CompressionNone   = "none"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
)

var codecs = map[string]kgo.CompressionCodec{
	CompressionNone:   kgo.NoCompression(),
	CompressionSnappy: kgo.SnappyCompression(),
	CompressionLZ4:    kgo.Lz4Compression(),
	CompressionZstd:   kgo.ZstdCompression(),
	CompressionGzip:   kgo.GzipCompression(),
}

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("kafkasink: sink is closed")

// Options configure New. Brokers and Topic are required.
type Options struct {
	// Brokers are the bootstrap brokers, host:port.
	Brokers []string
	// Topic is the topic every record goes to. It must exist.
	Topic string
	// ClientID names the client to the brokers (default DefaultClientID).
	ClientID string
	// DeliveryTimeout bounds one Commit, the sending of its records
	// included (default DefaultDeliveryTimeout).
	DeliveryTimeout time.Duration
	// MaxBatchSize is the most records one Commit takes (default
	// DefaultMaxBatchSize).
	MaxBatchSize int
	// MaxMessageBytes bounds a record batch sent to one partition, before
	// compression (default DefaultMaxMessageBytes); keep it at or below
	// the topic's max.message.bytes. A record whose key, value and
	// headers pass it is rejected as oversize.
	MaxMessageBytes int
	// Compression is the batches' codec: CompressionNone (default),
	// CompressionSnappy, CompressionLZ4, CompressionZstd or
	// CompressionGzip.
	Compression string
	// HealthTimeout bounds Health's ping (default DefaultHealthTimeout).
	HealthTimeout time.Duration
	// ClientOptions are appended to the client's options (TLS, SASL, a
	// dialer). They must not disable idempotency or change the acks.
	ClientOptions []kgo.Opt
	Logger        *slog.Logger
}

// Stats are the sink's counters.
type Stats struct {
	Batches   int64 // Commit calls with at least one record
	Records   int64 // records in those batches
	Committed int64 // records acknowledged (resends included)
	Rejected  int64 // records rejected
	Isolated  int64 // records a refusal made the sink send again on their own
	Failures  int64 // Commit calls that returned an error
}

// Sink produces records to a Kafka topic. It implements sink.Sink.
type Sink struct {
	opts     Options
	cl       *kgo.Client
	log      *slog.Logger
	core     *sinkcore.Core
	isolated atomic.Int64
}

var _ sink.Sink = (*Sink)(nil)

// New checks opts, connects and checks that the topic exists.
func New(ctx context.Context, opts Options) (*Sink, error) {
	opts, codec, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	s := &Sink{opts: opts, log: opts.Logger.With("topic", opts.Topic)}
	s.cl, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.ClientID(opts.ClientID),
		kgo.DefaultProduceTopic(opts.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProducerBatchMaxBytes(int32(opts.MaxMessageBytes)),
		kgo.MaxBufferedRecords(opts.MaxBatchSize),
		kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(partitioner{}),
		kgo.WithLogger(kgoLogger{s.log}),
	}, opts.ClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: client: %w", err)
	}
	s.core = sinkcore.New(sinkcore.Config{
		Name: "kafkasink", Server: "kafka", ErrClosed: ErrClosed,
		Timeout: opts.DeliveryTimeout, MaxProbes: 1, Log: s.log,
		Check: s.check, CommitRows: s.commitRows, IsDataError: func(error) bool { return false },
		Ping: s.ping, Close: func() error { s.cl.Close(); return nil },
	})
	if err := s.checkTopic(ctx); err != nil {
		s.cl.Close()
		return nil, err
	}
	return s, nil
}

// Probe dials the brokers of opts as the sink does (its client id and
// client options) and checks that the topic exists, by reading its
// metadata; it produces nothing (weir validate --connect). ctx bounds
// it.
func Probe(ctx context.Context, opts Options) error {
	opts, _, err := withDefaults(opts)
	if err != nil {
		return err
	}
	s := &Sink{opts: opts, log: opts.Logger}
	s.cl, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.ClientID(opts.ClientID),
		kgo.WithLogger(kgoLogger{s.log}),
	}, opts.ClientOptions...)...)
	if err != nil {
		return fmt.Errorf("kafkasink: client: %w", err)
	}
	defer s.cl.Close()
	if err := s.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafkasink: no broker answers at %s: %w", strings.Join(opts.Brokers, ","), err)
	}
	return s.checkTopic(ctx)
}

func withDefaults(opts Options) (Options, kgo.CompressionCodec, error) {
	if len(opts.Brokers) == 0 || opts.Topic == "" {
		return opts, kgo.CompressionCodec{}, errors.New("kafkasink: Brokers and Topic are required")
	}
	if opts.ClientID == "" {
		opts.ClientID = DefaultClientID
	}
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if opts.MaxBatchSize <= 0 {
		opts.MaxBatchSize = DefaultMaxBatchSize
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.Compression == "" {
		opts.Compression = DefaultCompression
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	codec, ok := codecs[opts.Compression]
	if !ok {
		return opts, codec, fmt.Errorf("kafkasink: compression %q: want none, snappy, lz4, zstd or gzip", opts.Compression)
	}
	return opts, codec, nil
}

// checkTopic asks the brokers for the topic, within the delivery timeout.
func (s *Sink) checkTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DeliveryTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(s.opts.Topic)
	req.Topics = []kmsg.MetadataRequestTopic{t}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return fmt.Errorf("kafkasink: brokers %s: %w", strings.Join(s.opts.Brokers, ","), err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("kafkasink: topic %q: the brokers answered for %d topics", s.opts.Topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("kafkasink: topic %q does not exist (the sink creates no topic): %w", s.opts.Topic, err)
		}
		return fmt.Errorf("kafkasink: topic %q: %w", s.opts.Topic, err)
	}
	s.log.Info("kafka sink ready", "partitions", len(resp.Topics[0].Partitions), "brokers", len(resp.Brokers))
	return nil
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return "kafka" }

// MaxBatchSize implements sink.Sink.
func (s *Sink) MaxBatchSize() int { return s.opts.MaxBatchSize }

// Commit implements sink.Sink; see the package documentation.
func (s *Sink) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	return s.core.Commit(ctx, b)
}

// Health implements sink.Sink: Down when no broker answers within
// HealthTimeout, Degraded while the last Commit failed.
func (s *Sink) Health(ctx context.Context) sink.Health { return s.core.Health(ctx) }

// Close implements sink.Sink. Commit returns only once every record it
// produced is finished, so nothing is left buffered.
func (s *Sink) Close() error { return s.core.Close() }

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	c := s.core
	return Stats{Batches: c.Batches.Load(), Records: c.Records.Load(), Committed: c.Committed.Load(),
		Rejected: c.Rejected.Load(), Isolated: s.isolated.Load(), Failures: c.Failures.Load()}
}

func (s *Sink) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.HealthTimeout)
	defer cancel()
	if err := s.cl.Ping(ctx); err != nil {
		return fmt.Errorf("no broker answers: %w", err)
	}
	return nil
}

// check rejects a record that cannot fit in a batch of MaxMessageBytes.
func (s *Sink) check(r *sink.Record) (string, sink.Code) {
	n := len(r.Key) + len(r.Payload)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	if n > s.opts.MaxMessageBytes {
		return fmt.Sprintf("record of %d bytes (key, value and headers) is larger than max_message_bytes %d", n, s.opts.MaxMessageBytes), sink.CodeOversize
	}
	return "", 0
}

// outcome is what became of one produced record.
type outcome int

const (
	acked     outcome = iota
	refused           // the broker (or the client, for its size) refuses it for good
	transient         // a retry of the batch can succeed
	permanent         // no retry can succeed: configuration, authorization
)

// classify sorts a record's produce error. Errors that end a record's
// wait (its context, the delivery timeout, the client closing) come first:
// they wrap the last error seen, which may name anything.
func classify(err error) (outcome, sink.Code) {
	switch {
	case err == nil:
		return acked, 0
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrAborting), errors.Is(err, kgo.ErrMaxBuffered):
		return transient, 0
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return refused, sink.CodeOversize
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.InvalidTimestamp):
		return refused, sink.CodeSinkRefused
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.UnsupportedCompressionType), errors.Is(err, kerr.InvalidRequiredAcks):
		return permanent, 0
	}
	return transient, 0
}

// commitRows produces recs[idx...] and waits for every acknowledgement;
// records the broker refused are sent again one by one (isolate).
func (s *Sink) commitRows(ctx context.Context, recs []sink.Record, idx []int) ([]sink.Rejection, error) {
	errs := s.produce(ctx, s.encode(recs, idx))
	var again []int // positions in idx
	var failed int
	var perm, trans error
	for j, err := range errs {
		switch o, _ := classify(err); o {
		case refused:
			again = append(again, j)
		case permanent:
			failed++
			perm = cmp.Or(perm, err)
		case transient:
			failed++
			trans = cmp.Or(trans, err)
		}
	}
	if perm != nil {
		return nil, sink.Permanent(fmt.Errorf("kafkasink: topic %q: %w", s.opts.Topic, perm))
	}
	if trans != nil {
		within := ""
		switch ctx.Err() {
		case context.DeadlineExceeded:
			within = fmt.Sprintf(" by the commit's deadline (delivery timeout %v)", s.opts.DeliveryTimeout)
		case context.Canceled:
			within = " before the commit was cancelled"
		}
		return nil, sink.Transient(fmt.Errorf("kafkasink: topic %q: %d of %d records not acknowledged%s: %w", s.opts.Topic, failed, len(idx), within, trans))
	}
	if len(again) == 0 {
		return nil, nil
	}
	return s.isolate(ctx, recs, idx, again, errs)
}

// encode makes the Kafka records of recs[idx...], their headers and the
// bytes of weir's header values each in one allocation.
func (s *Sink) encode(recs []sink.Record, idx []int) []kgo.Record {
	nh, nb := 0, 0
	for _, i := range idx {
		nh += len(recs[i].Headers) + weirHeaders
		nb += 2*len(sink.RecordID{}) + len(recs[i].Source) + 2*len(time.RFC3339Nano)
	}
	out := make([]kgo.Record, len(idx))
	hs := make([]kgo.RecordHeader, 0, nh)
	e := encoder{slab: make([]byte, 0, nb)}
	for j, i := range idx {
		r := &recs[i]
		n := len(r.Headers) + weirHeaders
		e.encode(r, &out[j], hs[len(hs):len(hs):len(hs)+n])
		hs = hs[:len(hs)+n]
	}
	return out
}

// produce sends krecs and returns each one's outcome once all are
// finished, by the end of ctx at the latest: then whatever is still
// buffered or in flight is abandoned (failed with kgo.ErrAborting; the
// client bumps its producer epoch before it produces again, so no sequence
// number is reused). Only one Commit produces at a time, so what is
// abandoned is this Commit's.
func (s *Sink) produce(ctx context.Context, krecs []kgo.Record) []error {
	errs := make([]error, len(krecs))
	var wg sync.WaitGroup
	wg.Add(len(krecs))
	for j := range krecs {
		s.cl.Produce(ctx, &krecs[j], func(_ *kgo.Record, err error) {
			errs[j] = err
			wg.Done()
		})
	}
	// Flush sends at once rather than after the linger, and waits; the
	// outcomes come from the promises.
	if s.cl.Flush(ctx) != nil {
		s.cl.UnsafeAbortBufferedRecords()
	}
	wg.Wait()
	return errs
}

// isolate sends the records at idx[again...] again one at a time: a broker
// refuses a partition's whole batch without saying which record was at
// fault. A record refused on its own is rejected; one accepted is
// committed; any other failure fails the Commit.
func (s *Sink) isolate(ctx context.Context, recs []sink.Record, idx, again []int, errs []error) ([]sink.Rejection, error) {
	s.isolated.Add(int64(len(again)))
	if len(again) > 1 {
		s.log.Warn("the broker refused records; sending them again one by one to find the ones at fault (if they are not oversize, max_message_bytes may exceed the topic's max.message.bytes)",
			"records", len(again), "first_err", errs[again[0]])
	}
	var bad []sink.Rejection
	for _, j := range again {
		one := []int{idx[j]}
		err := s.produce(ctx, s.encode(recs, one))[0]
		switch o, code := classify(err); o {
		case acked:
		case refused:
			bad = append(bad, sink.Rejection{Index: idx[j], Reason: "kafka refused the record: " + err.Error(), Code: code})
		case permanent:
			return nil, sink.Permanent(fmt.Errorf("kafkasink: topic %q: %w", s.opts.Topic, err))
		default:
			return nil, sink.Transient(fmt.Errorf("kafkasink: topic %q: resending a refused record: %w", s.opts.Topic, err))
		}
	}
	return bad, nil
}

// kgoLogger passes franz-go's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	k.l.Log(context.Background(), lvl, "kafka client: "+msg, kv...)
}
