package source

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestOriginRoundTrip(t *testing.T) {
	for _, o := range []Origin{
		{ID: ID([]byte("c"), []byte("t"), Uint64(3), []byte("p")), Source: "kafka:orders"},
		{Source: ""},
		{Source: strings.Repeat("x", 300)},
	} {
		got, err := DecodeOrigin(EncodeOrigin(o))
		if err != nil {
			t.Fatal(err)
		}
		want := o
		if len(want.Source) > MaxSourceName {
			want.Source = want.Source[:MaxSourceName]
		}
		if got != want {
			t.Fatalf("round trip: got %+v want %+v", got, want)
		}
	}
	for _, bad := range [][]byte{nil, {1}, bytes.Repeat([]byte{2}, 18), append(EncodeOrigin(Origin{Source: "a"}), 'x')} {
		if _, err := DecodeOrigin(bad); !errors.Is(err, ErrBadOrigin) {
			t.Errorf("DecodeOrigin(%x) = %v, want ErrBadOrigin", bad, err)
		}
	}
}

func TestIDSeparatesParts(t *testing.T) {
	if ID([]byte("ab"), []byte("c")) == ID([]byte("a"), []byte("bc")) {
		t.Fatal("ID does not separate its parts")
	}
	if ID([]byte("a"), Uint64(1)) != ID([]byte("a"), Uint64(1)) {
		t.Fatal("ID is not deterministic")
	}
}
