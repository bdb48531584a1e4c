package dedup

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/weir-io/weir/sink"
)

// Defaults of MemoryOptions and RedisOptions.
const (
	// DefaultWindow is how long a claim is held when no window is set:
	// minutes, the scale of a producer's retry interval.
	DefaultWindow = 10 * time.Minute
	// DefaultMaxBytes bounds an in-process store when no bound is set.
	DefaultMaxBytes = 64 << 20
)

// MemoryEntryBytes is the heap one held key takes in a Memory store that
// is full and churning (evicting a key for every claim): its 64-byte slot
// (key, record id, expiry, list links) and its share of the index, 8 to 16
// bytes as the index's load lies between one quarter and one half. Held
// reports keys × MemoryEntryBytes, and a store holds at most
// MaxBytes / MemoryEntryBytes keys. It is the worst case, an index just
// grown; a store whose bound lands just under a power of two of keys
// takes about 72 bytes a key.
//
// Measured by TestMemoryBytesPerKey (runtime.ReadMemStats over stores of
// 2^19+1 and 2^20 keys, each claimed with twice as many distinct keys;
// Go 1.26, amd64), which fails if a measured figure exceeds this constant:
//
//	go test -run TestMemoryBytesPerKey -v ./internal/dedup/
const MemoryEntryBytes = 80

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	// MaxBytes bounds the store's heap, counted as MemoryEntryBytes per
	// key; the least recently claimed key is evicted to stay under it.
	// Zero or less means DefaultMaxBytes.
	MaxBytes int64
	// Window is how long a claim is held; zero or less means
	// DefaultWindow.
	Window time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Memory is an exact in-process seen-set: an index from key to a slot in
// an array of slots that form one doubly linked list in claim order, newest
// first. A key's window runs from its claim, and an answer other than Claimed
// neither renews the window nor moves the key (as on Redis, where SET NX
// leaves a held key alone), so the list's tail is at once the least
// recently claimed key and the first to expire: eviction by bytes and
// expiry both take from the tail. Safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	index  index
	slots  []slot
	head   int32 // newest claim, or none
	tail   int32 // oldest claim, or none
	free   int32 // free slots, chained through next
	max    int   // keys held at most
	window time.Duration
	now    func() time.Time
	base   time.Time // expiries are offsets from it (monotonic)
}

// none marks the end of a slot chain.
const none = -1

type slot struct {
	key        Key
	id         sink.RecordID
	expires    time.Duration // since Memory.base
	prev, next int32
}

// NewMemory returns an empty in-process store.
func NewMemory(o MemoryOptions) *Memory {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	limit := o.MaxBytes / MemoryEntryBytes
	if limit > 1<<31-1 {
		limit = 1<<31 - 1
	}
	return &Memory{
		index:  newIndex(),
		head:   none,
		tail:   none,
		free:   none,
		max:    int(limit),
		window: o.Window,
		now:    o.Now,
		base:   o.Now(),
	}
}

// Claim answers each claim and claims each unheld key for the window. A
// held key whose window has passed reads as not held: it is Claimed again,
// for the asking id. Claim fails only when out is shorter than claims.
func (m *Memory) Claim(_ context.Context, claims []Claim, out []Answer) error {
	if len(out) < len(claims) {
		return fmt.Errorf("dedup: memory claim: %d answers for %d claims", len(out), len(claims))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().Sub(m.base)
	m.sweep(now, 2*len(claims)+64)
	for i, c := range claims {
		if s, cell := m.index.find(m.slots, &c.Key); s != none {
			if e := &m.slots[s]; e.expires > now {
				out[i] = Duplicate
				if e.id == c.ID {
					out[i] = Redelivery
				}
				continue
			}
			m.unlink(s, cell)
		}
		out[i] = Claimed
		m.insert(c, now+m.window)
	}
	return nil
}

// Held reports the keys held and MemoryEntryBytes for each. Keys whose
// window has passed count until they are reclaimed: each Claim reclaims
// expired keys, at least two for each of its claims.
func (m *Memory) Held() (keys, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(m.index.n)
	return n, n * MemoryEntryBytes
}

// Close releases nothing: the store is garbage once unreferenced.
func (m *Memory) Close() error { return nil }

// sweep reclaims at most limit expired keys from the tail.
func (m *Memory) sweep(now time.Duration, limit int) {
	for ; limit > 0 && m.tail != none && m.slots[m.tail].expires <= now; limit-- {
		m.remove(m.tail)
	}
}

// insert claims c at the head, evicting from the tail to stay in bounds.
func (m *Memory) insert(c Claim, expires time.Duration) {
	if m.max == 0 {
		return
	}
	for m.index.n >= m.max {
		m.remove(m.tail)
	}
	s := m.alloc()
	m.slots[s] = slot{key: c.Key, id: c.ID, expires: expires, prev: none, next: m.head}
	if m.head != none {
		m.slots[m.head].prev = s
	} else {
		m.tail = s
	}
	m.head = s
	m.index.add(m.slots, s)
}

// remove drops slot s's key and frees the slot.
func (m *Memory) remove(s int32) {
	_, cell := m.index.find(m.slots, &m.slots[s].key)
	m.unlink(s, cell)
}

// unlink drops slot s, filed in index cell cell, and frees the slot.
func (m *Memory) unlink(s int32, cell int) {
	m.index.del(m.slots, cell)
	e := &m.slots[s]
	if e.prev != none {
		m.slots[e.prev].next = e.next
	} else {
		m.head = e.next
	}
	if e.next != none {
		m.slots[e.next].prev = e.prev
	} else {
		m.tail = e.prev
	}
	*e = slot{next: m.free}
	m.free = s
}

// alloc takes a free slot, growing the array (never past m.max) when
// none is free.
func (m *Memory) alloc() int32 {
	if m.free != none {
		s := m.free
		m.free = m.slots[s].next
		return s
	}
	if len(m.slots) == cap(m.slots) {
		grown := make([]slot, len(m.slots), min(max(2*cap(m.slots), 256), m.max))
		copy(grown, m.slots)
		m.slots = grown
	}
	m.slots = m.slots[:len(m.slots)+1]
	return int32(len(m.slots) - 1)
}
