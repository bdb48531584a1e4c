package source

import "testing"

func TestIDSeparatesParts(t *testing.T) {
	if ID([]byte("ab"), []byte("c")) == ID([]byte("a"), []byte("bc")) {
		t.Fatal("ID does not separate its parts")
	}
	if ID([]byte("a"), Uint64(1)) != ID([]byte("a"), Uint64(1)) {
		t.Fatal("ID is not deterministic")
	}
}
