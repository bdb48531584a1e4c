//go:build dst

package sim

import (
	"fmt"
	"slices"
	"testing"
)

// shrinkTries bounds the runs one shrink may take.
const shrinkTries = 200

// shrink makes a failing spec smaller — fewer records, crashes, faults,
// steals, partitions; calmer sinks — while it still breaks invariant inv,
// one change at a time, keeping each change that still fails. Note says
// what it took away.
func shrink(t *testing.T, sp spec, inv string) spec {
	tries, taken := 0, []string{}
	fails := func(c spec) bool {
		tries++
		r := runSpec(t, c)
		return r.Violated != nil && r.Violated.Invariant == inv
	}
	for changed := true; changed && tries < shrinkTries; {
		changed = false
		for _, c := range smaller(sp) {
			if tries >= shrinkTries {
				break
			}
			if fails(c.spec) {
				sp, changed = c.spec, true
				taken = append(taken, c.what)
				break
			}
		}
	}
	sp.Note = fmt.Sprintf("shrunk in %d runs: %v", tries, taken)
	return sp
}

type candidate struct {
	spec spec
	what string
}

// smaller lists the specs one step smaller than sp.
func smaller(sp spec) []candidate {
	var out []candidate
	add := func(what string, f func(*spec)) {
		c := sp
		c.Crashes, c.Faults, c.Steals, c.ClaimsDown = slices.Clone(sp.Crashes), slices.Clone(sp.Faults), slices.Clone(sp.Steals), slices.Clone(sp.ClaimsDown)
		c.Sinks = slices.Clone(sp.Sinks)
		f(&c)
		out = append(out, candidate{c, what})
	}
	if sp.Records > 20 {
		add("half the records", func(c *spec) { c.Records /= 2 })
	}
	for i := range sp.Crashes {
		add(fmt.Sprintf("crash at %d", sp.Crashes[i].Step), func(c *spec) { c.Crashes = slices.Delete(c.Crashes, i, i+1) })
	}
	for i := range sp.Faults {
		add("fault "+sp.Faults[i].Rule, func(c *spec) { c.Faults = slices.Delete(c.Faults, i, i+1) })
	}
	for i := range sp.Steals {
		add(fmt.Sprintf("steal at %d", sp.Steals[i]), func(c *spec) { c.Steals = slices.Delete(c.Steals, i, i+1) })
	}
	for i := range sp.ClaimsDown {
		add("a claims partition", func(c *spec) { c.ClaimsDown = slices.Delete(c.ClaimsDown, i, i+1) })
	}
	if sp.Partitions > 1 {
		add("a partition", func(c *spec) { c.Partitions-- })
	}
	for i, f := range sp.Sinks {
		if f.Transient+f.Slow+f.Hang > 0 {
			add(fmt.Sprintf("sink %d's faults", i), func(c *spec) { c.Sinks[i] = sinkFaults{Poison: f.Poison, Applied: f.Applied} })
		}
	}
	if sp.PoisonPct > 0 {
		add("poison", func(c *spec) { c.PoisonPct = 0 })
	}
	if sp.MaxAttempts > 0 {
		add("max attempts", func(c *spec) { c.MaxAttempts = 0 })
	}
	if sp.StallLane {
		add("the lane's stall", func(c *spec) { c.StallLane = false })
	}
	return out
}
