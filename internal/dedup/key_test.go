package dedup

import (
	"crypto/sha256"
	"testing"
)

func TestKeyOf(t *testing.T) {
	// The encoding is shared by every daemon on one Redis: pin it.
	want := sha256.Sum256([]byte("\x00\x00\x00\x00\x00\x00\x00\x06orders\x00\x00\x00\x00\x00\x00\x00\x02k1"))
	if got := KeyOf("orders", []byte("k1")); got != want {
		t.Fatalf("KeyOf(orders, k1) = %x, want %x", got, want)
	}
	distinct := [][2]string{
		{"ab", "c"}, {"a", "bc"}, {"", "abc"}, {"abc", ""}, {"orders", "k1"}, {"payments", "k1"},
	}
	seen := map[Key][2]string{}
	for _, d := range distinct {
		k := KeyOf(d[0], []byte(d[1]))
		if prev, ok := seen[k]; ok {
			t.Fatalf("KeyOf%q == KeyOf%q", d, prev)
		}
		seen[k] = d
	}
}
