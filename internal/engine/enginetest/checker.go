package enginetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// Position locates a record upstream: its source, a partition (a Kafka
// "topic/partition", a JetStream stream, a file identity) and an offset
// within it (a Kafka offset, a stream sequence, a byte offset).
type Position struct {
	Source    string
	Partition string
	Offset    int64
}

func (p Position) String() string {
	return fmt.Sprintf("%s[%s]@%d", p.Source, p.Partition, p.Offset)
}

// Locator tells a Checker where a record written through its gate came
// from; ok is false for a record it cannot place (the record is then not
// tracked).
type Locator func(source.Record) (pos Position, ok bool)

// Violation is a breach of "positions may lag, never lead", or a record
// that came back with a different id.
type Violation struct {
	// Kind is "lead" (a commit covered a position that was not durable) or
	// "id-changed" (a position was written again with another id).
	Kind   string
	Commit string // the commit, as the source reported it
	// Missing lists the positions the commit covered that were not durable
	// (at most 20).
	Missing []Position
	Detail  string
}

func (v Violation) String() string {
	if v.Kind == "lead" {
		return fmt.Sprintf("position leads durable: %s covers %d non-durable position(s), first %v", v.Commit, len(v.Missing), v.Missing)
	}
	return fmt.Sprintf("%s: %s", v.Kind, v.Detail)
}

type partKey struct{ source, partition string }

type partState struct {
	known   map[int64]struct{}      // positions that exist upstream or passed through the gate
	durable map[int64]sink.RecordID // durable positions, with the id they were written with
}

// Checker wraps a Gate and checks, at every commit a source reports, that
// the committed position does not lead what the gate has made durable.
//
// It learns which positions exist from Expect (what the test produced) and
// from every record passed to Write (located by the Locator), and which
// are durable from the Writes that returned nil. A record is durable only
// from the moment its Write returned nil: a commit that races an
// in-flight Write of a record it covers is a violation.
//
// Two commit semantics are checked:
//
//   - Committed(source, partition, next): a prefix commit — every known
//     position on the partition with an offset below next must be durable.
//     This is a Kafka group offset (the next offset to read) and a file
//     cursor (the byte offset reading resumes at).
//   - Acked(source, partition, offset): a single-position commit — that one
//     position must be durable. This is a JetStream explicit ack.
//
// Checker also reports a position written twice with different ids: a
// redelivery must carry the id of the first copy, or sinks cannot drop it.
type Checker struct {
	gate   source.Gate
	locate Locator
	onViol func(Violation)

	mu         sync.Mutex
	parts      map[partKey]*partState
	byPayload  map[string]Position      // from ExpectPayload
	unplaced   map[string]sink.RecordID // durable records no position was known for yet
	violations []Violation
	commits    int
	rewrites   int
}

// NewChecker wraps gate. locate may be nil: records are then placed by
// their payload, from ExpectPayload (for tests whose payloads are unique).
// onViolation, if not nil, is called (outside the checker's lock) at the
// moment a violation is recorded.
func NewChecker(gate source.Gate, locate Locator, onViolation func(Violation)) *Checker {
	c := &Checker{gate: gate, locate: locate, onViol: onViolation, parts: map[partKey]*partState{},
		byPayload: map[string]Position{}, unplaced: map[string]sink.RecordID{}}
	if c.locate == nil {
		c.locate = func(r source.Record) (Position, bool) {
			p, ok := c.byPayload[string(r.Payload)]
			return p, ok
		}
	}
	return c
}

// NewTestChecker is NewChecker for tests: each violation is reported with
// t.Errorf the moment it happens (from whatever goroutine made the commit)
// and, at the end of the test, any violation fails it.
func NewTestChecker(t testing.TB, gate source.Gate, locate Locator) *Checker {
	t.Helper()
	c := NewChecker(gate, locate, func(v Violation) { t.Errorf("invariant: %v", v) })
	t.Cleanup(func() { c.Require(t) })
	return c
}

// Require fails t (t.Fatalf) if any violation was recorded.
func (c *Checker) Require(t testing.TB) {
	t.Helper()
	if vs := c.Violations(); len(vs) > 0 {
		t.Fatalf("invariant: %d violation(s), first: %v", len(vs), vs[0])
	}
}

func (c *Checker) part(source, partition string) *partState {
	k := partKey{source, partition}
	p := c.parts[k]
	if p == nil {
		p = &partState{known: map[int64]struct{}{}, durable: map[int64]sink.RecordID{}}
		c.parts[k] = p
	}
	return p
}

// Expect declares positions that exist upstream, so that a commit that
// skips one of them (a record that never reached the gate) is caught.
func (c *Checker) Expect(ps ...Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		c.part(p.Source, p.Partition).known[p.Offset] = struct{}{}
	}
}

// ExpectPayload declares a position and the unique payload found there,
// for the payload locator. A record written before its position was
// declared (a consumer can see a record before its producer learns the
// offset) is placed now.
func (c *Checker) ExpectPayload(payload []byte, p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byPayload[string(payload)] = p
	ps := c.part(p.Source, p.Partition)
	ps.known[p.Offset] = struct{}{}
	if id, ok := c.unplaced[string(payload)]; ok {
		delete(c.unplaced, string(payload))
		if _, dup := ps.durable[p.Offset]; !dup {
			ps.durable[p.Offset] = id
		}
	}
}

// Positions lists every declared position (Expect, ExpectPayload).
func (c *Checker) Positions() []Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Position
	for k, p := range c.parts {
		for off := range p.known {
			out = append(out, Position{k.source, k.partition, off})
		}
	}
	return out
}

// Write passes recs to the wrapped gate and, when it returns nil, marks
// their positions durable.
func (c *Checker) Write(ctx context.Context, recs []source.Record) error {
	pos := make([]Position, len(recs))
	oks := make([]bool, len(recs))
	c.mu.Lock()
	for i := range recs {
		pos[i], oks[i] = c.locate(recs[i])
		if oks[i] {
			c.part(pos[i].Source, pos[i].Partition).known[pos[i].Offset] = struct{}{}
		}
	}
	c.mu.Unlock()
	if err := c.gate.Write(ctx, recs); err != nil {
		return err
	}
	var viols []Violation
	c.mu.Lock()
	for i := range recs {
		if !oks[i] {
			if pos[i], oks[i] = c.locate(recs[i]); !oks[i] {
				c.unplaced[string(recs[i].Payload)] = recs[i].ID
				continue
			}
		}
		p := c.part(pos[i].Source, pos[i].Partition)
		if id, dup := p.durable[pos[i].Offset]; dup {
			c.rewrites++
			if id != recs[i].ID {
				viols = append(viols, Violation{Kind: "id-changed",
					Detail: fmt.Sprintf("%v written with id %v, earlier with %v", pos[i], recs[i].ID, id)})
			}
			continue
		}
		p.durable[pos[i].Offset] = recs[i].ID
	}
	c.mu.Unlock()
	c.record(viols)
	return nil
}

// Committed reports a prefix commit: every position on partition below
// next is claimed durable.
func (c *Checker) Committed(source, partition string, next int64) {
	c.mu.Lock()
	c.commits++
	p := c.part(source, partition)
	var missing []Position
	n := 0
	for off := range p.known {
		if off >= next {
			continue
		}
		if _, ok := p.durable[off]; !ok {
			n++
			if len(missing) < 20 {
				missing = append(missing, Position{source, partition, off})
			}
		}
	}
	c.mu.Unlock()
	if n > 0 {
		slices.SortFunc(missing, func(a, b Position) int { return cmp.Compare(a.Offset, b.Offset) })
		c.record([]Violation{{Kind: "lead", Commit: fmt.Sprintf("commit %s[%s] next=%d", source, partition, next),
			Missing: missing, Detail: fmt.Sprintf("%d missing", n)}})
	}
}

// Acked reports a single-position commit.
func (c *Checker) Acked(source, partition string, offset int64) {
	c.mu.Lock()
	c.commits++
	_, ok := c.part(source, partition).durable[offset]
	c.mu.Unlock()
	if !ok {
		c.record([]Violation{{Kind: "lead", Commit: fmt.Sprintf("ack %s[%s]@%d", source, partition, offset),
			Missing: []Position{{source, partition, offset}}}})
	}
}

func (c *Checker) record(vs []Violation) {
	if len(vs) == 0 {
		return
	}
	c.mu.Lock()
	c.violations = append(c.violations, vs...)
	c.mu.Unlock()
	if c.onViol != nil {
		for _, v := range vs {
			c.onViol(v)
		}
	}
}

// Violations returns what was recorded so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// Stats is a summary of what a Checker saw.
type Stats struct {
	Known, Durable int // positions
	Rewrites       int // durable positions written again (redeliveries)
	Commits        int // commits and acks checked
}

// Stats summarises the positions and commits seen.
func (c *Checker) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Rewrites: c.rewrites, Commits: c.commits}
	for _, p := range c.parts {
		s.Known += len(p.known)
		s.Durable += len(p.durable)
	}
	return s
}

// Missing lists the known positions that are not durable, in order.
func (c *Checker) Missing() []Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Position
	for k, p := range c.parts {
		for off := range p.known {
			if _, ok := p.durable[off]; !ok {
				out = append(out, Position{k.source, k.partition, off})
			}
		}
	}
	slices.SortFunc(out, func(a, b Position) int {
		if c := cmp.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	return out
}

// Durable reports whether a position is durable.
func (c *Checker) Durable(p Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.part(p.Source, p.Partition).durable[p.Offset]
	return ok
}
