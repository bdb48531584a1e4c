// Package natssrc reads a NATS JetStream stream through a durable pull
// consumer and writes the messages through a gate, acknowledging each
// message only after the gate has made it durable.
//
// # Position regime
//
// Broker-managed: the position is the durable consumer's state on the
// server (its ack floor and pending set). The consumer uses explicit acks.
// The source fetches a batch, writes it through the gate, and only once
// Gate.Write returned nil acks every message of the batch with a
// server-confirmed ack (DoubleAck): an ack the server never received
// cannot be mistaken for one it applied, and an unconfirmed ack is retried
// (acks are idempotent). A message that is not acked — the gate failed, the
// process died — is redelivered by the server after AckWait.
//
// # Record ids
//
// source.TimedID(stream time, stream, stream sequence, payload). The stream
// sequence and the time the stream stored the message do not depend on the
// consumer or on the delivery attempt, so a redelivered message gets the
// id of its first copy and sinks drop the duplicate; ids sort by the
// stream's time.
//
// # Metadata
//
// A message's headers travel with it (see Headers: nats.go hands them over
// as a map, so names come in sorted order, each name's values in the order
// they were sent). Its key is the value of its Nats-Msg-Id header — the
// publisher's deduplication id, the one per-message identity JetStream
// knows — and none when it has no such header; the header stays among
// the headers too. Its event time is the stream timestamp (when the server
// stored it). Its origin position is "stream/subject@stream sequence"; the
// subject reaches no sink field of its own.
//
// # Sizing
//
// AckWait is the time from a message's delivery to its ack. A message can
// wait up to FetchMaxWait for its batch to fill, then for the gate's write
// (one fdatasync group for the whole batch) and for the acks of the
// messages before it; AckWait must exceed the sum with room to spare, or
// the server redelivers messages that are on their way to being acked
// (harmless duplicates, but wasted work). The defaults — FetchBatch 256,
// FetchMaxWait 1s, AckWait 30s — leave ~28s for the gate and the acks.
// MaxAckPending bounds the delivered-but-unacked messages: it must be at
// least FetchBatch, or a fetch can never fill; the default (4×FetchBatch)
// leaves room for redeliveries to be in flight with a full batch.
//
// # Prefetch
//
// Given Options.Prefetch (the source's share of the memory budget, in
// memory bytes) the source bounds what the server sends ahead of the
// gate (StagedPull), once, when it connects: each pull asks for at most
// Prefetch ÷ the estimated expansion bytes (FetchMaxBytes; never below
// the server's max_payload, or a larger message would never be
// delivered), and the consumer's MaxAckPending is lowered to the records
// the bound holds at the least size a record is estimated at
// (record_size_estimate), the fetch batch with it. Explicit
// Options.FetchMaxBytes and MaxAckPending win.
//
// # Pausing
//
// Source implements source.Pausable: while paused it sends no pull
// request; the batch it holds is still written and acked. The durable
// consumer keeps its place on the server.
package natssrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Defaults for Options.
const (
	DefaultFetchBatch   = 256
	DefaultFetchMaxWait = time.Second
	DefaultAckWait      = 30 * time.Second
	DefaultAckTimeout   = 5 * time.Second
	DefaultAckRetries   = 3
)

// Options configure New. Stream and Consumer are required.
type Options struct {
	// Name is the source's name; default "nats:" + Stream + "/" + Consumer.
	Name string
	// URL is the server (default nats.DefaultURL); NatsOptions are passed
	// to nats.Connect (credentials, TLS...).
	URL         string
	NatsOptions []nats.Option
	// Stream to read and the durable Consumer's name. The consumer is
	// created, or updated to this configuration, at start.
	Stream   string
	Consumer string
	// FilterSubjects restricts the consumer to these subjects (default:
	// the whole stream).
	FilterSubjects []string
	// FetchBatch: messages per fetch (default DefaultFetchBatch).
	// FetchMaxBytes, if > 0, also bounds a fetch's bytes (0: derived from
	// Prefetch, or unbounded without it).
	FetchBatch    int
	FetchMaxBytes int
	// FetchMaxWait: how long a fetch waits to fill (default
	// DefaultFetchMaxWait).
	FetchMaxWait time.Duration
	// AckWait and MaxAckPending are the consumer's (defaults DefaultAckWait
	// and 4×FetchBatch). See the package doc for sizing them against the
	// gate's latency. AckWait must exceed FetchMaxWait.
	AckWait       time.Duration
	MaxAckPending int
	// MaxDeliver bounds delivery attempts per message (default unlimited:
	// a message the gate cannot take is not dropped by the server).
	MaxDeliver int
	// AckTimeout bounds one confirmed ack; AckRetries is how many more
	// times an unconfirmed ack is sent (defaults DefaultAckTimeout,
	// DefaultAckRetries). An ack that stays unconfirmed is left to
	// redelivery.
	AckTimeout time.Duration
	AckRetries int
	Logger     *slog.Logger
	// OnAck, if set, is called before each ack with the message's stream
	// sequence. Tests use it to check acks against what is durable.
	OnAck func(stream string, seq uint64)
	// Prefetch bounds what the server sends ahead of the gate, in bytes
	// as held: see the package doc, Prefetch. 0: nothing derived.
	Prefetch int64
	// Estimator, if set, is told each fetched batch's data size against
	// the memory it takes, and sizes the pulls.
	Estimator *flow.Estimator
}

// Source is a JetStream durable pull-consumer source.
type Source struct {
	opts Options
	log  *slog.Logger
	// ackPendingSet: MaxAckPending was given, not defaulted.
	ackPendingSet bool
	pause         source.Pauser
	// lim are the limits of the current run (StagedPull).
	lim PullLimits
}

var (
	_ source.Source   = (*Source)(nil)
	_ source.Pausable = (*Source)(nil)
)

// New checks opts and returns a source; nothing connects until Run.
func New(opts Options) (*Source, error) {
	if opts.Stream == "" || opts.Consumer == "" {
		return nil, errors.New("natssrc: Stream and Consumer are required")
	}
	if opts.Name == "" {
		opts.Name = "nats:" + opts.Stream + "/" + opts.Consumer
	}
	if opts.URL == "" {
		opts.URL = nats.DefaultURL
	}
	if opts.FetchBatch <= 0 {
		opts.FetchBatch = DefaultFetchBatch
	}
	if opts.FetchMaxWait <= 0 {
		opts.FetchMaxWait = DefaultFetchMaxWait
	}
	if opts.AckWait <= 0 {
		opts.AckWait = DefaultAckWait
	}
	ackPendingSet := opts.MaxAckPending > 0
	if !ackPendingSet {
		opts.MaxAckPending = 4 * opts.FetchBatch
	}
	if opts.MaxDeliver == 0 {
		opts.MaxDeliver = -1
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.AckRetries < 0 {
		opts.AckRetries = 0
	} else if opts.AckRetries == 0 {
		opts.AckRetries = DefaultAckRetries
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AckWait <= opts.FetchMaxWait {
		return nil, fmt.Errorf("natssrc: AckWait %v must exceed FetchMaxWait %v (and the gate's latency)", opts.AckWait, opts.FetchMaxWait)
	}
	if opts.MaxAckPending < opts.FetchBatch {
		return nil, fmt.Errorf("natssrc: MaxAckPending %d is below FetchBatch %d", opts.MaxAckPending, opts.FetchBatch)
	}
	s := &Source{opts: opts, log: opts.Logger.With("component", "source", "source", opts.Name), ackPendingSet: ackPendingSet}
	s.pause.OnChange = func(paused bool) { s.log.Info("nats source paused (no more pulls) or resumed", "paused", paused) }
	s.lim = PullLimits{FetchBatch: opts.FetchBatch, MaxAckPending: opts.MaxAckPending, MaxBytes: opts.FetchMaxBytes}
	return s, nil
}

// Pause stops pulling; the batch in hand is still written and acked.
// Idempotent, safe from any goroutine.
func (s *Source) Pause() { s.pause.Pause() }

// Resume pulls again.
func (s *Source) Resume() { s.pause.Resume() }

// PullLimits are a pull consumer's limits.
type PullLimits struct {
	FetchBatch    int // messages per pull
	MaxAckPending int // the consumer's bound on unacknowledged messages
	MaxBytes      int // bytes per pull (0: unbounded)
}

// maxMessageRoom is what a delivered message may take beyond the
// server's max_payload, which bounds its headers and data: its subject
// and reply subject.
const maxMessageRoom = 4 << 10

// StagedPull derives pull limits from prefetch, the memory a pull may
// take (bytes as held), ratio, the memory per byte delivered, recordSize,
// the least memory a record is estimated at, and maxPayload, the largest
// message the server takes (its max_payload), starting from base, the
// configured or default limits, which it only ever lowers:
//
//   - MaxBytes = prefetch ÷ ratio, but at least maxPayload plus room for
//     the subjects: the server never delivers a message larger than a
//     pull's MaxBytes, and the consumer would stop at it for good;
//   - MaxAckPending = at most prefetch ÷ recordSize — no more records
//     than the bound could hold were each as small as can be;
//   - FetchBatch at most MaxAckPending (a pull could never fill).
func StagedPull(base PullLimits, prefetch int64, ratio float64, recordSize int64, maxPayload int64) PullLimits {
	ratio = max(ratio, 1)
	recordSize = max(recordSize, 1)
	l := base
	mb := max(int64(float64(prefetch)/ratio), maxPayload+maxMessageRoom)
	if l.MaxBytes <= 0 || mb < int64(l.MaxBytes) {
		l.MaxBytes = int(mb)
	}
	l.MaxAckPending = int(max(min(int64(l.MaxAckPending), prefetch/recordSize), 1))
	l.FetchBatch = max(min(l.FetchBatch, l.MaxAckPending), 1)
	return l
}

// limits are the run's pull limits: StagedPull from the budget, with the
// explicit options winning.
func (s *Source) limits(maxPayload int64) PullLimits {
	base := PullLimits{FetchBatch: s.opts.FetchBatch, MaxAckPending: s.opts.MaxAckPending}
	if s.opts.Prefetch <= 0 {
		base.MaxBytes = s.opts.FetchMaxBytes
		return base
	}
	ratio, floor := flow.DefaultColdRatio, int64(flow.DefaultRecordSizeEstimate)
	if e := s.opts.Estimator; e != nil {
		ratio, floor = e.Ratio(), e.Floor()
	}
	l := StagedPull(base, s.opts.Prefetch, ratio, floor, maxPayload)
	if s.ackPendingSet {
		l.MaxAckPending, l.FetchBatch = s.opts.MaxAckPending, s.opts.FetchBatch
	}
	if s.opts.FetchMaxBytes > 0 {
		l.MaxBytes = s.opts.FetchMaxBytes
	}
	s.log.Info("nats pull limits from the memory budget", "prefetch_bytes", s.opts.Prefetch, "expansion_ratio", ratio,
		"fetch_max_bytes", l.MaxBytes, "max_ack_pending", l.MaxAckPending, "fetch_batch", l.FetchBatch,
		"max_ack_pending_set", s.ackPendingSet, "fetch_max_bytes_set", s.opts.FetchMaxBytes > 0)
	return l
}

// Name implements source.Source.
func (s *Source) Name() string { return s.opts.Name }

// Regime is broker-managed: the durable consumer keeps the position.
func (s *Source) Regime() source.Regime { return source.BrokerManaged }

// Replayable is false: a stream keeps messages only within its retention
// limits, so it cannot serve as its own raw system of record.
func (s *Source) Replayable() bool { return false }

// ConsumerConfig is the durable consumer the source creates or updates
// (its MaxAckPending is the last run's, StagedPull).
func (s *Source) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        s.opts.Consumer,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        s.opts.AckWait,
		MaxAckPending:  s.lim.MaxAckPending,
		MaxDeliver:     s.opts.MaxDeliver,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: s.opts.FilterSubjects,
	}
}

// Run consumes until ctx ends (then it returns nil) or the gate fails.
// cursors is unused: the server keeps the position.
func (s *Source) Run(ctx context.Context, gate source.Gate, _ source.CursorStore) error {
	nc, err := nats.Connect(s.opts.URL, s.opts.NatsOptions...)
	if err != nil {
		return fmt.Errorf("natssrc: %s: connect %s: %w", s.opts.Name, s.opts.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natssrc: %s: %w", s.opts.Name, err)
	}
	s.lim = s.limits(nc.MaxPayload())
	cons, err := js.CreateOrUpdateConsumer(ctx, s.opts.Stream, s.ConsumerConfig())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("natssrc: %s: consumer %s on %s: %w", s.opts.Name, s.opts.Consumer, s.opts.Stream, err)
	}
	s.log.Info("nats source started", "stream", s.opts.Stream, "consumer", s.opts.Consumer)
	for ctx.Err() == nil {
		if err := s.pause.Wait(ctx); err != nil {
			return nil
		}
		if err := s.once(ctx, cons, gate); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s *Source) once(ctx context.Context, cons jetstream.Consumer, gate source.Gate) error {
	fo := []jetstream.FetchOpt{jetstream.FetchMaxWait(s.opts.FetchMaxWait)}
	if s.lim.MaxBytes > 0 {
		fo = append(fo, jetstream.FetchMaxBytes(s.lim.MaxBytes))
	}
	batch, err := cons.Fetch(s.lim.FetchBatch, fo...)
	if err != nil {
		s.log.Warn("fetch failed", "err", err)
		return sleep(ctx, s.opts.FetchMaxWait)
	}
	var msgs []jetstream.Msg
	var recs []source.Record
	var seqs []uint64
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			// Not a JetStream message: nothing to place it by.
			s.log.Error("message without metadata; left for redelivery", "subject", m.Subject(), "err", err)
			continue
		}
		msgs = append(msgs, m)
		seqs = append(seqs, md.Sequence.Stream)
		recs = append(recs, s.record(m, md))
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("fetch ended with an error", "err", err, "messages", len(msgs))
	}
	if len(recs) == 0 {
		return nil
	}
	if e := s.opts.Estimator; e != nil {
		e.Observe(source.Sizes(recs)) // a message's fixed cost is the estimator's floor's
	}
	if err := gate.Write(ctx, recs); err != nil {
		if ctx.Err() == nil {
			// Ask for redelivery now rather than after AckWait.
			for _, m := range msgs {
				_ = m.Nak()
			}
		}
		return fmt.Errorf("natssrc: %s: gate: %w", s.opts.Name, err)
	}
	for i, m := range msgs {
		s.ack(ctx, m, seqs[i])
	}
	return nil
}

// record is the source record of a JetStream message: its id, data,
// headers, key (the Nats-Msg-Id header), stream timestamp as event time,
// and "stream/subject@sequence" as origin position.
func (s *Source) record(m jetstream.Msg, md *jetstream.MsgMetadata) source.Record {
	seq := md.Sequence.Stream
	hdrs := Headers(m.Headers())
	r := source.Record{
		ID:        source.TimedID(md.Timestamp, []byte(md.Stream), source.Uint64(seq), m.Data()),
		Payload:   m.Data(),
		Source:    s.opts.Name,
		Time:      md.Timestamp,
		Headers:   hdrs,
		OriginPos: md.Stream + "/" + m.Subject() + "@" + strconv.FormatUint(seq, 10),
	}
	for _, h := range hdrs {
		if h.Key == jetstream.MsgIDHeader {
			r.Key = h.Value
			break
		}
	}
	return r
}

// Headers turns a message's headers into a record's: names in sorted
// order (nats.Header is a map, so the order they were sent in is gone),
// each name's values in the order they were sent, a repeated name once
// per value. Nil when there are none.
func Headers(h nats.Header) []sink.Header {
	if len(h) == 0 {
		return nil
	}
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	out := make([]sink.Header, 0, n)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			out = append(out, sink.Header{Key: k, Value: []byte(v)})
		}
	}
	return out
}

// ack acks one durable message with server confirmation, retrying an
// unconfirmed ack. The acks of a durable batch are sent even when ctx has
// ended (each bounded by AckTimeout), so that a clean stop re-reads
// nothing.
func (s *Source) ack(ctx context.Context, m jetstream.Msg, seq uint64) {
	if s.opts.OnAck != nil {
		s.opts.OnAck(s.opts.Stream, seq)
	}
	var err error
	for attempt := 0; attempt <= s.opts.AckRetries; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.AckTimeout)
		err = m.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, nats.ErrConnectionClosed) {
			break
		}
	}
	if err != nil {
		s.log.Warn("ack not confirmed; the message will be redelivered", "seq", seq, "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// Probe connects to opts.URL as the source does (NatsOptions), within
// ctx's deadline, and checks that JetStream answers and opts.Stream
// exists; it creates and acknowledges nothing (weir validate
// --connect).
func Probe(ctx context.Context, opts Options) error {
	if opts.URL == "" {
		opts.URL = nats.DefaultURL
	}
	nopts := opts.NatsOptions
	if dl, ok := ctx.Deadline(); ok {
		nopts = append(slices.Clip(nopts), nats.Timeout(max(time.Until(dl), time.Millisecond)))
	}
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		return fmt.Errorf("natssrc: connect %s: %w", opts.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natssrc: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("natssrc: JetStream at %s: %w", opts.URL, err)
	}
	if opts.Stream != "" {
		if _, err := js.Stream(ctx, opts.Stream); err != nil {
			return fmt.Errorf("natssrc: stream %q: %w", opts.Stream, err)
		}
	}
	return nil
}
