//go:build dst

package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// errDead is what a call of a dead incarnation gets: the process is gone.
var errDead = errors.New("sim: the process is dead")

// broker is the simulated origin: partitions of records, fixed at the
// start, and a committed position per partition. Everything past a
// committed position is delivered again to the next consumer.
type broker struct {
	mu        sync.Mutex
	parts     [][]source.Record
	visible   []int // records produced so far, per partition
	committed []int
}

func newBroker(rng *rand.Rand, partitions, records, poisonPct, maxPayload int) *broker {
	b := &broker{parts: make([][]source.Record, partitions), committed: make([]int, partitions), visible: make([]int, partitions)}
	for i := range records {
		p := i % partitions
		off := len(b.parts[p])
		mark := "clean"
		if rng.IntN(100) < poisonPct {
			mark = "poison"
		}
		payload := fmt.Sprintf(`{"p":%d,"o":%d,"m":%q,"pad":%q}`, p, off, mark, strings.Repeat("x", rng.IntN(maxPayload+1)))
		pos := fmt.Sprintf("t/%d@%d", p, off)
		b.parts[p] = append(b.parts[p], source.Record{
			ID:        source.ID([]byte("sim"), []byte(pos)),
			Payload:   []byte(payload),
			Source:    "sim",
			OriginPos: pos,
		})
	}
	return b
}

func poison(payload []byte) bool { return strings.Contains(string(payload), `"m":"poison"`) }

// fetch returns up to n records of partition p from position from.
func (b *broker) fetch(p, from, n int) []source.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parts[p][min(from, b.visible[p]):min(from+n, b.visible[p])]
}

// produce makes up to n more records of partition p visible; false when
// every record has been produced.
func (b *broker) produce(p, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.visible[p] = min(b.visible[p]+n, len(b.parts[p]))
	for q := range b.parts {
		if b.visible[q] < len(b.parts[q]) {
			return true
		}
	}
	return false
}

func (b *broker) position(p int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.committed[p]
}

func (b *broker) commit(p, pos int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.committed[p] = max(b.committed[p], pos)
}

// acked is every record below a committed position.
func (b *broker) acked() []source.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []source.Record
	for p, recs := range b.parts {
		out = append(out, recs[:b.committed[p]]...)
	}
	return out
}

func (b *broker) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, recs := range b.parts {
		if b.committed[p] < len(recs) {
			return false
		}
	}
	return true
}

// sinkFaults is a secondary's fault schedule, in percent of its commits.
type sinkFaults struct {
	Transient int `json:"transient,omitempty"` // fails whole, retryably
	Slow      int `json:"slow,omitempty"`      // takes 30 ms of simulated time
	Hang      int `json:"hang,omitempty"`      // takes 2 s, or until cancelled
	// Poison: records marked poison are refused (sink-refused), the
	// others of the batch committed: a partial rejection.
	Poison bool `json:"poison,omitempty"`
	// Applied: the chance that a commit in flight when the process died
	// reached the sink anyway.
	Applied int `json:"applied,omitempty"`
}

// simSink is a secondary: what it holds outlives every incarnation of
// the node (it is the world outside).
type simSink struct {
	name string
	s    *sched
	rng  *rand.Rand // decisions of the commits, in the order the scheduler releases them

	mu      sync.Mutex
	faults  sinkFaults
	held    map[sink.RecordID]int  // commits of each id
	failed  map[sink.RecordID]bool // in a commit that failed (for a sink that gives up)
	refused map[int]map[sink.RecordID]bool
	commits int
}

func newSimSink(name string, s *sched, seed uint64, f sinkFaults) *simSink {
	return &simSink{name: name, s: s, rng: rand.New(rand.NewPCG(seed, 0x5151)), faults: f,
		held: map[sink.RecordID]int{}, failed: map[sink.RecordID]bool{}, refused: map[int]map[sink.RecordID]bool{}}
}

// calm turns the faults off (the run settles).
func (k *simSink) calm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.faults = sinkFaults{Poison: k.faults.Poison}
}

func (k *simSink) failedAll(b sink.Batch) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range b.Records {
		k.failed[r.ID] = true
	}
}

// tookOrGaveUp: the sink holds id, or (when given up on after its
// attempts, giveUp) failed it at least once.
func (k *simSink) tookOrGaveUp(id sink.RecordID, giveUp bool) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[id] > 0 || giveUp && k.failed[id]
}

func (k *simSink) holds(id sink.RecordID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[id] > 0
}

// view is the sink as incarnation inc sees it.
func (k *simSink) view(inc int) sink.Sink { return &sinkView{k: k, inc: inc} }

type sinkView struct {
	k   *simSink
	inc int
}

func (v *sinkView) Name() string      { return v.k.name }
func (v *sinkView) MaxBatchSize() int { return 32 }
func (v *sinkView) Close() error      { return nil }
func (v *sinkView) Health(context.Context) sink.Health {
	return sink.Health{State: sink.Healthy}
}

func (v *sinkView) Commit(ctx context.Context, b sink.Batch) (sink.CommitResult, error) {
	k := v.k
	if !k.s.yield(v.inc, "sink/"+k.name) {
		return sink.CommitResult{}, sink.Transient(errDead)
	}
	k.mu.Lock()
	f, roll := k.faults, k.rng.IntN(100)
	k.mu.Unlock()
	var wait time.Duration
	switch {
	case roll < f.Transient:
		k.failedAll(b)
		return sink.CommitResult{}, sink.Transient(errors.New("sim: the sink is unavailable"))
	case roll < f.Transient+f.Slow:
		wait = 30 * time.Millisecond
	case roll < f.Transient+f.Slow+f.Hang:
		wait = 2 * time.Second
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			k.failedAll(b)
			return sink.CommitResult{}, sink.Transient(ctx.Err())
		case <-t.C:
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.s.alive(v.inc) && k.rng.IntN(100) >= f.Applied {
		return sink.CommitResult{}, sink.Transient(errDead)
	}
	k.commits++
	var res sink.CommitResult
	for i, r := range b.Records {
		if f.Poison && poison(r.Payload) {
			res.Rejected = append(res.Rejected, sink.Rejection{Index: i, Code: sink.CodeSinkRefused, Reason: "sim: poison"})
			if k.refused[v.inc] == nil {
				k.refused[v.inc] = map[sink.RecordID]bool{}
			}
			k.refused[v.inc][r.ID] = true
			continue
		}
		k.held[r.ID]++
	}
	return res, nil
}

// simLane is a secondary's quarantine lane: it keeps the records it
// took, and stalls (takes nothing) while told to.
type simLane struct {
	name string
	s    *sched

	mu      sync.Mutex
	stalled bool
	kept    map[sink.RecordID]record.Code
}

func newSimLane(name string, s *sched, stalled bool) *simLane {
	return &simLane{name: name, s: s, stalled: stalled, kept: map[sink.RecordID]record.Code{}}
}

func (l *simLane) view(inc int) lane.Lane {
	return lane.Func(func(ctx context.Context, recs []lane.Rejected) error {
		if !l.s.yield(inc, "lane/"+l.name) {
			return errDead
		}
		for l.isStalled() { // a stalled lane answers nothing
			if sleep(ctx, 10*time.Millisecond); ctx.Err() != nil {
				return ctx.Err()
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, r := range recs {
			l.kept[r.Record.ID] = r.Reject.Code
		}
		return nil
	})
}

func (l *simLane) isStalled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stalled
}

func (l *simLane) has(id sink.RecordID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.kept[id]
	return ok
}

// simClaims is the claims store of leased recovery windows: a window is
// held by one claim at a time, each claim's token above every earlier
// one's. While partitioned it answers nothing but errors.
type simClaims struct {
	s *sched

	mu          sync.Mutex
	tokens      map[string]uint64
	held        map[string]*simClaim
	partitioned bool
}

type simClaim struct {
	c    *simClaims
	key  string
	tok  uint64
	lost chan struct{}
	once sync.Once
}

func newSimClaims(s *sched) *simClaims {
	return &simClaims{s: s, tokens: map[string]uint64{}, held: map[string]*simClaim{}}
}

var errPartitioned = errors.New("sim: the claims store cannot be reached")

func (c *simClaims) view(inc int) engine.Claims { return &claimsView{c: c, inc: inc} }

type claimsView struct {
	c   *simClaims
	inc int
}

func (v *claimsView) Claim(ctx context.Context, window string) (engine.Claim, bool, error) {
	if !v.c.s.yield(v.inc, "claims/claim/"+window) {
		return nil, false, errDead
	}
	c := v.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.partitioned {
		return nil, false, errPartitioned
	}
	if _, ok := c.held[window]; ok {
		return nil, false, nil
	}
	c.tokens[window]++
	cl := &simClaim{c: c, key: window, tok: c.tokens[window], lost: make(chan struct{})}
	c.held[window] = cl
	return cl, true, nil
}

func (v *claimsView) Held(ctx context.Context, prefix string) (map[string]bool, error) {
	if !v.c.s.yield(v.inc, "claims/held/"+prefix+engineCaller()) {
		return nil, errDead
	}
	c := v.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.partitioned {
		return nil, errPartitioned
	}
	out := map[string]bool{}
	for k := range c.held {
		if strings.HasPrefix(k, prefix) {
			out[k] = true
		}
	}
	return out, nil
}

// engineCaller names the engine function that made the call: two
// goroutines ask for the same windows (a worker before it claims, the
// coverage flusher for its report), and the label must tell them apart.
func engineCaller() string {
	pc := make([]uintptr, 16)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	for {
		f, more := frames.Next()
		if i := strings.Index(f.Function, "/internal/engine."); i >= 0 {
			return f.Function[i+len("/internal/engine."):]
		}
		if !more {
			return ""
		}
	}
}

func (cl *simClaim) Token() uint64         { return cl.tok }
func (cl *simClaim) Lost() <-chan struct{} { return cl.lost }

func (cl *simClaim) Release(context.Context) error {
	cl.c.mu.Lock()
	defer cl.c.mu.Unlock()
	cl.drop()
	return nil
}

// drop ends the claim; callers hold c.mu.
func (cl *simClaim) drop() {
	if cl.c.held[cl.key] == cl {
		delete(cl.c.held, cl.key)
	}
	cl.once.Do(func() { close(cl.lost) })
}

// expire ends every claim of a dead incarnation's leases — all of them:
// the sim runs one node, and its leases die with it.
func (c *simClaims) expireAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.held {
		cl.drop()
	}
}

// steal takes the held window at rank i (in key order) away from its
// holder, as a lease expiring and another node claiming it would: a
// higher token, entered into the offset store's fences by the thief,
// then released. It returns the fence to enter, or false if none is held.
func (c *simClaims) steal(i int) (engine.Fence, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) == 0 {
		return engine.Fence{}, false
	}
	keys := make([]string, 0, len(c.held))
	for k := range c.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cl := c.held[keys[i%len(keys)]]
	cl.drop()
	c.tokens[cl.key]++
	return engine.Fence{Window: cl.key, Token: c.tokens[cl.key]}, true
}

func (c *simClaims) partition(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partitioned = on
}
