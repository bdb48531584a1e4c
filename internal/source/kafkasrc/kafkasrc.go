// Package kafkasrc reads Kafka topics as a member of a consumer group and
// writes the records through a gate, committing group offsets only after
// the gate has made the records durable.
//
// # Position regime
//
// Broker-managed: the position is the group's committed offset per
// partition, kept by the group coordinator. Autocommit is disabled; the
// source commits itself, synchronously, after Gate.Write returned nil:
//
//  1. PollRecords (at most Options.MaxPollRecords). Rebalances are blocked
//     from the poll until step 4 (kgo.BlockRebalanceOnPoll), so the
//     partitions the records came from stay this member's.
//  2. Gate.Write of the whole batch.
//  3. Commit, per partition, the offset after the highest record of the
//     batch (the batch high water), retrying retriable errors.
//  4. AllowRebalance.
//
// A revoked partition can therefore never have anything committed for it
// beyond what is durable: everything polled from it was either written and
// committed in step 3, or the source stopped at step 2 without committing.
// If the gate is slower than the group's rebalance timeout the member is
// kicked out of the group; its commit then fails, which only means the new
// owner re-reads the batch (duplicates with the same ids).
//
// With Options.PerRecordCommit the source writes and commits one record at
// a time: a failure then replays at most one record, at the cost of one
// fdatasync and one commit round trip per record.
//
// # Record ids and metadata
//
// source.TimedID(timestamp, cluster, topic, partition, offset, payload): a
// redelivered record gets the id of its first copy, and ids sort by the
// record's timestamp (ms 0 for "no timestamp"). A record's key (nil for a null
// key, kept empty for an empty one), its headers (in order, repeats kept)
// and its timestamp — the producer's CreateTime or the broker's
// LogAppendTime, whichever the topic uses; none for Kafka's "no
// timestamp" (-1) — travel with it as key, headers and event time, and
// "topic/partition@offset" as its origin position.
//
// # Pausing
//
// Source implements source.Pausable: Pause stops fetching the source's
// topics (kgo's PauseFetchTopics) while the client stays in the group —
// it keeps heartbeating, so pausing causes no rebalance, and partitions
// assigned while paused stay paused, since it is the topics that are.
// Records the client had already buffered are dropped from its buffer
// and fetched again after Resume; a batch already polled is still
// written and committed. Resume fetches again from where the source was.
//
// # Prefetch
//
// franz-go buffers fetched records ahead of PollRecords: up to
// FetchMaxBytes per fetch, one fetch per broker, decompressed. Given
// Options.Prefetch (the source's share of the memory budget, in memory
// bytes), the source derives its fetch limits from it (StagedFetch):
// brokers count compressed bytes, so the bound is divided by the
// compression ratio measured on the fetched batches (kgo's
// HookFetchBatchRead: compressed against uncompressed bytes; a
// conservative flow.DefaultColdRatio until enough batches were read),
// shared by at most MaxConcurrentFetches fetches. The limits are derived
// when the client is made and follow the measured ratio afterwards
// (kgo's UpdateFetchMaxBytes) when it moves by more than a quarter.
// Options.FetchMaxBytes and FetchMaxPartitionBytes, when set, win. The
// hook also feeds Options.Estimator, the gate's estimate of what a record
// takes in memory, from each polled batch.
//
// # Failures
//
// A gate error stops Run with that error and nothing of the batch is
// committed; the caller restarts the source, which resumes from the last
// committed offsets. A commit that still fails after its retries, or fails
// with a non-retriable error (the member lost the partition), is logged and
// left behind: the committed offset lags, and the records are read again by
// whoever owns the partition next.
package kafkasrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/internal/backoff"
	"github.com/weir-io/weir/internal/flow"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Defaults for Options.
const (
	DefaultMaxPollRecords     = 1000
	DefaultCommitRetries      = 8
	DefaultCommitRetryBackoff = 200 * time.Millisecond
	DefaultCommitTimeout      = 10 * time.Second
	// DefaultRebalanceTimeout bounds how long a rebalance waits for members
	// to give up their partitions — here, for a batch to be written and
	// committed. It must exceed the gate's worst write latency for a batch.
	DefaultRebalanceTimeout = 60 * time.Second
	DefaultSessionTimeout   = 45 * time.Second
)

// Options configure New. Brokers, Topics and Group are required.
type Options struct {
	// Name is the source's name (logs, metrics, record origins); default
	// "kafka:" + Group.
	Name    string
	Brokers []string
	Topics  []string
	Group   string
	// Cluster names the Kafka cluster in record ids. Empty: the cluster id
	// the brokers report (Metadata), which must then be stable. Set it
	// explicitly when a cluster may be rebuilt under the same name, or the
	// ids of re-read records would change.
	Cluster string
	// MaxPollRecords bounds a batch (default DefaultMaxPollRecords).
	MaxPollRecords int
	// PerRecordCommit writes and commits one record at a time instead of
	// one batch at a time (see the package doc).
	PerRecordCommit bool
	// CommitRetries, CommitRetryBackoff: a commit failing with a retriable
	// error is tried again up to CommitRetries times, waiting
	// CommitRetryBackoff (doubling, at most 5s) in between (defaults
	// DefaultCommitRetries, DefaultCommitRetryBackoff).
	CommitRetries      int
	CommitRetryBackoff time.Duration
	// CommitTimeout bounds one commit attempt (default DefaultCommitTimeout).
	// A commit after a durable write is attempted even when Run's context
	// has ended, bounded by this timeout, so that a clean stop re-reads
	// nothing.
	CommitTimeout time.Duration
	// RebalanceTimeout and SessionTimeout are the group's (defaults
	// DefaultRebalanceTimeout, DefaultSessionTimeout).
	RebalanceTimeout time.Duration
	SessionTimeout   time.Duration
	// FetchMaxBytes, FetchMaxPartitionBytes: the client's fetch sizes (0:
	// derived from Prefetch, or without it the client's defaults, 50 MiB
	// and 1 MiB). Set, they win over Prefetch.
	FetchMaxBytes          int32
	FetchMaxPartitionBytes int32
	// Prefetch bounds the memory the client's buffered fetches may take,
	// in bytes as held (decompressed): see the package doc, Prefetch. 0:
	// the client's defaults.
	Prefetch int64
	// Estimator, if set, is told each polled batch's data size against
	// the memory it takes (the gate's admission reserves by it).
	Estimator *flow.Estimator
	// StartAtEnd makes a group without committed offsets start at the end
	// of each partition instead of the beginning.
	StartAtEnd bool
	// ClientOptions are appended to the client's options (TLS, SASL...).
	// They must not re-enable autocommit.
	ClientOptions []kgo.Opt
	Logger        *slog.Logger
	// OnCommit, if set, is called before each commit request for every
	// partition it carries, with the offset being committed (the next
	// offset to read). Tests use it to check positions against what is
	// durable.
	OnCommit func(topic string, partition int32, next int64)
}

// Source is a Kafka consumer-group source.
type Source struct {
	opts Options
	log  *slog.Logger
	// wire is the compression ratio of the fetched batches (uncompressed
	// ÷ compressed), kept across runs.
	wire *flow.Estimator

	mu      sync.Mutex
	pending map[string]map[int32]kgo.EpochOffset // durable, not yet committed

	pauseMu sync.Mutex
	paused  bool
	cl      *kgo.Client // the running client, nil between runs
}

var (
	_ source.Source   = (*Source)(nil)
	_ source.Pausable = (*Source)(nil)
)

// New checks opts and returns a source; nothing connects until Run.
func New(opts Options) (*Source, error) {
	if len(opts.Brokers) == 0 || len(opts.Topics) == 0 || opts.Group == "" {
		return nil, errors.New("kafkasrc: Brokers, Topics and Group are required")
	}
	if opts.Name == "" {
		opts.Name = "kafka:" + opts.Group
	}
	if opts.MaxPollRecords <= 0 {
		opts.MaxPollRecords = DefaultMaxPollRecords
	}
	if opts.CommitRetries <= 0 {
		opts.CommitRetries = DefaultCommitRetries
	}
	if opts.CommitRetryBackoff <= 0 {
		opts.CommitRetryBackoff = DefaultCommitRetryBackoff
	}
	if opts.CommitTimeout <= 0 {
		opts.CommitTimeout = DefaultCommitTimeout
	}
	if opts.RebalanceTimeout <= 0 {
		opts.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Source{
		opts:    opts,
		log:     opts.Logger.With("component", "source", "source", opts.Name),
		wire:    flow.NewEstimator(1),
		pending: map[string]map[int32]kgo.EpochOffset{},
	}, nil
}

// Name implements source.Source.
func (s *Source) Name() string { return s.opts.Name }

// Regime is broker-managed: the group coordinator keeps the offsets.
func (s *Source) Regime() source.Regime { return source.BrokerManaged }

// Replayable is false: a topic can be re-read only within its retention,
// so it cannot serve as its own raw system of record.
func (s *Source) Replayable() bool { return false }

// Pause stops fetching the source's topics; the client stays in its
// group. Idempotent, safe from any goroutine, before or during Run.
func (s *Source) Pause() {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if s.paused {
		return
	}
	s.paused = true
	if s.cl != nil {
		s.cl.PauseFetchTopics(s.opts.Topics...)
	}
	s.log.Info("kafka source paused: fetching stopped, group membership kept")
}

// Resume fetches the source's topics again.
func (s *Source) Resume() {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if !s.paused {
		return
	}
	s.paused = false
	if s.cl != nil {
		s.cl.ResumeFetchTopics(s.opts.Topics...)
	}
	s.log.Info("kafka source resumed")
}

// CompressionRatio is the compression ratio measured on the fetched
// batches (uncompressed ÷ compressed bytes, the 95th percentile), or
// flow.DefaultColdRatio before enough batches were read.
func (s *Source) CompressionRatio() float64 { return s.wire.Ratio() }

// attach makes cl the running client (nil: none), paused if the source is.
func (s *Source) attach(cl *kgo.Client) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.cl = cl
	if cl != nil && s.paused {
		cl.PauseFetchTopics(s.opts.Topics...)
	}
}

// Defaults of StagedFetch.
const (
	// MaxConcurrentFetches bounds the fetches buffered at once when the
	// limits are derived (franz-go's default is one per broker).
	MaxConcurrentFetches = 4
	// clientFetchMaxBytes, clientFetchMaxPartitionBytes: franz-go's
	// defaults, which derived limits never exceed.
	clientFetchMaxBytes          = 50 << 20
	clientFetchMaxPartitionBytes = 1 << 20
)

// FetchSizes are the fetch limits a source gives its client.
type FetchSizes struct {
	MaxBytes, MaxPartitionBytes int32
	MaxConcurrentFetches        int
}

// StagedFetch derives the fetch limits from prefetch, the memory the
// buffered fetches may take (bytes as held), and ratio, the bytes a
// fetched byte becomes in memory: prefetch ÷ ratio compressed bytes in
// all, shared by up to MaxConcurrentFetches fetches of at least
// clientFetchMaxPartitionBytes each (fewer fetches when that is too
// much), none above the client's defaults, none below flow.MinPrefetch ÷
// ratio (a fetch must make progress; Kafka returns one batch whatever
// the limit).
func StagedFetch(prefetch int64, ratio float64) FetchSizes {
	ratio = max(ratio, 1)
	wire := max(int64(float64(prefetch)/ratio), int64(float64(flow.MinPrefetch)/ratio), 1)
	conc := int(min(max(wire/clientFetchMaxPartitionBytes, 1), MaxConcurrentFetches))
	perFetch := min(wire/int64(conc), clientFetchMaxBytes)
	return FetchSizes{
		MaxBytes:             int32(perFetch),
		MaxPartitionBytes:    int32(min(perFetch, clientFetchMaxPartitionBytes)),
		MaxConcurrentFetches: conc,
	}
}

// fetchSizes are the limits for the ratio measured now; explicit options
// win. ok is false when nothing is derived (no Prefetch).
func (s *Source) fetchSizes() (f FetchSizes, ratio float64, ok bool) {
	if s.opts.Prefetch <= 0 {
		return FetchSizes{}, 0, false
	}
	ratio = s.wire.Ratio()
	f = StagedFetch(s.opts.Prefetch, ratio)
	if s.opts.FetchMaxBytes > 0 {
		f.MaxBytes = s.opts.FetchMaxBytes
	}
	if s.opts.FetchMaxPartitionBytes > 0 {
		f.MaxPartitionBytes = s.opts.FetchMaxPartitionBytes
	}
	return f, ratio, true
}

// fetchHook measures the compression of every fetched batch.
type fetchHook struct{ wire *flow.Estimator }

func (h fetchHook) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h.wire.Observe(int64(m.CompressedBytes), int64(m.UncompressedBytes))
}

func (s *Source) clientOpts() []kgo.Opt {
	o := []kgo.Opt{
		kgo.SeedBrokers(s.opts.Brokers...),
		kgo.ConsumerGroup(s.opts.Group),
		kgo.ConsumeTopics(s.opts.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.RebalanceTimeout(s.opts.RebalanceTimeout),
		kgo.SessionTimeout(s.opts.SessionTimeout),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	}
	if s.opts.StartAtEnd {
		o = append(o, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	} else {
		o = append(o, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	}
	o = append(o, kgo.WithHooks(fetchHook{s.wire}))
	if f, ratio, ok := s.fetchSizes(); ok {
		o = append(o, kgo.FetchMaxBytes(f.MaxBytes), kgo.FetchMaxPartitionBytes(f.MaxPartitionBytes),
			kgo.MaxConcurrentFetches(f.MaxConcurrentFetches))
		s.log.Info("kafka fetch limits from the memory budget", "prefetch_bytes", s.opts.Prefetch, "compression_ratio", ratio,
			"fetch_max_bytes", f.MaxBytes, "fetch_max_partition_bytes", f.MaxPartitionBytes, "max_concurrent_fetches", f.MaxConcurrentFetches,
			"explicit", s.opts.FetchMaxBytes > 0 || s.opts.FetchMaxPartitionBytes > 0)
	} else {
		if s.opts.FetchMaxBytes > 0 {
			o = append(o, kgo.FetchMaxBytes(s.opts.FetchMaxBytes))
		}
		if s.opts.FetchMaxPartitionBytes > 0 {
			o = append(o, kgo.FetchMaxPartitionBytes(s.opts.FetchMaxPartitionBytes))
		}
	}
	return append(o, s.opts.ClientOptions...)
}

// followRatio updates the client's fetch limits when the measured
// compression ratio has moved by more than a quarter from used; it
// returns the ratio the limits now follow.
func (s *Source) followRatio(cl *kgo.Client, used float64) float64 {
	if s.opts.Prefetch <= 0 || (s.opts.FetchMaxBytes > 0 && s.opts.FetchMaxPartitionBytes > 0) {
		return used
	}
	r := s.wire.Ratio()
	if r >= used*0.75 && r <= used*1.25 {
		return used
	}
	f, _, _ := s.fetchSizes()
	cl.UpdateFetchMaxBytes(f.MaxBytes, f.MaxPartitionBytes)
	s.log.Info("kafka fetch limits follow the measured compression ratio", "compression_ratio", r,
		"fetch_max_bytes", f.MaxBytes, "fetch_max_partition_bytes", f.MaxPartitionBytes)
	return r
}

// Run consumes until ctx ends (then it returns nil) or the gate fails.
// cursors is unused: the broker keeps the position.
func (s *Source) Run(ctx context.Context, gate source.Gate, _ source.CursorStore) error {
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("kafkasrc: %s: client: %w", s.opts.Name, err)
	}
	s.attach(cl)
	defer func() {
		s.attach(nil)
		// Leaving the group commits nothing (autocommit is off).
		cl.AllowRebalance()
		cl.Close()
	}()
	cluster := s.opts.Cluster
	if cluster == "" {
		if cluster, err = clusterID(ctx, cl); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kafkasrc: %s: %w", s.opts.Name, err)
		}
	}
	s.log.Info("kafka source started", "cluster", cluster, "group", s.opts.Group, "topics", s.opts.Topics)
	ratio := s.wire.Ratio()
	for {
		ratio = s.followRatio(cl, ratio)
		fetches := cl.PollRecords(ctx, s.opts.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		recs := fetches.Records()
		if err := s.handle(ctx, cl, gate, cluster, recs); err != nil {
			cl.AllowRebalance()
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // stopped mid-write: nothing of the batch committed
			}
			return err
		}
		cl.AllowRebalance()
	}
}

func (s *Source) handle(ctx context.Context, cl *kgo.Client, gate source.Gate, cluster string, krecs []*kgo.Record) error {
	if len(krecs) == 0 {
		return nil
	}
	step := len(krecs)
	if s.opts.PerRecordCommit {
		step = 1
	}
	for len(krecs) > 0 {
		n := min(step, len(krecs))
		batch := krecs[:n]
		krecs = krecs[n:]
		recs := s.records(cluster, batch)
		if e := s.opts.Estimator; e != nil {
			e.Observe(source.Sizes(recs))
		}
		if err := gate.Write(ctx, recs); err != nil {
			return fmt.Errorf("kafkasrc: %s: gate: %w", s.opts.Name, err)
		}
		s.markDurable(batch)
		s.commit(ctx, cl)
	}
	return nil
}

// records turns a batch into source records: the id, the value as
// payload, the key (nil for a null key), the headers in order and the
// record's timestamp as event time (none for Kafka's "no timestamp", -1).
// The headers of the whole batch share one allocation, and so do its
// origin positions (substrings of one string).
func (s *Source) records(cluster string, batch []*kgo.Record) []source.Record {
	nh := 0
	for _, r := range batch {
		nh += len(r.Headers)
	}
	hdrs := make([]sink.Header, 0, nh)
	recs := make([]source.Record, len(batch))
	var pos []byte
	if len(batch) > 0 {
		pos = make([]byte, 0, len(batch)*(len(batch[0].Topic)+24)) // "/p@offset" fits 24 bytes
	}
	ends := make([]int, len(batch))
	for i, r := range batch {
		pos = AppendOriginPos(pos, r.Topic, r.Partition, r.Offset)
		ends[i] = len(pos)
	}
	allPos := string(pos)
	for i, r := range batch {
		rec := &recs[i]
		at := recordTime(r)
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		*rec = source.Record{
			ID: source.TimedID(at, []byte(cluster), []byte(r.Topic), source.Uint64(uint64(r.Partition)),
				source.Uint64(uint64(r.Offset)), r.Value),
			Payload:   r.Value,
			Source:    s.opts.Name,
			Key:       r.Key,
			OriginPos: allPos[start:ends[i]],
			Time:      at,
		}
		if len(r.Headers) > 0 {
			start := len(hdrs)
			for _, h := range r.Headers {
				hdrs = append(hdrs, sink.Header{Key: h.Key, Value: h.Value})
			}
			rec.Headers = hdrs[start:len(hdrs):len(hdrs)]
		}
	}
	return recs
}

// recordTime is a record's timestamp; zero for Kafka's "no timestamp" (-1).
func recordTime(r *kgo.Record) time.Time {
	if r.Timestamp.UnixMilli() < 0 {
		return time.Time{}
	}
	return r.Timestamp
}

// OriginPos is how a record's place in Kafka is written in its metadata:
// "topic/partition@offset".
func OriginPos(topic string, partition int32, offset int64) string {
	return string(AppendOriginPos(nil, topic, partition, offset))
}

// AppendOriginPos appends OriginPos(topic, partition, offset) to b.
func AppendOriginPos(b []byte, topic string, partition int32, offset int64) []byte {
	b = append(b, topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '@')
	return strconv.AppendInt(b, offset, 10)
}

// markDurable adds the batch high water per partition to pending.
func (s *Source) markDurable(batch []*kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range batch {
		ps := s.pending[r.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			s.pending[r.Topic] = ps
		}
		if cur, ok := ps[r.Partition]; !ok || r.Offset+1 > cur.Offset {
			ps[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		}
	}
}

// commit commits every pending offset (only ever durable ones), retrying
// retriable failures. Whatever cannot be committed stays pending, lagging,
// unless the partition is no longer ours.
func (s *Source) commit(ctx context.Context, cl *kgo.Client) {
	pause := backoff.Backoff{Policy: backoff.Policy{Min: s.opts.CommitRetryBackoff, Max: 5 * time.Second}}
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		offs := clonePending(s.pending)
		s.mu.Unlock()
		if len(offs) == 0 {
			return
		}
		retry := s.commitOnce(ctx, cl, offs)
		if !retry {
			return
		}
		if attempt >= s.opts.CommitRetries {
			s.log.Error("commit retries exhausted; offsets lag (records will be read again)", "attempts", attempt+1)
			return
		}
		if !backoff.Sleep(ctx, pause.Next()) {
			return // the stop-time attempt was made; what is left lags
		}
	}
}

// commitOnce sends one commit of offs and removes from pending what was
// committed or can no longer be. It reports whether a retriable failure
// left something to commit.
func (s *Source) commitOnce(ctx context.Context, cl *kgo.Client, offs map[string]map[int32]kgo.EpochOffset) bool {
	if s.opts.OnCommit != nil {
		for t, ps := range offs {
			for p, eo := range ps {
				s.opts.OnCommit(t, p, eo.Offset)
			}
		}
	}
	// A context that ends mid-commit would leave its outcome unknown for
	// nothing: bound the attempt by time instead, so a stop still commits.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CommitTimeout)
	defer cancel()
	retry := false
	cl.CommitOffsetsSync(cctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			retry = retriable(err)
			s.log.Warn("offset commit failed", "err", err, "retry", retry)
			if !retry {
				s.dropPending(offs)
			}
			return
		}
		done := map[string]map[int32]kgo.EpochOffset{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				eo, ok := offs[t.Topic][p.Partition]
				if !ok {
					continue
				}
				perr := kerr.ErrorForCode(p.ErrorCode)
				if perr != nil && retriable(perr) {
					retry = true
					s.log.Warn("offset commit failed", "topic", t.Topic, "partition", p.Partition, "err", perr, "retry", true)
					continue
				}
				if perr != nil {
					s.log.Warn("offset commit refused; offset lags", "topic", t.Topic, "partition", p.Partition, "err", perr)
				}
				if done[t.Topic] == nil {
					done[t.Topic] = map[int32]kgo.EpochOffset{}
				}
				done[t.Topic][p.Partition] = eo
			}
		}
		s.dropPending(done)
	})
	return retry
}

func retriable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	// Connection errors and the like: the commit may be tried again.
	return true
}

// dropPending removes entries of done from pending, unless pending has
// meanwhile moved past them.
func (s *Source) dropPending(done map[string]map[int32]kgo.EpochOffset) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range done {
		for p, eo := range ps {
			if cur, ok := s.pending[t][p]; ok && cur.Offset <= eo.Offset {
				delete(s.pending[t], p)
			}
		}
		if len(s.pending[t]) == 0 {
			delete(s.pending, t)
		}
	}
}

// assigned logs the partitions this member is given, with the member id
// and generation the broker knows it by (to match a describe of the group).
func (s *Source) assigned(_ context.Context, cl *kgo.Client, as map[string][]int32) {
	member, gen := cl.GroupMetadata()
	s.log.Info("partitions assigned", "partitions", as, "member", member, "generation", gen)
}

// revoked runs (gated against polls) before partitions go to another
// member. Everything polled has been written and committed, or the source
// is stopping; what is still pending is durable, so committing it is safe
// and saves the next owner a re-read.
func (s *Source) revoked(ctx context.Context, cl *kgo.Client, rev map[string][]int32) {
	s.log.Info("partitions revoked", "partitions", rev)
	s.mu.Lock()
	offs := map[string]map[int32]kgo.EpochOffset{}
	for t, ps := range rev {
		for _, p := range ps {
			if eo, ok := s.pending[t][p]; ok {
				if offs[t] == nil {
					offs[t] = map[int32]kgo.EpochOffset{}
				}
				offs[t][p] = eo
			}
		}
	}
	s.mu.Unlock()
	if len(offs) > 0 {
		s.commitOnce(ctx, cl, offs)
	}
	s.forget(rev)
}

// lost: the partitions are already someone else's; drop what is pending.
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.log.Warn("partitions lost", "partitions", lost)
	s.forget(lost)
}

func (s *Source) forget(parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range parts {
		for _, p := range ps {
			delete(s.pending[t], p)
		}
		if len(s.pending[t]) == 0 {
			delete(s.pending, t)
		}
	}
}

func clonePending(m map[string]map[int32]kgo.EpochOffset) map[string]map[int32]kgo.EpochOffset {
	out := make(map[string]map[int32]kgo.EpochOffset, len(m))
	for t, ps := range m {
		if len(ps) > 0 {
			out[t] = maps.Clone(ps)
		}
	}
	return out
}

// clusterID asks the brokers for the cluster id.
func clusterID(ctx context.Context, cl *kgo.Client) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	if resp.ClusterID == nil || *resp.ClusterID == "" {
		return "", errors.New("the brokers report no cluster id: set Options.Cluster")
	}
	return *resp.ClusterID, nil
}

// PartitionKey is how a topic partition is named in positions.
func PartitionKey(topic string, partition int32) string {
	return topic + "/" + strconv.Itoa(int(partition))
}

// Probe dials the brokers of opts and checks that every topic exists, by
// reading their metadata; it joins no group and commits nothing (weir
// validate --connect). ctx bounds it.
func Probe(ctx context.Context, opts Options) error {
	if len(opts.Brokers) == 0 || len(opts.Topics) == 0 {
		return errors.New("kafkasrc: Brokers and Topics are required")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(opts.Brokers...))
	if err != nil {
		return fmt.Errorf("kafkasrc: client: %w", err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafkasrc: no broker answers: %w", err)
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range opts.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkasrc: topic metadata: %w", err)
	}
	var errs []error
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			errs = append(errs, fmt.Errorf("kafkasrc: topic %q: %w", topicName(t.Topic), err))
		}
	}
	return errors.Join(errs...)
}

func topicName(t *string) string {
	if t == nil {
		return ""
	}
	return *t
}
