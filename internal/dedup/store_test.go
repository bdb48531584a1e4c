package dedup

import (
	"context"
	"testing"

	"github.com/weir-io/weir/sink"
)

// key is the claim key of a test record's material.
func key(material string) Key { return KeyOf("test", []byte(material)) }

// rid is a test record id.
func rid(n int) sink.RecordID { return sink.RecordID{0: byte(n), 15: byte(n >> 8)} }

// claimOf is a claim on key(material) by rid(id).
func claimOf(material string, id int) Claim { return Claim{Key: key(material), ID: rid(id)} }

// fataler is what claimAll needs of a *testing.T, *testing.B or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// claimAll asks s about claims and returns its answers.
func claimAll(t fataler, s Store, claims ...Claim) []Answer {
	t.Helper()
	out := make([]Answer, len(claims))
	if err := s.Claim(context.Background(), claims, out); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return out
}

// storeAnswers is the conformance table every Store passes: the first
// claim of a key holds it, the holder's id again is a redelivery, another
// id a duplicate, and neither answer moves the key to another id.
func storeAnswers(t *testing.T, s Store) {
	steps := []struct {
		name   string
		claims []Claim
		want   []Answer
	}{
		{"first claims", []Claim{claimOf("a", 1), claimOf("b", 2)}, []Answer{Claimed, Claimed}},
		{"holder, other id, unheld", []Claim{claimOf("a", 1), claimOf("b", 3), claimOf("c", 1)},
			[]Answer{Redelivery, Duplicate, Claimed}},
		{"a duplicate took nothing", []Claim{claimOf("b", 2), claimOf("b2", 2)}, []Answer{Redelivery, Claimed}},
		{"another id on a", []Claim{claimOf("a", 2)}, []Answer{Duplicate}},
		{"empty call", nil, nil},
	}
	for _, st := range steps {
		got := claimAll(t, s, st.claims...)
		for i := range st.want {
			if got[i] != st.want[i] {
				t.Fatalf("%s: claim %d answered %v, want %v (all: %v)", st.name, i, got[i], st.want[i], got)
			}
		}
	}
}
