package dedup

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-io/weir/internal/testenv"
)

func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func TestMemoryAnswers(t *testing.T) {
	storeAnswers(t, NewMemory(MemoryOptions{}))
}

func TestMemoryWindow(t *testing.T) {
	c := newClock()
	m := NewMemory(MemoryOptions{Window: time.Minute, Now: c.Now})
	claimAll(t, m, claimOf("a", 1))
	c.Advance(time.Minute - time.Nanosecond)
	if got := claimAll(t, m, claimOf("a", 2)); got[0] != Duplicate {
		t.Fatalf("just inside the window: %v, want duplicate", got[0])
	}
	c.Advance(time.Nanosecond)
	if got := claimAll(t, m, claimOf("a", 2)); got[0] != Claimed {
		t.Fatalf("at the window's end: %v, want claimed", got[0])
	}
	// The expired key was claimed again, by id 2, for a new window.
	if got := claimAll(t, m, claimOf("a", 2), claimOf("a2", 9)); got[0] != Redelivery {
		t.Fatalf("new holder again: %v, want redelivery", got[0])
	}
	c.Advance(59 * time.Second)
	if got := claimAll(t, m, claimOf("a", 1)); got[0] != Duplicate {
		t.Fatalf("within the new window: %v, want duplicate", got[0])
	}
	c.Advance(2 * time.Minute)
	// Each claim reclaims expired keys; Held no longer counts them.
	claimAll(t, m, claimOf("z", 1))
	if keys, bytes := m.Held(); keys != 1 || bytes != MemoryEntryBytes {
		t.Fatalf("Held() = %d, %d after expiry; want 1, %d", keys, bytes, MemoryEntryBytes)
	}
}

func TestMemoryBoundedByBytes(t *testing.T) {
	m := NewMemory(MemoryOptions{MaxBytes: 3*MemoryEntryBytes + MemoryEntryBytes/2})
	for i := range 10 {
		claimAll(t, m, claimOf(fmt.Sprint(i), i))
		keys, bytes := m.Held()
		if want := int64(min(i+1, 3)); keys != want || bytes != want*MemoryEntryBytes {
			t.Fatalf("after %d claims: Held() = %d, %d; want %d keys", i+1, keys, bytes, want)
		}
	}
	// 7, 8, 9 are held; 6 was evicted and reads as unheld.
	if got := claimAll(t, m, claimOf("7", 7), claimOf("8", 0), claimOf("9", 9)); got[0] != Redelivery || got[1] != Duplicate || got[2] != Redelivery {
		t.Fatalf("held keys answered %v", got)
	}
	if got := claimAll(t, m, claimOf("6", 0)); got[0] != Claimed {
		t.Fatalf("evicted key answered %v, want claimed", got[0])
	}
	// A bound below one key holds nothing: every claim is new.
	tiny := NewMemory(MemoryOptions{MaxBytes: MemoryEntryBytes - 1})
	if got := claimAll(t, tiny, claimOf("x", 1), claimOf("y", 1)); got[0] != Claimed || got[1] != Claimed {
		t.Fatalf("zero-capacity store answered %v", got)
	}
	if got := claimAll(t, tiny, claimOf("x", 2)); got[0] != Claimed {
		t.Fatalf("zero-capacity store answered %v", got)
	}
}

// TestMemoryLRUOrder: the least recently claimed key goes first; a
// duplicate or redelivery does not renew a key, and an expired key claimed
// again is the most recent.
func TestMemoryLRUOrder(t *testing.T) {
	c := newClock()
	m := NewMemory(MemoryOptions{MaxBytes: 3 * MemoryEntryBytes, Window: time.Minute, Now: c.Now})
	held := func(claims ...Claim) {
		t.Helper()
		for i, a := range claimAll(t, m, claims...) {
			if a != Redelivery {
				t.Fatalf("held claim %d answered %v, want redelivery", i, a)
			}
		}
	}
	evicted := func(cl Claim) {
		t.Helper()
		if a := claimAll(t, m, cl)[0]; a != Claimed {
			t.Fatalf("evicted key answered %v, want claimed", a)
		}
	}
	claimAll(t, m, claimOf("a", 1)) // t=0
	c.Advance(time.Second)
	claimAll(t, m, claimOf("b", 1), claimOf("c", 1)) // t=1
	claimAll(t, m, claimOf("a", 1), claimOf("a", 2)) // hits on a renew nothing
	claimAll(t, m, claimOf("d", 1))                  // evicts a, the oldest claim
	held(claimOf("b", 1), claimOf("c", 1), claimOf("d", 1))
	evicted(claimOf("a", 2)) // claims a again, evicting b; held: a d c

	c.Advance(29 * time.Second)
	claimAll(t, m, claimOf("e", 1)) // t=30, evicts c; held: e(30) a(1) d(1)
	c.Advance(31 * time.Second)     // t=61: a and d expired
	evicted(claimOf("d", 2))        // d claimed again at 61; held: d(61) e(30)
	claimAll(t, m, claimOf("f", 1), claimOf("g", 1))
	// g evicted e, claimed at 30, not d, first claimed at 1.
	held(claimOf("d", 2), claimOf("f", 1), claimOf("g", 1))
	evicted(claimOf("e", 2))
}

// TestMemoryConcurrent: goroutines claiming overlapping keys with their
// own ids; each key is claimed by exactly one, and every other sees a
// duplicate.
func TestMemoryConcurrent(t *testing.T) {
	const workers, keys = 8, 2000
	m := NewMemory(MemoryOptions{})
	won := make([][]bool, workers)
	var wg sync.WaitGroup
	for w := range workers {
		won[w] = make([]bool, keys)
		wg.Go(func() {
			order := rand.Perm(keys)
			for start := 0; start < keys; start += 50 {
				claims := make([]Claim, 0, 50)
				for _, k := range order[start : start+50] {
					claims = append(claims, claimOf(fmt.Sprint(k), w))
				}
				for i, a := range claimAll(t, m, claims...) {
					k := order[start+i]
					switch {
					case a == Claimed:
						won[w][k] = true
					case a != Duplicate:
						t.Errorf("worker %d key %d: %v", w, k, a)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		n := 0
		for w := range workers {
			if won[w][k] {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("key %d claimed by %d workers, want 1", k, n)
		}
	}
	if held, _ := m.Held(); held != keys {
		t.Fatalf("held %d keys, want %d", held, keys)
	}
}

// model is the reference seen-set: LRU by claim, TTL from the claim.
type model struct {
	max    int
	window time.Duration
	order  *list.List // of *modelEntry, front newest
	byKey  map[Key]*list.Element
}

type modelEntry struct {
	c       Claim
	expires time.Time
}

func newModel(max int, window time.Duration) *model {
	return &model{max: max, window: window, order: list.New(), byKey: map[Key]*list.Element{}}
}

func (m *model) claim(now time.Time, c Claim) Answer {
	for e := m.order.Back(); e != nil && !e.Value.(*modelEntry).expires.After(now); e = m.order.Back() {
		delete(m.byKey, e.Value.(*modelEntry).c.Key)
		m.order.Remove(e)
	}
	if e, ok := m.byKey[c.Key]; ok {
		if e.Value.(*modelEntry).c.ID == c.ID {
			return Redelivery
		}
		return Duplicate
	}
	if m.max == 0 {
		return Claimed
	}
	if m.order.Len() >= m.max {
		e := m.order.Back()
		delete(m.byKey, e.Value.(*modelEntry).c.Key)
		m.order.Remove(e)
	}
	m.byKey[c.Key] = m.order.PushFront(&modelEntry{c: c, expires: now.Add(m.window)})
	return Claimed
}

// TestMemoryMatchesModel: random claims and clock moves give exactly the
// model's answers; and, the property that matters, Duplicate is answered
// only for a key some other id claimed before.
func TestMemoryMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(0, 6).Draw(t, "capacity")
		nkeys := rapid.IntRange(1, 12).Draw(t, "keys")
		c := newClock()
		const window = 10 * time.Second
		m := NewMemory(MemoryOptions{MaxBytes: int64(capacity)*MemoryEntryBytes + MemoryEntryBytes/2, Window: window, Now: c.Now})
		ref := newModel(capacity, window)
		claimedBy := map[Key]map[int]bool{} // every id that ever claimed a key
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			c.Advance(time.Duration(rapid.IntRange(0, 4000).Draw(t, "ms")) * time.Millisecond)
			seen := map[Key]bool{}
			var claims []Claim
			var ids []int
			for range rapid.IntRange(1, 5).Draw(t, "batch") {
				k := key(fmt.Sprint(rapid.IntRange(0, nkeys-1).Draw(t, "key")))
				if seen[k] { // keys are distinct within one call
					continue
				}
				seen[k] = true
				id := rapid.IntRange(0, 3).Draw(t, "id")
				claims, ids = append(claims, Claim{Key: k, ID: rid(id)}), append(ids, id)
			}
			got := claimAll(t, m, claims...)
			for i, cl := range claims {
				if want := ref.claim(c.Now(), cl); got[i] != want {
					t.Fatalf("claim %d: %v, model says %v", i, got[i], want)
				}
				if got[i] == Duplicate && !claimedByOther(claimedBy[cl.Key], ids[i]) {
					t.Fatalf("duplicate for a key no other id claimed")
				}
				if claimedBy[cl.Key] == nil {
					claimedBy[cl.Key] = map[int]bool{}
				}
				claimedBy[cl.Key][ids[i]] = true
			}
			if keys, _ := m.Held(); keys < int64(ref.order.Len()) || keys > int64(capacity) {
				t.Fatalf("Held %d keys; model holds %d, capacity %d", keys, ref.order.Len(), capacity)
			}
		}
	})
}

func claimedByOther(ids map[int]bool, id int) bool {
	for other := range ids {
		if other != id {
			return true
		}
	}
	return false
}

// TestMemoryChurnMatchesModel runs many more keys through a larger store
// than the property test can, so that the index probes long chains, grows
// and shifts back on every eviction.
func TestMemoryChurnMatchesModel(t *testing.T) {
	const capacity, nkeys, steps = 1000, 5000, 100_000
	c := newClock()
	m := NewMemory(MemoryOptions{MaxBytes: capacity * MemoryEntryBytes, Window: time.Hour, Now: c.Now})
	ref := newModel(capacity, time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range steps {
		if i%1000 == 0 {
			c.Advance(time.Duration(rng.IntN(600)) * time.Second)
		}
		cl := Claim{Key: key(fmt.Sprint(rng.IntN(nkeys))), ID: rid(rng.IntN(3))}
		got := claimAll(t, m, cl)[0]
		if want := ref.claim(c.Now(), cl); got != want {
			t.Fatalf("step %d: %v, model says %v", i, got, want)
		}
	}
}
