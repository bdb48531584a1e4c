package coord

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the coordination gauges, on the registry Start was given.
type metrics struct {
	members  prometheus.Gauge
	learners prometheus.Gauge
	leader   prometheus.Gauge
	role     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_coordination_members",
			Help: "Voting members of the coordination cluster, as this node last read them."}),
		learners: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_coordination_learners",
			Help: "Learners (members joining, not yet promoted) of the coordination cluster."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_coordination_leader",
			Help: "1 while this node's embedded member is the raft leader, as the member itself says (no quorum needed)."}),
		role: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_coordination_role",
			Help: "1 for the role this node holds (quorum, learner, worker), 0 for the others."}, []string{"role"}),
	}
	var err error
	m.members, err = register(reg, m.members)
	if err == nil {
		m.learners, err = register(reg, m.learners)
	}
	if err == nil {
		m.leader, err = register(reg, m.leader)
	}
	if err == nil {
		m.role, err = register(reg, m.role)
	}
	if err != nil {
		return nil, fmt.Errorf("coord: register metrics: %w", err)
	}
	m.setRole(RoleWorker)
	return m, nil
}

// RegisterMetrics registers the coordination tier's metrics on reg at
// their initial values without starting anything: the gauges Start
// registers (and reuses when they are already there) and the member gauge
// (NewMemberGauge). It is how the metrics catalogue's test lists them.
func RegisterMetrics(reg prometheus.Registerer) error {
	if _, err := newMetrics(reg); err != nil {
		return err
	}
	return reg.Register(NewMemberGauge())
}

// NewMemberGauge makes weir_coordination_member{member,state}, unregistered:
// 1 for each member in its state (leader, voter, learner, departed,
// unstarted) as a node last read the member list. The daemon keeps it from
// Node.Status.
func NewMemberGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_coordination_member",
		Help: "1 for each coordination member in its state (leader, voter, learner, departed, unstarted), as this node last read the member list."},
		[]string{"member", "state"})
}

// register registers c on reg, or returns the collector registered before
// under the same name (a node started again on the same registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(C); ok {
			return old, nil
		}
	}
	return c, err
}

func (m *metrics) setRole(r Role) {
	for _, x := range []Role{RoleVoter, RoleLearner, RoleWorker} {
		v := 0.0
		if x == r {
			v = 1
		}
		m.role.WithLabelValues(string(x)).Set(v)
	}
}

func (m *metrics) observe(v view) {
	voters := len(v.voters())
	m.members.Set(float64(voters))
	m.learners.Set(float64(len(v.members) - voters))
}

func (m *metrics) setLeader(leader bool) {
	lv := 0.0
	if leader {
		lv = 1
	}
	m.leader.Set(lv)
}

// clear zeroes every gauge: a closed node holds nothing.
func (m *metrics) clear() {
	m.setRole("")
	m.members.Set(0)
	m.learners.Set(0)
	m.leader.Set(0)
}
