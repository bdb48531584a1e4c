package engine

import (
	"context"
	"iter"
	"strconv"
)

// Claims hands recovery windows out among the nodes sharing one raw
// (internal/coord/leases keeps them in etcd). nil: this node is the only
// claimant, and recovery takes the first gap it finds.
type Claims interface {
	// Claim tries to take window; ok=false (no error) when another holder
	// has it.
	Claim(ctx context.Context, window string) (c Claim, ok bool, err error)
	// Held lists the windows held by any node right now, under prefix,
	// less the windows whose release failed and is being retried: those
	// are claimed, but nobody works them (counted unclaimed), and their
	// holder may Claim them again.
	Held(ctx context.Context, prefix string) (map[string]bool, error)
}

// Claim is one node's hold on a recovery window.
type Claim interface {
	// Token is the claim's fencing token: greater than that of every
	// earlier claim of the same window.
	Token() uint64
	// Lost is closed when the lease behind the claim is gone (or the
	// claim was released).
	Lost() <-chan struct{}
	// Release gives the window up. When it fails (the store cannot be
	// reached) the implementation keeps releasing in the background,
	// so the window is not held for as long as the node lives.
	Release(ctx context.Context) error
}

// ClaimFloor is implemented by Claims whose tokens can be raised above
// a token the offset store holds (internal/coord/leases: an epoch kept in
// the claims store, in the token's high bits). A claims store that lost
// its history — a new cluster, or one restored from an older backup —
// would otherwise hand out tokens below the fences the offset store keeps,
// which Enter refuses for good. Claimed recovery calls RaiseAbove with the
// store's highest fence before its first claim, and with the fence that
// refused an entry.
type ClaimFloor interface {
	RaiseAbove(ctx context.Context, token uint64) error
}

// FencedStore is a CoverageStore that checks fencing tokens
// (OffsetStore): what FanoutOptions.Claims needs.
type FencedStore interface {
	CoverageStore
	// Enter registers a claim's token for its window, refusing
	// (ErrFenced) when a higher one is registered; durable on return.
	Enter(ctx context.Context, f Fence) error
	// CoverFenced records [lo, hi) for the sink, durably, while f is
	// its window's current token; ErrFenced otherwise.
	CoverFenced(ctx context.Context, sinkName string, lo, hi uint64, f Fence) error
	// MaxFence is the highest token registered for any window, as the
	// store was last read.
	MaxFence() uint64
}

var _ FencedStore = (*OffsetStore)(nil)

// DefaultClaimPositions is the size, in raw positions, of a claimable
// recovery window (FanoutOptions.ClaimPositions).
const DefaultClaimPositions = 65536

// WindowKey is the key of window k of the sink's claimable recovery
// windows, [k*size, (k+1)*size): "<sink>/<k>". The same key names the
// claim and the window's fence in the offset store.
func WindowKey(sinkName string, k uint64) string {
	return sinkName + "/" + strconv.FormatUint(k, 10)
}

// gapCells yields, in order, every window k of the grid of size whose
// positions [k*size, (k+1)*size) hold a gap of s below end.
func (s *SpanSet) gapCells(end, size uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		next := uint64(0) // the first window not yielded yet
		for _, g := range s.Gaps(end) {
			first := max(next, g.Lo/size)
			for k := first; k <= (g.Hi-1)/size; k++ {
				if !yield(k) {
					return
				}
			}
			next = (g.Hi-1)/size + 1
		}
	}
}
