package enginetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine"
)

// StoreOpener opens a new offset store on one persisted state: every
// store it returns shares that state, as the nodes sharing one raw do.
type StoreOpener func(t *testing.T) *engine.OffsetStore

// Fences checks an offset store's fencing (engine.OffsetStore.Enter and
// CoverFenced) on whatever persister fresh gives: it is called once per
// check, for an opener on a state nothing has written yet.
func Fences(t *testing.T, fresh func(t *testing.T) StoreOpener) {
	t.Run("EnterAndCover", func(t *testing.T) { fenceEnterAndCover(t, fresh(t)) })
	t.Run("TwoWriters", func(t *testing.T) { fenceTwoWriters(t, fresh(t)) })
	t.Run("Race", func(t *testing.T) { fenceRace(t, fresh(t)) })
}

// Enter raises a window's token durably and refuses a lower one;
// CoverFenced records coverage only under the current token.
func fenceEnterAndCover(t *testing.T, open StoreOpener) {
	ctx := context.Background()
	s := open(t)
	w := "pg/0"
	if err := s.CoverFenced(ctx, "pg", 0, 10, engine.Fence{Window: w, Token: 5}); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("CoverFenced before any Enter: %v, want ErrFenced", err)
	}
	if err := s.Enter(ctx, engine.Fence{Window: w, Token: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.CoverFenced(ctx, "pg", 0, 10, engine.Fence{Window: w, Token: 5}); err != nil {
		t.Fatal(err)
	}
	r := open(t) // durable on return: a new store sees both
	if c := r.Coverage("pg"); c.String() != "{[0,10)}" {
		t.Fatalf("coverage in a new store %v", &c)
	}
	err := r.Enter(ctx, engine.Fence{Window: w, Token: 4})
	if !errors.Is(err, engine.ErrFenced) || !strings.Contains(err.Error(), "claim token 4, store holds 5") || !strings.Contains(err.Error(), w) {
		t.Fatalf("Enter of a lower token: %v", err)
	}
	if err := r.Enter(ctx, engine.Fence{Window: w, Token: 5}); err != nil {
		t.Fatalf("Enter of the same token again: %v", err)
	}
	if err := r.CoverFenced(ctx, "pg", 10, 20, engine.Fence{Window: "pg/1", Token: 5}); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("CoverFenced under another window's token: %v", err)
	}
}

// Once b has entered a higher token, a's CoverFenced is refused, a's
// memory never takes the span, and no later Flush of a writes it.
func fenceTwoWriters(t *testing.T, open StoreOpener) {
	ctx := context.Background()
	a, b := open(t), open(t)
	w := "pg/3"
	fa, fb := engine.Fence{Window: w, Token: 5}, engine.Fence{Window: w, Token: 7}
	if err := a.Enter(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if err := a.CoverFenced(ctx, "pg", 0, 100, fa); err != nil {
		t.Fatal(err)
	}
	if err := b.Enter(ctx, fb); err != nil { // b never saw token 5 in memory
		t.Fatal(err)
	}
	if err := a.CoverFenced(ctx, "pg", 100, 200, fa); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("stale claim's CoverFenced: %v, want ErrFenced", err)
	}
	if c := a.Coverage("pg"); c.ContainsSpan(100, 101) {
		t.Fatalf("refused span in memory: %v", &c)
	}
	if err := a.Enter(ctx, engine.Fence{Window: w, Token: 6}); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("stale claim re-entering: %v", err)
	}
	a.Cover("other", 0, 1)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.CoverFenced(ctx, "pg", 150, 200, fb); err != nil {
		t.Fatal(err)
	}
	c := open(t)
	if got := c.Coverage("pg"); got.String() != "{[0,100) [150,200)}" {
		t.Fatalf("coverage %v: want a's fenced [0,100) and b's [150,200), not a's refused [100,150)", &got)
	}
	if err := c.CoverFenced(ctx, "pg", 200, 201, fb); err != nil {
		t.Fatalf("the store no longer holds token 7: %v", err)
	}
}

// Two stores race: each enters tokens from one counter and covers a
// position of its own under each. Every CoverFenced that succeeded is
// persisted, none that was refused is, the highest token entered is the
// one persisted, and nothing but ErrFenced is ever returned.
func fenceRace(t *testing.T, open StoreOpener) {
	ctx := context.Background()
	const w, rounds = "pg/0", 40
	stores := [2]*engine.OffsetStore{open(t), open(t)}
	var (
		tokens, maxEntered atomic.Uint64
		mu                 sync.Mutex
		covered            = map[uint64]bool{}
		refused            int
		failure            error
		wg                 sync.WaitGroup
	)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				f := engine.Fence{Window: w, Token: tokens.Add(1)}
				err := s.Enter(ctx, f)
				for m := maxEntered.Load(); err == nil && m < f.Token && !maxEntered.CompareAndSwap(m, f.Token); m = maxEntered.Load() {
				}
				time.Sleep(time.Millisecond) // let the other store in between
				pos := uint64(r*2 + i)
				err = errors.Join(err, s.CoverFenced(ctx, "pg", pos, pos+1, f))
				mu.Lock()
				switch {
				case err == nil:
					covered[pos] = true
				case errors.Is(err, engine.ErrFenced):
					refused++
				default:
					failure = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	for _, s := range stores {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := open(t)
	cov := r.Coverage("pg")
	for pos := uint64(0); pos < 2*rounds; pos++ {
		if cov.Contains(pos) != covered[pos] {
			t.Fatalf("position %d: persisted %v, CoverFenced succeeded %v", pos, cov.Contains(pos), covered[pos])
		}
	}
	top := engine.Fence{Window: w, Token: maxEntered.Load()}
	if err := r.CoverFenced(ctx, "pg", 1000, 1001, top); err != nil {
		t.Fatalf("the store does not hold the highest token entered, %d: %v", top.Token, err)
	}
	t.Logf("%d fenced covers succeeded, %d refused", len(covered), refused)
}
