// Package sinktest is the conformance suite every weir sink runs. It checks
// the retry protocol of package sink against a real destination: at-least-
// once delivery, idempotent replay on the record id, per-record rejection
// of poison records, transient classification of broken connections,
// durability across a crash of the destination, MaxBatchSize, and Health
// through an outage.
//
// A sink's test calls Run with a Factory that opens a fresh sink on a fresh
// destination (a new table, a new directory) and returns it in a Harness
// together with the hooks the suite needs. Hooks left nil turn off the cases
// that need them; the suite logs which.
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
//			s := open(t)
//			return &sinktest.Harness{Sink: s, ReadBack: readTable(t), Crash: crash(t)}
//		})
//	}
//
// # Durability
//
// A Commit that makes its records visible but not durable (a forgotten
// fsync, an unsynced directory entry, a transaction left to an asynchronous
// commit) passes every case that reads the destination back while it is
// still up. So the Durability case crashes the destination through the
// Crash hook right after a Commit returns — with the sink still open,
// nothing closed or flushed — and then reads back what survived and opens
// a sink on it: every record a Commit acknowledged must be there. A sink
// writing through weir's file-system seam runs on the in-memory file system
// that can lose power (internal/vfs/memfs: CrashClone with
// CrashDropUnsynced keeps only what was synced); a database sink has its
// connections killed from the server side. The Crash hook is not optional:
// without it the Durability case fails, unless the Harness says in NoCrash
// why the sink cannot be crashed in a test — and then the case is skipped
// with a loud message, never silently.
package sinktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
)

// Stored is one record as the destination holds it.
type Stored struct {
	ID         sink.RecordID
	Payload    []byte
	Source     string
	Durability sink.Durability
	Received   time.Time
	// Key, Headers and EventTime are checked only with
	// Harness.Metadata.
	Key       []byte
	Headers   []sink.Header
	EventTime time.Time
}

// Harness is one fresh sink and the hooks into its destination.
type Harness struct {
	// Sink is the sink under test, open on a destination no other case
	// uses. The suite closes it (Close may be called more than once).
	Sink sink.Sink

	// ReadBack returns every record the destination holds, read through a
	// fresh connection or reader — never through Sink — so that it shows
	// what a newcomer would see. Duplicates are returned as stored.
	// Required.
	ReadBack func(ctx context.Context) ([]Stored, error)

	// KeepsDuplicates says the sink documents that a replayed record is
	// stored again (readers deduplicate on the id). Otherwise every id must
	// be stored exactly once.
	KeepsDuplicates bool

	// BinaryPayloads says the sink stores arbitrary bytes (invalid UTF-8,
	// NUL). Otherwise payloads are small JSON strings.
	BinaryPayloads bool

	// Metadata says the sink stores a record's key, headers and event
	// time, and ReadBack returns them: every case then checks them too
	// (a record without them must come back without them), and the
	// Metadata case commits records with every kind of each.
	Metadata bool

	// Payload, when set, makes the payload for record i of a test; it
	// overrides the built-in generator.
	Payload func(i int) []byte

	// EqualPayload compares a stored payload to the one sent; nil means
	// bytes.Equal. A sink that normalises payloads (a jsonb column)
	// supplies its own.
	EqualPayload func(sent, stored []byte) bool

	// Poison, when set, returns records this sink must refuse permanently
	// on their own: Commit must list them in Rejected and commit the rest.
	// kind counts from 0; return ok=false when there are no more kinds.
	// The suite fills in ID, Durability and Received when they are zero.
	Poison func(kind int) (r sink.Record, ok bool)

	// Break, when set, kills the sink's open connections from outside
	// (server side, or by a proxy) without making the destination
	// unreachable: the next Commit must either succeed or fail transient,
	// and a retry must succeed.
	Break func(ctx context.Context) error

	// Outage, when set, makes the destination unreachable until restore is
	// called: Health must leave Healthy, Commit must fail transient, and
	// after restore a retried Commit must succeed and Health return to
	// Healthy.
	Outage func(ctx context.Context) (restore func(), err error)

	// Reopen, when set, opens a second sink on the same destination. The
	// suite closes Sink before calling it.
	Reopen func(t *testing.T) sink.Sink

	// Crash crashes the destination the way a power loss or a server
	// failure would, and returns the destination as it is found
	// afterwards. The suite calls it right after a Commit has returned,
	// with Sink still open (it never uses Sink again). For a sink on a
	// file system: run it on memfs and return hooks on
	// CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}). For a
	// database sink: kill the sink's connections from the server side (or
	// at a proxy) and return hooks that connect afresh. See the package
	// documentation; nil fails the Durability case unless NoCrash is set.
	Crash func(t *testing.T) Crashed

	// NoCrash, when Crash is nil, says why the destination cannot be
	// crashed in a test. The Durability case is then skipped, loudly.
	NoCrash string
}

// Crashed is a destination after Harness.Crash.
type Crashed struct {
	// ReadBack reads what the crashed destination holds, like
	// Harness.ReadBack. Required.
	ReadBack func(ctx context.Context) ([]Stored, error)
	// Reopen opens a sink on the crashed destination, running whatever
	// recovery the sink runs when it starts. Required.
	Reopen func(t *testing.T) sink.Sink
}

// Factory opens a fresh sink on a fresh destination for one case. It should
// register its own cleanup (dropping the table, removing files) with
// t.Cleanup.
type Factory func(t *testing.T) *Harness

// Timeout bounds each case.
var Timeout = 2 * time.Minute

// Run runs every case as a subtest of t.
func Run(t *testing.T, factory Factory) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, c *tcase)
	}{
		{"EmptyBatch", testEmptyBatch},
		{"AtLeastOnce", testAtLeastOnce},
		{"IdempotentReplay", testIdempotentReplay},
		{"Durability", testDurability},
		{"Reopen", testReopen},
		{"MaxBatchSize", testMaxBatchSize},
		{"BinaryPayloads", testBinaryPayloads},
		{"Metadata", testMetadata},
		{"PartialSuccess", testPartialSuccess},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentHealth", testConcurrentHealth},
		{"TransientFault", testTransientFault},
		{"Outage", testOutage},
		{"Closed", testClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := factory(t)
			if h == nil || h.Sink == nil || h.ReadBack == nil {
				t.Fatal("sinktest: the factory must return a Harness with Sink and ReadBack")
			}
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			c := &tcase{h: h, ctx: ctx, t: t, tag: sha256.Sum256([]byte(t.Name() + time.Now().String()))}
			t.Cleanup(func() { _ = h.Sink.Close() })
			tc.fn(t, c)
		})
	}
}

type tcase struct {
	h   *Harness
	ctx context.Context
	t   *testing.T
	tag [32]byte // makes ids unique per case
	n   int      // records made so far
}

// record makes the next record of the case.
func (c *tcase) record() sink.Record {
	i := c.n
	c.n++
	var id sink.RecordID
	sum := sha256.Sum256(fmt.Appendf(c.tag[:], "/%d", i))
	copy(id[:], sum[:])
	var p []byte
	switch {
	case c.h.Payload != nil:
		p = c.h.Payload(i)
	default:
		p = fmt.Appendf(nil, "%q", fmt.Sprintf("record %06d %x", i, sum[:6]))
	}
	d := sink.Durable
	if i%3 == 1 {
		d = sink.Buffered
	}
	src := "socket"
	if i%5 == 4 {
		src = "test-é" // non-ASCII but valid UTF-8
	}
	return sink.Record{
		ID:         id,
		Payload:    p,
		Durability: d,
		// Microsecond precision, UTC: what every database keeps.
		Received: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC).Add(time.Duration(i) * 1001 * time.Microsecond),
		Source:   src,
	}
}

func (c *tcase) records(n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		out[i] = c.record()
	}
	return out
}

// commit commits records and requires full success.
func (c *tcase) commit(s sink.Sink, recs []sink.Record) {
	c.t.Helper()
	res, err := s.Commit(c.ctx, sink.NewBatch(recs))
	if err != nil {
		c.t.Fatalf("Commit of %d records: %v (transient=%v)", len(recs), err, sink.IsTransient(err))
	}
	if len(res.Rejected) != 0 {
		c.t.Fatalf("Commit of %d valid records rejected %d, first: #%d %s", len(recs), len(res.Rejected), res.Rejected[0].Index, res.Rejected[0].Reason)
	}
}

// commitRetrying commits like the drain does: transient errors are retried
// with a short backoff until the deadline.
func (c *tcase) commitRetrying(s sink.Sink, recs []sink.Record, deadline time.Duration) (sink.CommitResult, int) {
	c.t.Helper()
	end := time.Now().Add(deadline)
	b := sink.NewBatch(recs)
	for attempt := 0; ; attempt++ {
		res, err := s.Commit(c.ctx, b)
		if err == nil {
			return res, attempt
		}
		if !sink.IsTransient(err) {
			c.t.Fatalf("Commit attempt %d: permanent error %v; a broken connection must be transient", attempt+1, err)
		}
		if time.Now().After(end) {
			c.t.Fatalf("Commit still failing after %v and %d attempts: %v", deadline, attempt+1, err)
		}
		time.Sleep(min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond))
	}
}

// expect reads the destination back and checks it holds exactly want (by
// id), with every field intact.
func (c *tcase) expect(want []sink.Record) {
	c.t.Helper()
	c.expectIn(c.h.ReadBack, want)
}

// expectIn is expect with another reader (a crashed destination's).
func (c *tcase) expectIn(readBack func(context.Context) ([]Stored, error), want []sink.Record) {
	c.t.Helper()
	got, err := readBack(c.ctx)
	if err != nil {
		c.t.Fatalf("ReadBack: %v", err)
	}
	byID := make(map[sink.RecordID]sink.Record, len(want))
	for _, r := range want {
		byID[r.ID] = r
	}
	seen := make(map[sink.RecordID]int, len(got))
	eq := c.h.EqualPayload
	if eq == nil {
		eq = bytes.Equal
	}
	bad := 0
	for _, g := range got {
		seen[g.ID]++
		w, ok := byID[g.ID]
		if !ok {
			c.t.Errorf("destination holds record %s that was never committed (or was rejected)", g.ID)
			bad++
		} else if why := diff(w, g, eq); why != "" {
			c.t.Errorf("record %s: %s", g.ID, why)
			bad++
		} else if why := MetaDiff(w, sink.Record{Key: g.Key, Headers: g.Headers, EventTime: g.EventTime}); c.h.Metadata && why != "" {
			c.t.Errorf("record %s: %s", g.ID, why)
			bad++
		}
		if bad > 10 {
			c.t.Fatalf("too many errors")
		}
	}
	var missing, dups []string
	for id := range byID {
		switch n := seen[id]; {
		case n == 0:
			missing = append(missing, id.String())
		case n > 1 && !c.h.KeepsDuplicates:
			dups = append(dups, fmt.Sprintf("%s×%d", id, n))
		}
	}
	sort.Strings(missing)
	sort.Strings(dups)
	if len(missing) > 0 {
		c.t.Errorf("%d of %d committed records missing, e.g. %v", len(missing), len(byID), missing[:min(len(missing), 5)])
	}
	if len(dups) > 0 {
		c.t.Errorf("%d records stored more than once, e.g. %v", len(dups), dups[:min(len(dups), 5)])
	}
	if c.t.Failed() {
		c.t.FailNow()
	}
}

func diff(w sink.Record, g Stored, eq func(a, b []byte) bool) string {
	switch {
	case !eq(w.Payload, g.Payload):
		return fmt.Sprintf("payload %q, want %q", trunc(g.Payload), trunc(w.Payload))
	case w.Source != g.Source:
		return fmt.Sprintf("source %q, want %q", g.Source, w.Source)
	case w.Durability != g.Durability:
		return fmt.Sprintf("durability %v, want %v", g.Durability, w.Durability)
	case !w.Received.Equal(g.Received):
		return fmt.Sprintf("received %v, want %v", g.Received.UTC(), w.Received.UTC())
	}
	return ""
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return append(b[:64:64], "…"...)
	}
	return b
}

func testEmptyBatch(t *testing.T, c *tcase) {
	c.commit(c.h.Sink, nil)
	c.expect(nil)
}

// testAtLeastOnce commits many batches of varied sizes and expects every
// record, exactly as sent.
func testAtLeastOnce(t *testing.T, c *tcase) {
	maxB := c.h.Sink.MaxBatchSize()
	if maxB <= 0 {
		t.Fatalf("MaxBatchSize() = %d, want > 0", maxB)
	}
	var all []sink.Record
	sizes := []int{1, 2, 7, 100, 33, 1, 250, 64, 3, 500}
	for round := 0; round < 3; round++ {
		for _, n := range sizes {
			n = min(n, maxB)
			recs := c.records(n)
			c.commit(c.h.Sink, recs)
			all = append(all, recs...)
		}
	}
	c.expect(all)
}

// testIdempotentReplay commits batches again, whole and overlapping, as the
// drain does after a lost reply or a crash.
func testIdempotentReplay(t *testing.T, c *tcase) {
	n := min(200, c.h.Sink.MaxBatchSize())
	a := c.records(n)
	c.commit(c.h.Sink, a)
	c.commit(c.h.Sink, a) // the same batch twice
	b := c.records(n)
	overlap := append(append([]sink.Record(nil), a[n/2:]...), b[:n/2]...)
	overlap = overlap[:min(len(overlap), c.h.Sink.MaxBatchSize())]
	c.commit(c.h.Sink, overlap) // half old, half new
	c.commit(c.h.Sink, b)
	// A batch holding the same record twice.
	dup := c.records(2)
	c.commit(c.h.Sink, []sink.Record{dup[0], dup[1], dup[0]})
	c.expect(append(append(a, b...), dup...))
}

// testDurability crashes the destination right after a Commit returns and
// expects every acknowledged record to have survived, both as a fresh
// reader finds the crashed destination and after a sink reopened on it has
// run its recovery; the reopened sink then takes a replay and new records.
func testDurability(t *testing.T, c *tcase) {
	n := min(50, c.h.Sink.MaxBatchSize())
	a := c.records(n)
	c.commit(c.h.Sink, a)
	c.expect(a) // no Close, no flush: visible now
	b := c.records(n)
	c.commit(c.h.Sink, b) // appended to what a created
	if c.h.Crash == nil {
		if c.h.NoCrash == "" {
			t.Fatal("sinktest: the Harness has no Crash hook, so nothing checks that Commit makes its records " +
				"durable rather than merely visible (a missing fsync passes every other case). Give it a Crash " +
				"hook (memfs CrashClone for a file-system sink, killing the server connections for a database), " +
				"or set NoCrash to say why this sink cannot be crashed in a test.")
		}
		t.Skipf("\n*** NOT CHECKED: durability across a crash: %s\n*** a missing fsync in this sink would pass the suite", c.h.NoCrash)
	}
	cr := c.h.Crash(t)
	if cr.ReadBack == nil || cr.Reopen == nil {
		t.Fatal("sinktest: Crash must return a Crashed with ReadBack and Reopen")
	}
	acked := append(append([]sink.Record(nil), a...), b...)
	c.expectIn(cr.ReadBack, acked) // what a reader finds on the crashed destination
	s2 := cr.Reopen(t)
	defer s2.Close()
	c.expectIn(cr.ReadBack, acked) // what recovery kept
	d := c.records(min(n, s2.MaxBatchSize()))
	c.commit(s2, b) // the drain replays what it had not recorded as done
	c.commit(s2, d)
	c.expectIn(cr.ReadBack, append(acked, d...))
}

// testReopen closes the sink, expects its records to stay, and, with
// Reopen, that a second sink on the same destination replays
// idempotently.
func testReopen(t *testing.T, c *tcase) {
	a := c.records(min(50, c.h.Sink.MaxBatchSize()))
	c.commit(c.h.Sink, a)
	if err := c.h.Sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c.expect(a)
	if c.h.Reopen == nil {
		t.Skip("no Reopen hook: reopening the destination not checked")
	}
	s2 := c.h.Reopen(t)
	defer s2.Close()
	b := c.records(min(50, s2.MaxBatchSize()))
	c.commit(s2, a) // replay into the reopened sink
	c.commit(s2, b)
	c.expect(append(a, b...))
}

// testMaxBatchSize commits a batch of exactly MaxBatchSize records.
func testMaxBatchSize(t *testing.T, c *tcase) {
	n := c.h.Sink.MaxBatchSize()
	if n <= 0 {
		t.Fatalf("MaxBatchSize() = %d, want > 0", n)
	}
	if n > 100_000 {
		t.Skipf("MaxBatchSize %d too large to test directly", n)
	}
	recs := c.records(n)
	c.commit(c.h.Sink, recs)
	c.expect(recs)
}

func testBinaryPayloads(t *testing.T, c *tcase) {
	if !c.h.BinaryPayloads {
		t.Skip("sink stores text payloads only")
	}
	payloads := [][]byte{
		{},
		{0},
		{0xff, 0xfe, 0x00, 0x80},
		[]byte("\x00\\'\"\n\r\t;--"),
		bytes.Repeat([]byte{0xc3}, 3), // truncated UTF-8
		bytes.Repeat([]byte("x"), 70_000),
	}
	var recs []sink.Record
	for _, p := range payloads {
		r := c.record()
		r.Payload = p
		recs = append(recs, r)
	}
	c.commit(c.h.Sink, recs)
	c.expect(recs)
}

// testMetadata commits records with and without a key (an empty one too,
// which is not the same as none), headers (names repeated, in an order
// that is not sorted, binary and empty values, a non-ASCII name) and an
// event time, and reads them back.
func testMetadata(t *testing.T, c *tcase) {
	if !c.h.Metadata {
		t.Skip("sink does not store key, headers and event time")
	}
	event := time.Date(2023, 4, 5, 6, 7, 8, 9000, time.UTC) // microseconds: what every database keeps
	var recs []sink.Record
	for i := range 8 {
		r := c.record()
		switch i % 4 {
		case 1:
			r.Key = []byte(fmt.Sprintf("key-%d", i))
			r.Headers = []sink.Header{{Key: "b", Value: []byte("1")}, {Key: "a", Value: []byte{0, 0xff, '"'}}, {Key: "b", Value: []byte("2")}}
			r.EventTime = event.Add(time.Duration(i) * time.Second)
		case 2:
			r.Key = []byte{}
			r.Headers = []sink.Header{{Key: "empty"}}
		case 3:
			r.Key = []byte{0xff, 0, 'k'}
			r.Headers = []sink.Header{{Key: "é-\\\"n", Value: []byte("x\u2028y\n")}}
			r.EventTime = event.Add(-time.Duration(i) * time.Hour)
		}
		recs = append(recs, r)
	}
	c.commit(c.h.Sink, recs)
	c.expect(recs)
}

// MetaDiff says how got's key, headers and event time differ from
// want's, "" when they agree: the same key (none is not an empty one), the
// same headers in the same order (an empty value equal to a nil one), the
// same instant.
func MetaDiff(want, got sink.Record) string {
	w, g := want, got
	switch {
	case (w.Key == nil) != (g.Key == nil) || !bytes.Equal(w.Key, g.Key):
		return fmt.Sprintf("key %q (none: %v), want %q (none: %v)", g.Key, g.Key == nil, w.Key, w.Key == nil)
	case !w.EventTime.Equal(g.EventTime):
		return fmt.Sprintf("event time %s, want %s", g.EventTime, w.EventTime)
	case len(w.Headers) != len(g.Headers):
		return fmt.Sprintf("headers %q, want %q", g.Headers, w.Headers)
	}
	for i := range w.Headers {
		if w.Headers[i].Key != g.Headers[i].Key || !bytes.Equal(w.Headers[i].Value, g.Headers[i].Value) {
			return fmt.Sprintf("headers %q, want %q", g.Headers, w.Headers)
		}
	}
	return ""
}

// testPartialSuccess puts poison records among good ones: each must be
// rejected on its own, with a reason, and everything else committed.
func testPartialSuccess(t *testing.T, c *tcase) {
	if c.h.Poison == nil {
		t.Skip("no Poison hook: the sink never rejects a record")
	}
	var poisons []sink.Record
	for k := 0; ; k++ {
		r, ok := c.h.Poison(k)
		if !ok {
			break
		}
		base := c.record()
		if r.ID == (sink.RecordID{}) {
			r.ID = base.ID
		}
		if r.Received.IsZero() {
			r.Received = base.Received
		}
		if r.Source == "" {
			r.Source = base.Source
		}
		poisons = append(poisons, r)
	}
	if len(poisons) == 0 {
		t.Fatal("Poison hook gave no records")
	}
	n := min(60, c.h.Sink.MaxBatchSize())
	if n < 2 {
		t.Skip("MaxBatchSize too small to mix good and bad records")
	}
	var good []sink.Record
	for k, p := range poisons {
		t.Run(fmt.Sprintf("kind%d", k), func(t *testing.T) {
			// Poison at the start, in the middle and at the end.
			recs := c.records(n - 3)
			isPoison := map[int]bool{0: true, n / 2: true, n - 1: true}
			batch := make([]sink.Record, 0, n)
			gi := 0
			for i := range n {
				if isPoison[i] {
					pr := p
					pr.ID = c.record().ID
					batch = append(batch, pr)
					continue
				}
				batch = append(batch, recs[gi])
				gi++
			}
			res, err := c.h.Sink.Commit(c.ctx, sink.NewBatch(batch))
			if err != nil {
				t.Fatalf("Commit with poison records: %v; poison must be rejected per record, not fail the batch", err)
			}
			got := map[int]bool{}
			for _, rj := range res.Rejected {
				if rj.Index < 0 || rj.Index >= len(batch) {
					t.Fatalf("Rejected index %d out of range", rj.Index)
				}
				if rj.Reason == "" {
					t.Errorf("rejection of #%d has no reason", rj.Index)
				}
				got[rj.Index] = true
			}
			for i := range isPoison {
				if !got[i] {
					t.Errorf("poison record #%d was not rejected", i)
				}
			}
			for i := range got {
				if !isPoison[i] {
					t.Errorf("good record #%d was rejected: %v", i, res.Rejected)
				}
			}
			if len(res.Rejected) > 0 {
				t.Logf("reason: %s", res.Rejected[0].Reason)
			}
			good = append(good, recs...)
			// A batch of poison only.
			only := []sink.Record{p}
			only[0].ID = c.record().ID
			res, err = c.h.Sink.Commit(c.ctx, sink.NewBatch(only))
			if err != nil || len(res.Rejected) != 1 || res.Rejected[0].Index != 0 {
				t.Fatalf("Commit of one poison record: %v, %v; want it rejected", res, err)
			}
		})
	}
	c.expect(good)
}

// testCanceledContext: a Commit whose context is already over must not
// report a permanent error (that would dead-letter good records on
// shutdown).
func testCanceledContext(t *testing.T, c *tcase) {
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	recs := c.records(10)
	_, err := c.h.Sink.Commit(ctx, sink.NewBatch(recs))
	if err != nil && !sink.IsTransient(err) {
		t.Fatalf("Commit with a cancelled context: permanent error %v", err)
	}
	committed := err == nil
	tctx, tcancel := context.WithTimeout(c.ctx, time.Nanosecond)
	defer tcancel()
	<-tctx.Done()
	if _, err := c.h.Sink.Commit(tctx, sink.NewBatch(c.records(1))); err != nil && !sink.IsTransient(err) {
		t.Fatalf("Commit past its deadline: permanent error %v", err)
	}
	// The sink still works, and the retried batch lands once.
	c.commit(c.h.Sink, recs)
	_ = committed
	got, err := c.h.ReadBack(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[sink.RecordID]int{}
	for _, g := range got {
		ids[g.ID]++
	}
	for _, r := range recs {
		if ids[r.ID] == 0 || (ids[r.ID] > 1 && !c.h.KeepsDuplicates) {
			t.Fatalf("record %s stored %d times", r.ID, ids[r.ID])
		}
	}
}

// testConcurrentHealth calls Health while Commit runs (the race detector
// does the checking).
func testConcurrentHealth(t *testing.T, c *tcase) {
	if h := c.h.Sink.Health(c.ctx); h.State != sink.Healthy {
		t.Fatalf("fresh sink: Health %v (%s), want healthy", h.State, h.Reason)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			_ = c.h.Sink.Health(ctx)
			cancel()
			time.Sleep(time.Millisecond)
		}
	}()
	var all []sink.Record
	for range 20 {
		recs := c.records(min(50, c.h.Sink.MaxBatchSize()))
		c.commit(c.h.Sink, recs)
		all = append(all, recs...)
	}
	close(stop)
	wg.Wait()
	c.expect(all)
}

// testTransientFault kills the sink's connections between and during
// commits: every failure must be transient and a retry must succeed.
func testTransientFault(t *testing.T, c *tcase) {
	if c.h.Break == nil {
		t.Skip("no Break hook")
	}
	n := min(100, c.h.Sink.MaxBatchSize())
	a := c.records(n)
	c.commit(c.h.Sink, a)
	all := append([]sink.Record(nil), a...)
	failures := 0
	for round := range 5 {
		if err := c.h.Break(c.ctx); err != nil {
			t.Fatalf("Break: %v", err)
		}
		recs := c.records(n)
		if round%2 == 1 {
			// Break again while this commit may be in flight.
			go func() { time.Sleep(time.Millisecond); _ = c.h.Break(c.ctx) }()
		}
		_, attempts := c.commitRetrying(c.h.Sink, recs, 30*time.Second)
		failures += attempts
		all = append(all, recs...)
	}
	t.Logf("%d transient failures over 5 broken connections", failures)
	c.expect(all)
	if h := c.h.Sink.Health(c.ctx); h.State != sink.Healthy {
		t.Errorf("after recovering: Health %v (%s), want healthy", h.State, h.Reason)
	}
}

// testOutage makes the destination unreachable: Health must say so,
// Commit must fail transient, and both must recover.
func testOutage(t *testing.T, c *tcase) {
	if c.h.Outage == nil {
		t.Skip("no Outage hook")
	}
	a := c.records(10)
	c.commit(c.h.Sink, a)
	if h := c.h.Sink.Health(c.ctx); h.State != sink.Healthy {
		t.Fatalf("before the outage: Health %v (%s), want healthy", h.State, h.Reason)
	}
	restore, err := c.h.Outage(c.ctx)
	if err != nil {
		t.Fatalf("Outage: %v", err)
	}
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()
	hctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	h := c.h.Sink.Health(hctx)
	cancel()
	if h.State == sink.Healthy {
		t.Errorf("during the outage: Health healthy, want degraded or down")
	} else if h.Reason == "" {
		t.Errorf("during the outage: Health %v without a reason", h.State)
	}
	t.Logf("during the outage: Health %v: %s", h.State, h.Reason)
	b := c.records(10)
	cctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	_, err = c.h.Sink.Commit(cctx, sink.NewBatch(b))
	cancel()
	if err == nil {
		t.Fatalf("Commit during the outage succeeded")
	}
	if !sink.IsTransient(err) {
		t.Fatalf("Commit during the outage: permanent error %v; an unreachable server must be transient", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatalf("Commit during the outage: %v", err)
	}
	restore()
	restored = true
	c.commitRetrying(c.h.Sink, b, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		h = c.h.Sink.Health(c.ctx)
		if h.State == sink.Healthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage: Health still %v (%s)", h.State, h.Reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.expect(append(a, b...))
}

func testClosed(t *testing.T, c *tcase) {
	a := c.records(5)
	c.commit(c.h.Sink, a)
	if err := c.h.Sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.h.Sink.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.h.Sink.Commit(c.ctx, sink.NewBatch(c.records(1))); err == nil {
		t.Fatalf("Commit after Close succeeded")
	}
	c.expect(a)
}
