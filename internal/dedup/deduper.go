package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weir-io/weir/sink"
)

// DefaultRetryAfter is how long a Deduper whose store failed skips it.
const DefaultRetryAfter = time.Second

// Observer is told what a Deduper does; the daemon turns it into metrics.
// Its methods must not block.
type Observer interface {
	// Lookup reports one Store.Claim: how many keys it carried, how long
	// it took and its error, if any.
	Lookup(stream string, keys int, took time.Duration, err error)
	// Dropped reports n records of one batch judged duplicates (n > 0).
	Dropped(stream string, n int)
	// Degraded reports that the stream lost its store (on) or got it back.
	Degraded(stream string, on bool)
}

// NopObserver observes nothing.
type NopObserver struct{}

// Lookup does nothing.
func (NopObserver) Lookup(string, int, time.Duration, error) {}

// Dropped does nothing.
func (NopObserver) Dropped(string, int) {}

// Degraded does nothing.
func (NopObserver) Degraded(string, bool) {}

// Options configures New.
type Options struct {
	// Stream names the stream: it is hashed into every key (KeyOf) and
	// labels logs and observations.
	Stream string
	// Observer is told of lookups, drops and degradation (NopObserver
	// when nil).
	Observer Observer
	// Logger receives the degrade and recovery messages; the caller
	// labels it with the stream (when nil: slog.Default, labelled here).
	Logger *slog.Logger
	// RetryAfter is how long the store is skipped after it failed
	// (DefaultRetryAfter when zero or less).
	RetryAfter time.Duration
	// Now is the clock of RetryAfter (time.Now when nil).
	Now func() time.Time
}

// Deduper judges one stream's batches against a Store. Safe for concurrent
// use.
type Deduper struct {
	store      Store
	stream     string
	obs        Observer
	log        *slog.Logger
	retryAfter time.Duration
	now        func() time.Time
	scratch    sync.Pool // *scratch

	mu       sync.Mutex
	degraded bool
	reason   error
	since    time.Time // degraded since
	retryAt  time.Time // the store is skipped until then
}

// New returns a Deduper for o.Stream over store. The Deduper does not own
// the store: closing it is the caller's business.
func New(store Store, o Options) *Deduper {
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("stream", o.Stream)
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Deduper{
		store:      store,
		stream:     o.Stream,
		obs:        o.Observer,
		log:        o.Logger,
		retryAfter: o.RetryAfter,
		now:        o.Now,
		scratch:    sync.Pool{New: func() any { return &scratch{first: make(map[Key]int32)} }},
	}
}

// scratch is one Judge call's working memory, pooled.
type scratch struct {
	first   map[Key]int32 // key → its claim
	claims  []Claim
	out     []Answer
	owner   []int   // claim → the record that made it (the key's first)
	claimOf []int32 // record → its key's claim, or -1
}

// Judge sets dup[i] for every record i of a batch that is a duplicate: its
// key is held by another record id. keys[i] is record i's key material, or
// nil when the record is not subject to dedup; ids[i] is its record id.
// keys, ids and dup must have the same length.
//
// Records sharing a key within the batch are resolved locally: the first
// claims the key for the batch, one store claim for each distinct key, all
// in one Store.Claim. Once the key is the first's (Claimed or Redelivery), a
// later record with the same id is the same record again and passes, and
// one with another id is a duplicate. When the key is another id's
// (Duplicate), the first and the later records with its id are duplicates,
// and records with other ids pass: the store does not say which id holds
// the key, and one of them may be its holder's own redelivery.
//
// When the store fails, or is being skipped after a failure (RetryAfter),
// every record passes: dup is all false.
func (d *Deduper) Judge(ctx context.Context, keys [][]byte, ids []sink.RecordID, dup []bool) {
	if len(ids) != len(keys) || len(dup) != len(keys) {
		panic(fmt.Sprintf("dedup: Judge: %d keys, %d ids, %d dup", len(keys), len(ids), len(dup)))
	}
	clear(dup)
	if !d.storeDue() {
		return
	}
	s := d.scratch.Get().(*scratch)
	defer d.scratch.Put(s)
	s.collect(d.stream, keys, ids)
	if len(s.claims) == 0 {
		return
	}
	start := time.Now()
	err := d.store.Claim(ctx, s.claims, s.out)
	d.obs.Lookup(d.stream, len(s.claims), time.Since(start), err)
	if err != nil {
		if ctx.Err() == nil { // the caller's cancellation says nothing of the store
			d.fail(err)
		}
		return
	}
	d.recovered()
	if n := s.resolve(ids, dup); n > 0 {
		d.obs.Dropped(d.stream, n)
	}
}

// collect makes one claim for each distinct key, by its first record.
func (s *scratch) collect(stream string, keys [][]byte, ids []sink.RecordID) {
	clear(s.first)
	s.claims, s.owner = s.claims[:0], s.owner[:0]
	s.claimOf = s.claimOf[:0]
	for i, m := range keys {
		if m == nil {
			s.claimOf = append(s.claimOf, -1)
			continue
		}
		k := KeyOf(stream, m)
		c, seen := s.first[k]
		if !seen {
			c = int32(len(s.claims))
			s.first[k] = c
			s.claims = append(s.claims, Claim{Key: k, ID: ids[i]})
			s.owner = append(s.owner, i)
		}
		s.claimOf = append(s.claimOf, c)
	}
	if cap(s.out) < len(s.claims) {
		s.out = make([]Answer, len(s.claims))
	}
	s.out = s.out[:len(s.claims)]
}

// resolve sets dup from the store's answers and reports how many are set.
func (s *scratch) resolve(ids []sink.RecordID, dup []bool) int {
	n := 0
	for i, c := range s.claimOf {
		if c < 0 {
			continue
		}
		held := s.out[c] == Duplicate // by an id other than the first's
		first := s.owner[c]
		if ids[i] == ids[first] {
			dup[i] = held
		} else {
			dup[i] = !held
		}
		if dup[i] {
			n++
		}
	}
	return n
}

// storeDue reports whether the store is to be asked: always, unless it
// failed less than RetryAfter ago.
func (d *Deduper) storeDue() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.degraded || !d.now().Before(d.retryAt)
}

// fail records a store failure; the first of a run is logged and observed.
func (d *Deduper) fail(err error) {
	now := d.now()
	d.mu.Lock()
	first := !d.degraded
	d.degraded, d.reason, d.retryAt = true, err, now.Add(d.retryAfter)
	if first {
		d.since = now
	}
	d.mu.Unlock()
	if first {
		d.log.Warn("dedup: store failed; records pass without dedup until it answers",
			"err", err, "retry_after", d.retryAfter)
		d.obs.Degraded(d.stream, true)
	}
}

// recovered records a store success; the first after failures is logged and
// observed.
func (d *Deduper) recovered() {
	d.mu.Lock()
	was, since := d.degraded, d.since
	d.degraded, d.reason = false, nil
	d.mu.Unlock()
	if was {
		d.log.Info("dedup: store answers again; dedup resumed", "degraded_for", d.now().Sub(since))
		d.obs.Degraded(d.stream, false)
	}
}

// Health is Degraded, with the store's error, while the store is failing
// or being skipped, and Healthy otherwise.
func (d *Deduper) Health() sink.Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.degraded {
		return sink.Health{State: sink.Healthy}
	}
	return sink.Health{State: sink.Degraded, Reason: fmt.Sprintf(
		"dedup store failing since %s, records pass without dedup: %v",
		d.since.UTC().Format(time.RFC3339), d.reason)}
}
