package source

import (
	"context"
	"sync"
)

// Pausable is a source flow control can stop reading without losing its
// place (see the package doc, Pausing). Pause and Resume are idempotent
// and safe from any goroutine. It has the method set of flow.Pausable, so
// a source's Pausable is registered with the flow controller as it is.
type Pausable interface {
	Pause()
	Resume()
}

// Pauser is a Pausable for a source that reads in a loop: the loop calls
// Wait before each read, which returns at once unless the source is
// paused. The zero Pauser is running. Safe for concurrent use.
type Pauser struct {
	// OnChange, if set, is called with the new state whenever Pause or
	// Resume changes it (to log it), with the Pauser's lock held: it must
	// be quick and must not call the Pauser.
	OnChange func(paused bool)

	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed by Resume; made by Pause
}

var _ Pausable = (*Pauser)(nil)

// Pause makes Wait block until Resume.
func (p *Pauser) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused, p.resumed = true, make(chan struct{})
		if p.OnChange != nil {
			p.OnChange(true)
		}
	}
}

// Resume lets Wait return again.
func (p *Pauser) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resumed)
		if p.OnChange != nil {
			p.OnChange(false)
		}
	}
}

// Paused reports whether the source is paused.
func (p *Pauser) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Wait returns nil at once when the source is not paused, else when it is
// resumed, or ctx's error when ctx ends first.
func (p *Pauser) Wait(ctx context.Context) error {
	p.mu.Lock()
	paused, resumed := p.paused, p.resumed
	p.mu.Unlock()
	if !paused {
		return nil
	}
	select {
	case <-resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Votes shares one Pausable among several deciders (flow control, a
// contract's breaker): the source is paused while any of them wants it
// paused, and resumed only when none does. Safe for concurrent use.
type Votes struct {
	mu     sync.Mutex
	p      Pausable
	paused map[string]bool
}

// NewVotes shares p.
func NewVotes(p Pausable) *Votes { return &Votes{p: p, paused: map[string]bool{}} }

// Voter is the Pausable of one decider, named for the source's log.
func (v *Votes) Voter(name string) Pausable { return voter{v, name} }

// Paused reports the deciders that want the source paused.
func (v *Votes) Paused() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for n, p := range v.paused {
		if p {
			out = append(out, n)
		}
	}
	return out
}

func (v *Votes) vote(name string, pause bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	was := len(v.paused) > 0
	if pause {
		v.paused[name] = true
	} else {
		delete(v.paused, name)
	}
	switch now := len(v.paused) > 0; {
	case now && !was:
		v.p.Pause()
	case !now && was:
		v.p.Resume()
	}
}

type voter struct {
	v    *Votes
	name string
}

func (w voter) Pause()  { w.v.vote(w.name, true) }
func (w voter) Resume() { w.v.vote(w.name, false) }
