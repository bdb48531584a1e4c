package flow

// PrefetchShare is the share of the budget all sources together may let
// their clients prefetch (fetch buffers, pull batches, read-ahead) before
// admission sees a record.
const PrefetchShare = 0.25

// MinPrefetch is the least prefetch a source is given, however small the
// budget: one fetch must still make progress.
const MinPrefetch = 64 << 10

// Prefetch is one source's prefetch bound in expanded (in-memory) bytes:
// PrefetchShare of limit split evenly among sources, at least MinPrefetch.
// A source whose transport counts compressed bytes divides it by the
// estimator's ratio (see Estimator.Ratio).
func Prefetch(limit int64, sources int) int64 {
	return max(int64(float64(limit)*PrefetchShare)/int64(max(sources, 1)), MinPrefetch)
}
