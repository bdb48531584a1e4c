package server

import "testing"

func TestBufClasses(t *testing.T) {
	tests := []struct{ n, class, capacity int }{
		{0, 0, 256}, {1, 0, 256}, {256, 0, 256}, {257, 1, 512}, {512, 1, 512},
		{4096, 4, 4096}, {4097, 5, 8192}, {64 << 10, 8, 64 << 10}, {64<<10 + 1, -1, 64<<10 + 1},
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
