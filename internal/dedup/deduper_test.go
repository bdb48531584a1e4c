package dedup

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/sink"
)

// observed is what a recorder was told.
type observed struct {
	lookups, errs, keys, dropped int
	degraded                     []bool
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu sync.Mutex
	o  observed
}

func (r *recorder) Lookup(stream string, keys int, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.lookups++
	r.o.keys += keys
	if err != nil {
		r.o.errs++
	}
}

func (r *recorder) Dropped(stream string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.dropped += n
}

func (r *recorder) Degraded(stream string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.degraded = append(r.o.degraded, on)
}

func (r *recorder) snapshot() observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.o
	o.degraded = slices.Clone(o.degraded)
	return o
}

// switchable is a Store that fails while told to and counts its calls; it
// stands in for a store's outage where the test needs to time it exactly
// (the Redis outage itself is tested against a real server below).
type switchable struct {
	Store
	mu    sync.Mutex
	err   error
	calls int
}

func (s *switchable) Claim(ctx context.Context, claims []Claim, out []Answer) error {
	s.mu.Lock()
	s.calls++
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Claim(ctx, claims, out)
}

func (s *switchable) set(err error) { s.mu.Lock(); s.err = err; s.mu.Unlock() }

func (s *switchable) count() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

// rec is a test record: key material (empty: none) and id.
type rec struct {
	key string
	id  int
}

// judge runs d over recs and returns dup.
func judge(d *Deduper, recs ...rec) []bool {
	keys := make([][]byte, len(recs))
	ids := make([]sink.RecordID, len(recs))
	for i, r := range recs {
		if r.key != "" {
			keys[i] = []byte(r.key)
		}
		ids[i] = rid(r.id)
	}
	dup := make([]bool, len(recs))
	for i := range dup {
		dup[i] = true // Judge must clear it
	}
	d.Judge(context.Background(), keys, ids, dup)
	return dup
}

func TestJudge(t *testing.T) {
	type step struct {
		recs []rec
		want []bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"within a batch", []step{{
			[]rec{{"a", 1}, {"a", 1}, {"a", 2}, {"", 3}, {"", 4}, {"b", 5}, {"a", 3}},
			[]bool{false, false, true, false, false, false, true},
		}}},
		{"across batches", []step{
			{[]rec{{"a", 1}, {"b", 2}}, []bool{false, false}},
			{[]rec{{"b", 3}, {"c", 4}, {"a", 5}}, []bool{true, false, true}},
		}},
		{"the same batch judged again (a retry, another sink)", []step{
			{[]rec{{"a", 1}, {"a", 2}, {"b", 3}}, []bool{false, true, false}},
			{[]rec{{"a", 1}, {"a", 2}, {"b", 3}}, []bool{false, true, false}},
		}},
		{"crash after claim: the holder redelivered behind a retry", []step{
			{[]rec{{"a", 1}}, []bool{false}},
			{[]rec{{"a", 2}, {"a", 1}, {"a", 2}}, []bool{true, false, true}},
		}},
		{"held by another: the first's id again is a duplicate, other ids pass", []step{
			{[]rec{{"a", 9}}, []bool{false}},
			{[]rec{{"a", 1}, {"a", 1}, {"a", 2}}, []bool{true, true, false}},
		}},
		{"no keys", []step{{[]rec{{"", 1}, {"", 1}}, []bool{false, false}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recorder{}
			d := New(NewMemory(MemoryOptions{}), Options{Stream: "s", Observer: obs, Logger: quiet})
			wantDropped := 0
			for i, st := range tc.steps {
				if got := judge(d, st.recs...); !slices.Equal(got, st.want) {
					t.Fatalf("step %d: dup = %v, want %v", i, got, st.want)
				}
				for _, w := range st.want {
					if w {
						wantDropped++
					}
				}
			}
			if o := obs.snapshot(); o.dropped != wantDropped || o.errs != 0 || len(o.degraded) != 0 {
				t.Fatalf("observed %+v; want %d dropped, no errors", o, wantDropped)
			}
			if h := d.Health(); h.State != sink.Healthy {
				t.Fatalf("health %v", h)
			}
		})
	}
}

// TestJudgeOneClaimPerDistinctKey: the store is asked once per batch, with
// each distinct key once.
func TestJudgeOneClaimPerDistinctKey(t *testing.T) {
	obs := &recorder{}
	s := &switchable{Store: NewMemory(MemoryOptions{})}
	d := New(s, Options{Stream: "s", Observer: obs, Logger: quiet})
	judge(d, rec{"a", 1}, rec{"b", 1}, rec{"a", 2}, rec{"", 3}, rec{"b", 1})
	if o := obs.snapshot(); s.count() != 1 || o.lookups != 1 || o.keys != 2 {
		t.Fatalf("%d store calls, observed %+v; want 1 call of 2 keys", s.count(), o)
	}
	judge(d, rec{"", 1})
	if s.count() != 1 {
		t.Fatal("a batch without keys asked the store")
	}
}

// TestDegradeRetryAfter: a failing store passes every record, is logged
// and observed once, and is not asked again for RetryAfter; the first
// success after it is logged and observed once.
func TestDegradeRetryAfter(t *testing.T) {
	c := newClock()
	obs := &recorder{}
	var logs bytes.Buffer
	s := &switchable{Store: NewMemory(MemoryOptions{})}
	d := New(s, Options{Stream: "orders", Observer: obs, RetryAfter: 5 * time.Second, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	judge(d, rec{"a", 1})
	s.set(errors.New("connection refused"))
	for i := range 3 { // the failure, then two batches inside RetryAfter
		if got := judge(d, rec{"a", 2}, rec{"a", 3}); slices.Contains(got, true) {
			t.Fatalf("batch %d while failing: dup = %v", i, got)
		}
		c.Advance(2 * time.Second)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("store asked %d times, want 2 (one success, one failure, then skipped)", n)
	}
	if h := d.Health(); h.State != sink.Degraded || !strings.Contains(h.Reason, "connection refused") {
		t.Fatalf("health %+v", h)
	}
	c.Advance(time.Second) // 6s after the failure: asked again, fails again
	judge(d, rec{"a", 2})
	if n := s.count(); n != 3 {
		t.Fatalf("store asked %d times after RetryAfter, want 3", n)
	}
	s.set(nil)
	judge(d, rec{"a", 2}) // inside the new RetryAfter: skipped
	c.Advance(5 * time.Second)
	if got := judge(d, rec{"a", 2}); !got[0] {
		t.Fatal("after recovery a duplicate passed")
	}
	if h := d.Health(); h.State != sink.Healthy {
		t.Fatalf("health after recovery %+v", h)
	}
	o := obs.snapshot()
	if !slices.Equal(o.degraded, []bool{true, false}) || o.errs != 2 || o.lookups != 4 {
		t.Fatalf("observed %+v; want degraded [true false], 2 errors in 4 lookups", o)
	}
	if w, i := strings.Count(logs.String(), "level=WARN"), strings.Count(logs.String(), "level=INFO"); w != 1 || i != 1 {
		t.Fatalf("logged %d warnings, %d infos; want 1 each:\n%s", w, i, logs.String())
	}
}

// TestCancelledJudgeDoesNotDegrade: the caller's own cancellation passes
// the batch but says nothing about the store.
func TestCancelledJudgeDoesNotDegrade(t *testing.T) {
	r := newRedisStore(t, sharedRedisURL(t), time.Minute)
	d := New(r, Options{Stream: "s", Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dup := []bool{true}
	d.Judge(ctx, [][]byte{[]byte("a")}, []sink.RecordID{rid(1)}, dup)
	if dup[0] || d.Health().State != sink.Healthy {
		t.Fatalf("dup %v, health %v", dup[0], d.Health())
	}
}

// TestDegradeOnRedisOutage: a private redis-server stopped mid-run —
// records pass, Health is degraded, the observer is told — and started
// again: dedup resumes.
func TestDegradeOnRedisOutage(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := newRedisStore(t, srv.URL(), time.Minute)
	obs := &recorder{}
	d := New(r, Options{Stream: "s", Observer: obs, Logger: quiet, RetryAfter: 100 * time.Millisecond})
	judge(d, rec{"a", 1})
	if got := judge(d, rec{"a", 2}); !got[0] {
		t.Fatal("duplicate passed with Redis up")
	}

	srv.Stop()
	for i := range 5 {
		if got := judge(d, rec{"a", 2}, rec{"b", 1}, rec{"b", 2}); slices.Contains(got, true) {
			t.Fatalf("batch %d with Redis down: dup = %v, want all passed", i, got)
		}
	}
	if h := d.Health(); h.State != sink.Degraded {
		t.Fatalf("health with Redis down: %+v", h)
	}
	if o := obs.snapshot(); !slices.Equal(o.degraded, []bool{true}) || o.errs == 0 {
		t.Fatalf("observed %+v with Redis down", o)
	}

	srv.Start() // empty: it kept nothing
	deadline := time.Now().Add(10 * time.Second)
	for d.Health().State != sink.Healthy {
		if time.Now().After(deadline) {
			t.Fatalf("still %+v 10s after Redis came back", d.Health())
		}
		time.Sleep(50 * time.Millisecond)
		judge(d, rec{"probe", 1})
	}
	judge(d, rec{"a", 3})
	if got := judge(d, rec{"a", 4}, rec{"a", 3}); !got[0] || got[1] {
		t.Fatalf("after Redis came back: dup = %v, want [true false]", got)
	}
	if o := obs.snapshot(); !slices.Equal(o.degraded, []bool{true, false}) {
		t.Fatalf("observed degraded %v, want [true false]", o.degraded)
	}
}

// TestJudgeConcurrent: Judge from several goroutines at once (-race).
func TestJudgeConcurrent(t *testing.T) {
	d := New(NewMemory(MemoryOptions{}), Options{Stream: "s", Logger: quiet})
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := map[string]int{}
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				k := string(rune('a' + i%26))
				if got := judge(d, rec{k, w*1000 + i}); !got[0] {
					mu.Lock()
					passed[k]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for k, n := range passed {
		if n != 1 {
			t.Fatalf("key %q passed %d times, want once", k, n)
		}
	}
	if len(passed) != 26 {
		t.Fatalf("%d keys passed, want 26", len(passed))
	}
}
