package dedup

import "hash/maphash"

// index is an open-addressing hash set (linear probing, backward-shift
// deletion) of slot numbers, keyed by the key stored in each slot. It takes
// 4 bytes a cell at a load of at most one half — 8 to 16 bytes a key — where
// a map[Key]int32 takes 37 bytes a cell, 42 to 85 a key.
//
// A lookup compares the whole 32-byte key stored in the slot, so no flaw in
// probing can make one key answer for another: the worst it could do is
// miss a held key, a false negative.
type index struct {
	cells []int32 // slot number + 1; 0 is empty
	n     int
	seed  maphash.Seed
}

func newIndex() index { return index{seed: maphash.MakeSeed()} }

func (x *index) home(k *Key) int {
	return int(maphash.Comparable(x.seed, *k)) & (len(x.cells) - 1)
}

// find returns the slot holding k and its cell, or (none, -1).
func (x *index) find(slots []slot, k *Key) (s int32, cell int) {
	if x.n == 0 {
		return none, -1
	}
	mask := len(x.cells) - 1
	for i := x.home(k); ; i = (i + 1) & mask {
		v := x.cells[i]
		if v == 0 {
			return none, -1
		}
		if slots[v-1].key == *k {
			return v - 1, i
		}
	}
}

// add files slot s, whose key is not in the index.
func (x *index) add(slots []slot, s int32) {
	if 2*(x.n+1) > len(x.cells) {
		x.grow(slots)
	}
	x.put(&slots[s].key, s)
	x.n++
}

func (x *index) put(k *Key, s int32) {
	mask := len(x.cells) - 1
	i := x.home(k)
	for x.cells[i] != 0 {
		i = (i + 1) & mask
	}
	x.cells[i] = s + 1
}

// grow doubles the cells and files every slot again.
func (x *index) grow(slots []slot) {
	old := x.cells
	x.cells = make([]int32, max(2*len(old), 64))
	for _, v := range old {
		if v != 0 {
			x.put(&slots[v-1].key, v-1)
		}
	}
}

// del empties cell i, shifting back the cells after it whose probe
// sequence passed through it so that every key stays reachable.
func (x *index) del(slots []slot, i int) {
	mask := len(x.cells) - 1
	for j := (i + 1) & mask; x.cells[j] != 0; j = (j + 1) & mask {
		h := x.home(&slots[x.cells[j]-1].key)
		// The key at j may fill i unless its home lies cyclically in (i, j].
		if (i < j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			x.cells[i] = x.cells[j]
			i = j
		}
	}
	x.cells[i] = 0
	x.n--
}
