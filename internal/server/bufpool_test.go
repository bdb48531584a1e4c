package server

import "testing"

func TestBufClasses(t *testing.T) {
	tests := []struct{ n, class, capacity int }{
		{0, 0, 256}, {1, 0, 256}, {256, 0, 256}, {257, 1, 320}, {287, 1, 320}, {320, 1, 320}, {321, 2, 384},
		{448, 3, 448}, {449, 4, 512}, {512, 4, 512}, {513, 5, 640}, {4096, 16, 4096}, {4097, 17, 5120},
		{56<<10 + 1, 32, 64 << 10}, {64 << 10, 32, 64 << 10}, {64<<10 + 1, -1, 64<<10 + 1},
	}
	for _, tt := range tests {
		if c := bufClass(tt.n); c != tt.class {
			t.Errorf("bufClass(%d) = %d, want %d", tt.n, c, tt.class)
		}
		f := getBuf(tt.n)
		if len(f.bytes()) != tt.n || cap(f.bytes()) != tt.capacity || f.class != tt.class {
			t.Errorf("getBuf(%d): len %d cap %d class %d", tt.n, len(f.bytes()), cap(f.bytes()), f.class)
		}
		f.put()
	}
}

// Every size up to the largest class falls in the smallest class that
// holds it, and no class wastes more than a quarter of its size.
func TestBufClassesTight(t *testing.T) {
	for n := 1; n <= 1<<maxBufShift; n++ {
		c := bufClass(n)
		if c < 0 || c >= numBufClasses || classSize(c) < n || c > 0 && classSize(c-1) >= n {
			t.Fatalf("bufClass(%d) = %d (size %d)", n, c, classSize(c))
		}
		if n > 1<<minBufShift && classSize(c) > n+n/4 {
			t.Fatalf("bufClass(%d): size %d wastes more than a quarter", n, classSize(c))
		}
	}
}

func TestBufReuseAllocatesNothing(t *testing.T) {
	getBuf(300).put()
	allocs := testing.AllocsPerRun(1000, func() {
		f := getBuf(300)
		f.bytes()[0] = 1
		f.put()
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per get and put", allocs)
	}
}
