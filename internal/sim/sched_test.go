//go:build dst

package sim

import (
	"fmt"
	"hash"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
)

// parked is a call parked at a yield point.
type parked struct {
	label string
	inc   int
	ch    chan bool // true: go on; false: the caller's incarnation is dead
}

// sched holds the calls parked at yield points and the run's trace.
type sched struct {
	mu    sync.Mutex
	ops   []*parked
	dead  map[int]bool // incarnations killed
	trace hash.Hash64
	log   []string // the last steps, for a failure's report
	all   []string // every step, when kept (keepAll)
	keep  bool
}

func newSched() *sched { return &sched{dead: map[int]bool{}, trace: fnv.New64a()} }

// yield parks the caller, a goroutine of incarnation inc, until the
// harness releases it. It returns false when the incarnation is (or
// becomes) dead: the caller must then act on nothing outside the node.
func (s *sched) yield(inc int, label string) bool {
	s.mu.Lock()
	if s.dead[inc] {
		s.mu.Unlock()
		return false
	}
	p := &parked{label: label, inc: inc, ch: make(chan bool, 1)}
	s.ops = append(s.ops, p)
	s.mu.Unlock()
	return <-p.ch
}

// alive reports whether incarnation inc still runs.
func (s *sched) alive(inc int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.dead[inc]
}

// isParked reports whether a call of incarnation inc is parked under label.
func (s *sched) isParked(inc int, label string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ops {
		if p.inc == inc && p.label == label {
			return true
		}
	}
	return false
}

// pending is the parked calls in label order (arrival order is the Go
// scheduler's, so it must not decide anything).
func (s *sched) pending() []*parked {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.ops)
	slices.SortStableFunc(out, func(a, b *parked) int { return strings.Compare(a.label, b.label) })
	return out
}

// release lets p go on.
func (s *sched) release(p *parked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.ops, p); i >= 0 {
		s.ops = slices.Delete(s.ops, i, i+1)
		p.ch <- true
	}
}

// kill marks incarnation inc dead and fails every call it has parked.
func (s *sched) kill(inc int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead[inc] = true
	s.ops = slices.DeleteFunc(s.ops, func(p *parked) bool {
		if p.inc == inc {
			p.ch <- false
			return true
		}
		return false
	})
}

// note adds a step to the trace.
func (s *sched) note(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace.Write([]byte(line))
	s.trace.Write([]byte{'\n'})
	if len(s.log) == 64 {
		s.log = s.log[1:]
	}
	s.log = append(s.log, line)
	if s.keep {
		s.all = append(s.all, line)
	}
}

func (s *sched) sum() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trace.Sum64()
}

func (s *sched) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}
