package coord

import (
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/testenv"
)

// With endpoints, a node embeds nothing: it checks in with the external
// cluster as a worker through the same client code, reads its status, and
// leaves the cluster's membership alone (nothing to hand off at Close).
func TestExternalCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	rec := &recorder{}
	cfg := Config{Mode: 3, Node: "ext-0", DataDir: t.TempDir(), Endpoints: []string{strings.TrimPrefix(srv.Endpoint, "http://")},
		ReadyTimeout: 10 * time.Second, HandoffGrace: 5 * time.Second, SessionTTL: 3, trace: rec.add}
	n := start(t, rec, cfg)
	if n.Role() != RoleWorker || n.IsLeader() {
		t.Fatalf("role %s, leader %v with an external cluster; want a worker, never the leader", n.Role(), n.IsLeader())
	}
	if _, err := n.Client().Put(ctxT(t, 5*time.Second), "/ext/k", "v"); err != nil {
		t.Fatalf("client of the external cluster: %v", err)
	}
	st, err := n.Status(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 1 || st.Members[0].Name != srv.Name || len(st.Nodes) != 1 || st.Nodes[0].Node != "ext-0" {
		t.Fatalf("status %+v: want the external member and this node checked in", st)
	}
	eventually(t, 5*time.Second, "metrics: 1 member, role worker", func() bool {
		return testenv.Metric(t, n.reg, "weir_coordination_members", nil) == 1 &&
			testenv.Metric(t, n.reg, "weir_coordination_role", map[string]string{"role": "worker"}) == 1
	})
	closeNode(t, n.Node)
	ml, err := srv.Client(t).MemberList(ctxT(t, 5*time.Second))
	if err != nil || len(ml.Members) != 1 {
		t.Fatalf("external membership after Close: %v, %v; want it untouched", ml, err)
	}
}
