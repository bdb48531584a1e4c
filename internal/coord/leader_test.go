package coord

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// leaderGauges is weir_coordination_leader of each node.
func leaderGauges(nodes ...*tnode) (sum float64, each []float64) {
	for _, n := range nodes {
		v := testutil.ToFloat64(n.met.leader)
		each = append(each, v)
		sum += v
	}
	return sum, each
}

// Issue #25: weir_coordination_leader was set only after a membership
// read, which needs a quorum, so a leader cut off from the others kept
// reporting 1 for the whole partition. It now follows the local member:
// summed over three nodes it is 1; with both followers gone the former
// leader steps down (check-quorum, within an election timeout) and
// reports 0.
func TestLeaderGaugeFollowsTheLocalMember(t *testing.T) {
	rec := &recorder{}
	nodes := growThree(t, rec)
	lead := leaderOf(t, nodes...)
	eventually(t, 5*time.Second, "the leader gauges summing to 1 on the leader", func() bool {
		sum, _ := leaderGauges(nodes...)
		return sum == 1 && testutil.ToFloat64(lead.met.leader) == 1
	})
	cut := time.Now()
	for _, n := range nodes {
		if n != lead {
			crash(t, n.Node)
		}
	}
	eventually(t, 10*time.Second, "the cut-off former leader reporting 0", func() bool {
		return testutil.ToFloat64(lead.met.leader) == 0
	})
	t.Logf("the cut-off leader reported 0 %v after losing both followers", time.Since(cut).Round(10*time.Millisecond))
}
