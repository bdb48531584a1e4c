package enginetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/source"
)

type gateFunc func(context.Context, []source.Record) error

func (f gateFunc) Write(ctx context.Context, r []source.Record) error { return f(ctx, r) }

var recs = enginetest.Records

func TestCheckerPrefixCommit(t *testing.T) {
	batch := recs("k", 0, 10)
	fail := false
	g := gateFunc(func(context.Context, []source.Record) error {
		if fail {
			return errors.New("boom")
		}
		return nil
	})
	var seen []enginetest.Violation
	c := enginetest.NewChecker(g, nil, func(v enginetest.Violation) { seen = append(seen, v) })
	for i, r := range batch {
		c.ExpectPayload(r.Payload, enginetest.Position{Source: "k", Partition: "t/0", Offset: int64(i)})
	}
	ctx := context.Background()
	if err := c.Write(ctx, batch[:5]); err != nil {
		t.Fatal(err)
	}
	c.Committed("k", "t/0", 5) // exactly the durable prefix
	c.Committed("k", "t/0", 3) // lagging
	if len(seen) != 0 {
		t.Fatalf("violations on a sound commit: %v", seen)
	}
	// Records 5..9 are known (expected) but not durable: a commit of 7 leads.
	c.Committed("k", "t/0", 7)
	if len(seen) != 1 || seen[0].Kind != "lead" || len(seen[0].Missing) != 2 || seen[0].Missing[0].Offset != 5 {
		t.Fatalf("violations = %v", seen)
	}
	// A failed write makes nothing durable.
	fail = true
	_ = c.Write(ctx, batch[5:])
	c.Committed("k", "t/0", 10)
	if len(seen) != 2 {
		t.Fatalf("violations = %v", seen)
	}
	// A skipped record is caught: 8 and 9 durable, 5..7 not.
	fail = false
	if err := c.Write(ctx, batch[8:]); err != nil {
		t.Fatal(err)
	}
	c.Committed("k", "t/0", 10)
	if len(seen) != 3 || len(seen[2].Missing) != 3 {
		t.Fatalf("violations = %v", seen)
	}
	if st := c.Stats(); st.Durable != 7 || st.Known != 10 || st.Commits != 5 {
		t.Fatalf("stats = %+v", st)
	}
	if m := c.Missing(); len(m) != 3 || m[0].Offset != 5 {
		t.Fatalf("missing = %v", m)
	}
}

func TestCheckerAckAndIDChange(t *testing.T) {
	batch := recs("n", 1, 3)
	var seen []enginetest.Violation
	c := enginetest.NewChecker(gateFunc(func(context.Context, []source.Record) error { return nil }), nil,
		func(v enginetest.Violation) { seen = append(seen, v) })
	for i, r := range batch {
		c.ExpectPayload(r.Payload, enginetest.Position{Source: "n", Partition: "S", Offset: int64(i + 1)})
	}
	ctx := context.Background()
	if err := c.Write(ctx, batch[:1]); err != nil {
		t.Fatal(err)
	}
	c.Acked("n", "S", 1)
	c.Acked("n", "S", 2)
	if len(seen) != 1 || seen[0].Kind != "lead" {
		t.Fatalf("violations = %v", seen)
	}
	// The same position again with the same id: a redelivery, fine.
	if err := c.Write(ctx, batch[:1]); err != nil {
		t.Fatal(err)
	}
	// With another id: reported.
	again := batch[0]
	again.ID[0] ^= 1
	if err := c.Write(ctx, []source.Record{again}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[1].Kind != "id-changed" {
		t.Fatalf("violations = %v", seen)
	}
	if st := c.Stats(); st.Rewrites != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

// A record can reach the gate before the test learns its position (a
// consumer sees it before the producer's ack): it is placed when declared.
func TestCheckerLateDeclaration(t *testing.T) {
	var seen []enginetest.Violation
	c := enginetest.NewChecker(gateFunc(func(context.Context, []source.Record) error { return nil }), nil,
		func(v enginetest.Violation) { seen = append(seen, v) })
	batch := recs("k", 0, 3)
	if err := c.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for i, r := range batch {
		c.ExpectPayload(r.Payload, enginetest.Position{Source: "k", Partition: "p", Offset: int64(i)})
	}
	c.ExpectPayload([]byte("never written"), enginetest.Position{Source: "k", Partition: "p", Offset: 3})
	c.Committed("k", "p", 3)
	if len(seen) != 0 {
		t.Fatalf("violations = %v", seen)
	}
	c.Committed("k", "p", 4)
	if len(seen) != 1 {
		t.Fatalf("violations = %v", seen)
	}
}
