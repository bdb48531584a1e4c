package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/weir-io/weir/source"
)

// OffsetState is what an offset store persists: the cursors of
// store-managed sources, each secondary's coverage, the raw end a writer
// acknowledged, and the fencing token of every recovery window a claim
// entered (OffsetStore.Enter).
type OffsetState struct {
	Cursors  map[string]source.Cursor
	Coverage map[string]*SpanSet
	RawEnd   uint64
	// Fences maps a recovery window's key to the highest fencing token
	// registered for it; merging keeps the highest per key.
	Fences map[string]uint64
}

// OffsetPersister keeps an OffsetState where primary raw lives: a file in
// raw's directory (OpenOffsetStore) or rows in raw's database. Several
// processes may share one (an ingest node and a recovery node on the same
// raw), so every update is a read-merge-write under mutual exclusion.
type OffsetPersister interface {
	// Where names the store for logs ("/data/out/weir-offsets").
	Where() string
	// Read returns the persisted state, or nil when nothing was ever
	// persisted.
	Read(ctx context.Context) (*OffsetState, error)
	// Update reads the persisted state (nil when there is none), passes
	// it to merge and persists what merge returns, excluding every other
	// Update of the same store meanwhile. The new state is durable when
	// Update returns nil; after an error the persisted state is the old
	// one or the new one. What merge returns replaces the state whole: a
	// cursor it lacks is deleted (OffsetStore.RemoveCursor). A merge that
	// returns an error refuses the update: nothing is written, and Update
	// returns that error.
	Update(ctx context.Context, merge func(persisted *OffsetState) (*OffsetState, error)) error
}

// OffsetStore keeps, next to primary raw and never inside the sinks it
// describes, each secondary sink's coverage (the raw positions it has
// durably received) and the cursors of store-managed sources. Where it
// keeps them is its OffsetPersister's business.
//
// Coverage is recorded in memory by Cover — which a caller may do only
// after the sink's durable ack — and written out by Flush, so many acks
// cost one write: the persisted state may lag memory, and memory may lag
// the sinks, but neither ever claims a position a sink has not acked.
// Cursors are written at once by Save (a source commits its position only
// when Save returns).
//
// Every write merges what is persisted — coverage is united, cursors this
// process never saved are taken from the persisted state — so a writer
// sharing the store never erases another's progress, and a lost race can
// only make coverage lag.
//
// OffsetStore implements CoverageStore and source.CursorStore.
type OffsetStore struct {
	p OffsetPersister

	mu       sync.Mutex
	cursors  map[string]source.Cursor
	saved    map[string]bool // cursors this process saved
	coverage map[string]*SpanSet
	replace  map[string]bool // coverage to write as is, not merged
	fences   map[string]uint64
	rawEnd   uint64
	dirty    bool
	writeMu  sync.Mutex // one write at a time
}

var _ source.CursorStore = (*OffsetStore)(nil)

// NewOffsetStore starts a store on p with what p holds.
func NewOffsetStore(ctx context.Context, p OffsetPersister) (*OffsetStore, error) {
	s := &OffsetStore{
		p:       p,
		cursors: map[string]source.Cursor{}, saved: map[string]bool{},
		coverage: map[string]*SpanSet{}, replace: map[string]bool{}, fences: map[string]uint64{},
	}
	st, err := p.Read(ctx)
	if err != nil {
		return nil, err
	}
	if st != nil {
		s.merge(st)
	}
	return s, nil
}

// Where names where the store is kept.
func (s *OffsetStore) Where() string { return s.p.Where() }

// Load implements source.CursorStore.
func (s *OffsetStore) Load(_ context.Context, src string) (source.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cursors[src]), nil
}

// Save implements source.CursorStore: the cursor (and any coverage
// recorded so far) is durable when Save returns nil.
func (s *OffsetStore) Save(ctx context.Context, src string, c source.Cursor) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("engine: offset store: %w", err)
	}
	s.mu.Lock()
	s.cursors[src] = slices.Clone(c)
	s.saved[src] = true
	s.dirty = true
	s.mu.Unlock()
	return s.flush(ctx, true)
}

// Coverage returns a copy of the sink's coverage.
func (s *OffsetStore) Coverage(sinkName string) SpanSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.coverage[sinkName]; c != nil {
		return c.Clone()
	}
	return SpanSet{}
}

// Known reports whether the store has ever recorded coverage for the sink.
func (s *OffsetStore) Known(sinkName string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.coverage[sinkName]
	return ok
}

// Cover records that the sink has durably received raw positions [lo, hi).
// Call it only after the sink's durable ack for every one of them. It
// registers the sink even when the range is empty.
func (s *OffsetStore) Cover(sinkName string, lo, hi uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addCoverage(s.coverage, sinkName, lo, hi) {
		s.dirty = true
	}
}

// addCoverage adds [lo, hi) to the sink's coverage in m, registering the
// sink; it reports whether m changed.
func addCoverage(m map[string]*SpanSet, sinkName string, lo, hi uint64) bool {
	c := m[sinkName]
	changed := false
	if c == nil {
		c = &SpanSet{}
		m[sinkName] = c
		changed = true
	}
	if hi > lo && !c.ContainsSpan(lo, hi) {
		c.Add(lo, hi)
		changed = true
	}
	return changed
}

// Clamp drops the sink's coverage at and above end and makes the next
// write replace, not merge, what is persisted for it. It is for coverage
// that claims positions raw does not have (raw lost an acknowledged tail,
// or the store belongs to another raw): keeping such a claim would stop
// recovery from ever delivering the records raw puts at those positions.
// It reports whether anything was dropped.
func (s *OffsetStore) Clamp(sinkName string, end uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.coverage[sinkName]
	if c == nil || c.Max() <= end {
		return false
	}
	c.Remove(end, c.Max())
	s.replace[sinkName] = true
	s.dirty = true
	return true
}

// NoteRawEnd records the primary-raw end this process has acknowledged; a
// recovery-only process on the same raw reads it (RawEnd, after Reload) as
// the limit below which raw is known to be acknowledged.
func (s *OffsetStore) NoteRawEnd(end uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end > s.rawEnd {
		s.rawEnd = end
		s.dirty = true
	}
}

// RawEnd is the highest raw end noted here or read from the store.
func (s *OffsetStore) RawEnd() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rawEnd
}

// Flush writes the store if anything changed since the last write.
func (s *OffsetStore) Flush(ctx context.Context) error { return s.flush(ctx, false) }

// Reload merges what another process persisted into memory.
func (s *OffsetStore) Reload(ctx context.Context) error {
	st, err := s.p.Read(ctx)
	if err != nil || st == nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.merge(st)
	return nil
}

// merge folds a persisted state into memory. s.mu must be held.
func (s *OffsetStore) merge(st *OffsetState) {
	// A cursor this process never saved is whatever is persisted: none,
	// once another process removed it.
	for name := range s.cursors {
		if _, ok := st.Cursors[name]; !ok && !s.saved[name] {
			delete(s.cursors, name)
		}
	}
	for name, c := range st.Cursors {
		if !s.saved[name] {
			s.cursors[name] = c
		}
	}
	for name, c := range st.Coverage {
		if s.replace[name] {
			continue
		}
		mine := s.coverage[name]
		if mine == nil {
			mine = &SpanSet{}
			s.coverage[name] = mine
		}
		mine.AddSet(c)
	}
	for w, tok := range st.Fences {
		s.fences[w] = max(s.fences[w], tok)
	}
	s.rawEnd = max(s.rawEnd, st.RawEnd)
}

// snapshot copies memory into a state to persist. s.mu must be held.
func (s *OffsetStore) snapshot() *OffsetState {
	st := &OffsetState{
		Cursors:  maps.Clone(s.cursors),
		Coverage: make(map[string]*SpanSet, len(s.coverage)),
		RawEnd:   s.rawEnd,
		Fences:   maps.Clone(s.fences),
	}
	for name, c := range s.coverage {
		cp := c.Clone()
		st.Coverage[name] = &cp
	}
	return st
}

func (s *OffsetStore) flush(ctx context.Context, force bool) error {
	return s.update(ctx, force, nil, nil)
}

// update writes memory, merged with what is persisted, in one Update of
// the persister (unless nothing changed and not force). gate, when set,
// sees the persisted state (nil: none) and the state about to be written,
// under the persister's exclusion; it may add to next, or refuse the
// write with an error. applied runs, under s.mu, once the write is
// durable.
func (s *OffsetStore) update(ctx context.Context, force bool, gate func(persisted, next *OffsetState) error, applied func()) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if !s.dirty && !force {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	var replaced map[string]bool
	wrote := false
	err := s.p.Update(ctx, func(persisted *OffsetState) (*OffsetState, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if persisted != nil {
			s.merge(persisted)
		}
		next := s.snapshot()
		if gate != nil {
			if err := gate(persisted, next); err != nil {
				return nil, err
			}
		}
		wrote = true
		s.dirty = false
		replaced = maps.Clone(s.replace)
		return next, nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if wrote {
			s.dirty = true
		}
		return err
	}
	for name := range replaced {
		delete(s.replace, name)
	}
	if applied != nil {
		applied()
	}
	return nil
}
