package etcdtest

import (
	"context"
	"testing"
	"time"
)

func TestStartPutGet(t *testing.T) {
	s := Start(t)
	cli := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("got %v, want one k=v", resp.Kvs)
	}
}

// A three-member cluster replicates: a key written through one member is
// read back through another, and all three list three voters.
func TestStartCluster(t *testing.T) {
	srvs := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := srvs[0].Client(t).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := srvs[2].Client(t).Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("got %v through another member, want one k=v", resp.Kvs)
	}
	for _, s := range srvs {
		voters := 0
		for _, m := range s.Etcd.Server.Cluster().Members() {
			if !m.IsLearner {
				voters++
			}
		}
		if voters != 3 {
			t.Errorf("%s lists %d voters, want 3", s.Name, voters)
		}
	}
	if eps := Endpoints(srvs); len(eps) != 3 || eps[1] != srvs[1].Endpoint {
		t.Errorf("Endpoints: %v", eps)
	}
}
