package source_test

import (
	"testing"

	"github.com/weir-io/weir/source"
)

func TestVotesPauseWhileAnyVoterDoes(t *testing.T) {
	var p source.Pauser
	v := source.NewVotes(&p)
	flow, breaker := v.Voter("flow"), v.Voter("breaker")
	steps := []struct {
		do   func()
		want bool
	}{
		{flow.Pause, true},
		{breaker.Pause, true},
		{flow.Resume, true}, // the breaker still holds it
		{flow.Resume, true}, // idempotent
		{breaker.Resume, false},
		{breaker.Resume, false},
		{breaker.Pause, true},
		{breaker.Pause, true},
		{breaker.Resume, false},
	}
	for i, s := range steps {
		s.do()
		if got := p.Paused(); got != s.want {
			t.Fatalf("step %d: paused = %v, want %v (voters paused: %v)", i, got, s.want, v.Paused())
		}
	}
}
