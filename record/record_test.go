package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/sink"
	"pgregory.net/rapid"
)

func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m Meta
		if rapid.Bool().Draw(t, "hasID") {
			copy(m.ID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "id"))
			m.HasID = true
		}
		m.Source = rapid.String().Draw(t, "source")
		if rapid.Bool().Draw(t, "hasKey") {
			m.Key = rapid.SliceOf(rapid.Byte()).Draw(t, "key")
			if m.Key == nil {
				m.Key = []byte{}
			}
		}
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "headers"); i < n; i++ {
			v := rapid.SliceOf(rapid.Byte()).Draw(t, "hv")
			if len(v) == 0 {
				v = nil // decodes as an empty value; compare as nil
			}
			m.Headers = append(m.Headers, sink.Header{Key: rapid.String().Draw(t, "hk"), Value: v})
		}
		m.EventTime = rapid.Int64().Draw(t, "event")
		if rapid.Bool().Draw(t, "producer") {
			copy(m.Producer[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "pid"))
			m.Seq = rapid.Uint64().Draw(t, "seq")
			m.HasProducer = true
		}
		m.OriginPos = rapid.String().Draw(t, "pos")
		if rapid.Bool().Draw(t, "reject") {
			m.Reject = &Rejection{
				Code:      Code(rapid.IntRange(0, 6).Draw(t, "code")),
				Stage:     Stage(rapid.String().Draw(t, "stage")),
				Component: rapid.String().Draw(t, "comp"),
				Error:     rapid.StringN(0, 100, 100).Draw(t, "err"),
				Attempts:  rapid.IntRange(0, 1000).Draw(t, "attempts"),
				FirstSeen: rapid.Int64().Draw(t, "first"),
			}
			if rapid.Bool().Draw(t, "loc") {
				m.Reject.Shard, m.Reject.Seq, m.Reject.Index = 3, 9, 27
				m.Reject.HasLocation = true
			}
		}
		got, err := Decode(Encode(&m), LegacyOrigin)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		for i := range got.Headers {
			if len(got.Headers[i].Value) == 0 {
				got.Headers[i].Value = nil
			}
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
	})
}

func TestUnknownTagSkipped(t *testing.T) {
	m := Meta{Source: "kafka:orders", Key: []byte("k")}
	b := Encode(&m)
	// A field of a tag from the future, between two known ones.
	b = append(b[:1], append(appendField(nil, 99, []byte("later")), b[1:]...)...)
	got, err := Decode(b, LegacyOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if got.Source != m.Source || !bytes.Equal(got.Key, m.Key) {
		t.Fatalf("got %+v", got)
	}
}

// An idempotent producer's record is written with tag 9 (producer id and
// uvarint sequence, 20 bytes for a small sequence number); the tags 6 and
// 7 that earlier builds wrote still read.
func TestProducerForms(t *testing.T) {
	p := ProducerID{1, 2, 3}
	for _, seq := range []uint64{0, 127, 128, 1 << 20, 1<<64 - 1} {
		m := Meta{Producer: p, Seq: seq, HasProducer: true, EventTime: 9}
		b := Encode(&m)
		if want := 1 + 10 + ProducerFieldSize(seq); len(b) != want {
			t.Errorf("seq %d: %d bytes, want %d", seq, len(b), want)
		}
		old := appendU64(appendField(appendU64([]byte{Version}, TagEventTime, 9), TagProducerID, p[:]), TagProducerSeq, seq)
		for _, enc := range [][]byte{b, old} {
			got, err := Decode(enc, LegacyOrigin)
			if err != nil || !reflect.DeepEqual(got, m) {
				t.Fatalf("decode %x: %+v, %v; want %+v", enc, got, err, m)
			}
		}
	}
	if n := ProducerFieldSize(1000); n != 20 {
		t.Errorf("producer field of seq 1000: %d bytes, want 20", n)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"unknown version", []byte{3}},
		{"length past the end", []byte{Version, byte(TagSource), 5, 'a'}},
		{"short id", []byte{Version, byte(TagID), 2, 1, 2}},
		{"long event time", append([]byte{Version, byte(TagEventTime), 9}, make([]byte, 9)...)},
		{"bad header key length", []byte{Version, byte(TagHeader), 2, 9, 'a'}},
		{"truncated tag", []byte{Version, 0x80}},
		{"producer without a sequence", append([]byte{Version, byte(TagProducer), 16}, make([]byte, 16)...)},
		{"producer with bytes after its sequence", append(append([]byte{Version, byte(TagProducer), 19}, make([]byte, 16)...), 0x81, 1, 0)},
		{"producer with a truncated sequence", append(append([]byte{Version, byte(TagProducer), 17}, make([]byte, 16)...), 0x80)},
		{"v1 origin with a wrong name length", []byte{1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5, 'a'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.b, LegacyOrigin); !errors.Is(err, ErrBadMeta) {
				t.Fatalf("err = %v, want ErrBadMeta", err)
			}
		})
	}
}

// Fields hands over every field in order, values capped at their end,
// stops at fn's first error and returns it unchanged, and refuses bytes
// that are not a version-2 encoding.
func TestFields(t *testing.T) {
	b := Encode(&Meta{Source: "s", Key: []byte("k"), Headers: []sink.Header{{Key: "h", Value: []byte("v")}}})
	b = append(b, appendField(nil, 99, []byte("later"))...)
	type field struct {
		t   Tag
		v   string
		cap int
	}
	var got []field
	if err := Fields(b, func(tag Tag, v []byte) error {
		got = append(got, field{tag, string(v), cap(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []field{{TagSource, "s", 1}, {TagKey, "k", 1}, {TagHeader, "\x01hv", 3}, {99, "later", 5}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fields %+v, want %+v", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := Fields(b, func(Tag, []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error: got %v after %d calls", err, n)
	}
	for _, bad := range [][]byte{nil, {1}, {Version, byte(TagSource), 5, 'a'}, {Version, 0x80}} {
		if err := Fields(bad, func(Tag, []byte) error { return nil }); !errors.Is(err, ErrBadMeta) {
			t.Errorf("Fields(%x) = %v, want ErrBadMeta", bad, err)
		}
	}
}

func TestLegacy(t *testing.T) {
	id := sink.RecordID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	origin := append([]byte{1}, id[:]...)
	origin = append(origin, 5)
	origin = append(origin, "kafka"...)
	m, err := Decode(origin, LegacyOrigin)
	if err != nil || !m.HasID || m.ID != id || m.Source != "kafka" {
		t.Fatalf("v1 origin: %+v %v", m, err)
	}

	dl := append([]byte{1}, id[:]...)
	dl = append(dl, 0, 3)                    // shard
	dl = append(dl, 0, 0, 0, 0, 0, 0, 0, 9)  // seq
	dl = append(dl, 0, 0, 0, 0, 0, 0, 0, 27) // index
	dl = append(dl, 6)                       // reason length
	dl = append(dl, "broken"...)
	m, err = Decode(dl, LegacyDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	want := &Rejection{Code: CodeUnknown, Error: "broken", Shard: 3, Seq: 9, Index: 27, HasLocation: true}
	if m.ID != id || !reflect.DeepEqual(m.Reject, want) {
		t.Fatalf("v1 dead letter: %+v %+v", m, m.Reject)
	}
}

func TestRecordID(t *testing.T) {
	fallback := sink.RecordID{0xff}
	fb := func() sink.RecordID { return fallback }
	var p ProducerID
	p[0] = 7
	pay := []byte("payload")
	for _, tc := range []struct {
		name string
		m    Meta
		at   int64
		want sink.RecordID
	}{
		{"none", Meta{}, 0, fallback},
		{"producer", Meta{Producer: p, Seq: 5, HasProducer: true}, 0, ProducerRecordID(p, 5, pay)},
		{"id wins", Meta{ID: sink.RecordID{1}, HasID: true, Producer: p, HasProducer: true}, 0, sink.RecordID{1}},
		{"none, timed", Meta{}, 5e6, TimeOrdered(fallback, 5e6)},
		{"producer without event time: ms 0, not the receive time", Meta{Producer: p, Seq: 5, HasProducer: true}, 5e6, TimeOrdered(ProducerRecordID(p, 5, pay), 0)},
		{"producer, timed by event", Meta{Producer: p, Seq: 5, HasProducer: true, EventTime: 9e6}, 5e6, TimeOrdered(ProducerRecordID(p, 5, pay), 9e6)},
		{"position, timed by event", Meta{EventTime: 9e6}, 5e6, TimeOrdered(fallback, 9e6)},
		{"id wins, timed", Meta{ID: sink.RecordID{1}, HasID: true, EventTime: 9e6}, 5e6, sink.RecordID{1}},
	} {
		if got := tc.m.RecordID(pay, Derivation{ByPosition: fb, TimeOrdered: tc.at != 0, Received: tc.at}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A resend of an idempotent producer's record reaches the buffer at
	// another time: without an event time of its own, its id must still
	// be the first copy's.
	resend := Meta{Producer: p, Seq: 5, HasProducer: true}
	if first, again := resend.RecordID(pay, Derivation{ByPosition: fb, TimeOrdered: true, Received: 5e6}), resend.RecordID(pay, Derivation{ByPosition: fb, TimeOrdered: true, Received: 7e9}); first != again {
		t.Fatalf("a producer record received again later gets id %v, first copy %v", again, first)
	}
	if ProducerRecordID(p, 5, pay) == ProducerRecordID(p, 6, pay) {
		t.Fatal("seq does not change the id")
	}
	if ProducerRecordID(p, 5, pay) != ProducerRecordID(p, 5, append([]byte(nil), pay...)) {
		t.Fatal("producer id not deterministic")
	}
	// The derivation docs/wire_protocol.md specifies, which resends across
	// daemon versions rely on: pinned by a computed and a fixed vector.
	for _, pl := range [][]byte{nil, pay, make([]byte, 300)} {
		seq := uint64(1)<<40 + 3
		in := append([]byte("producer"), p[:]...)
		in = binary.BigEndian.AppendUint64(in, seq)
		sum := sha256.Sum256(append(in, pl...))
		if got := ProducerRecordID(p, seq, pl); got != sink.RecordID(sum[:16]) {
			t.Fatalf("ProducerRecordID(%d-byte payload) = %v, want %x", len(pl), got, sum[:16])
		}
	}
	if got, want := ProducerRecordID(ProducerID{1, 2, 3}, 1000, []byte("hello")).String(), "e710c2ca7456692d1b77937b690f83aa"; got != want {
		t.Fatalf("ProducerRecordID of the documented example = %s, want %s", got, want)
	}
}

func TestCodes(t *testing.T) {
	for _, c := range Codes() {
		got, err := ParseCode(c.String())
		if err != nil || got != c {
			t.Fatalf("%v: %v %v", c, got, err)
		}
	}
	if _, err := ParseCode("nope"); err == nil {
		t.Fatal("ParseCode accepted nope")
	}
	if MaxErrorBytes < 16 || len(truncateUTF8("ééé", 3)) != 2 {
		t.Fatal("truncateUTF8 cut inside a rune")
	}
}

// Deriving an id allocates nothing (the drain derives one per record).
func TestRecordIDAllocations(t *testing.T) {
	p, pay := ProducerID{1}, make([]byte, 256)
	if n := testing.AllocsPerRun(100, func() { ProducerRecordID(p, 7, pay) }); n != 0 {
		t.Errorf("ProducerRecordID: %.0f allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { HashID(pay, pay) }); n != 0 {
		t.Errorf("HashID: %.0f allocations", n)
	}
}

// TimeOrdered's layout, byte by byte (docs/architecture.md §Record ids).
func TestTimeOrderedLayout(t *testing.T) {
	h := sink.RecordID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x11, 0x22}
	at := time.Date(2026, 12, 3, 14, 0, 0, 123_456_789, time.UTC)
	got := TimeOrdered(h, at.UnixNano())
	ms := uint64(at.UnixMilli())
	want := sink.RecordID{byte(ms >> 40), byte(ms >> 32), byte(ms >> 24), byte(ms >> 16), byte(ms >> 8), byte(ms),
		0x7f, 0xff, 0xbf, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x11, 0x22}
	if got != want {
		t.Fatalf("TimeOrdered = %v, want %v", got, want)
	}
	if u := got.String(); u[12] != '7' || !strings.ContainsRune("89ab", rune(u[16])) {
		t.Fatalf("%s is not laid out as a UUIDv7", u)
	}
	if tt, ok := IDTime(got); !ok || !tt.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("IDTime = %v %v, want %v", tt, ok, at.Truncate(time.Millisecond))
	}
	for _, tc := range []struct {
		t    int64
		want uint64
	}{{0, 0}, {-5e9, 0}, {999_999, 0}, {1_000_000, 1}, {math.MaxInt64, uint64(math.MaxInt64) / 1_000_000}} {
		id := TimeOrdered(sink.RecordID{}, tc.t)
		var ts [8]byte
		copy(ts[2:], id[:6])
		if g := binary.BigEndian.Uint64(ts[:]); g != tc.want&maxIDMillis {
			t.Errorf("TimeOrdered at %d: ms %d, want %d", tc.t, g, tc.want&maxIDMillis)
		}
	}
	if _, ok := IDTime(sink.RecordID{}); ok {
		t.Fatal("IDTime took a zero id for a time-ordered one")
	}
}

// Property: the same hash at the same time gives the same id; ids of
// times in order sort in order whenever the milliseconds differ, whatever
// the hashes; two hashes that differ in the bits TimeOrdered keeps give
// different ids at the same time.
func TestTimeOrderedProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := sink.RecordID(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "a"))
		b := sink.RecordID(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "b"))
		ta := rapid.Int64Range(0, 1<<62).Draw(t, "ta")
		tb := rapid.Int64Range(0, 1<<62).Draw(t, "tb")
		ia, ib := TimeOrdered(a, ta), TimeOrdered(b, tb)
		if ia != TimeOrdered(a, ta) {
			t.Fatal("not deterministic")
		}
		ma, mb := ta/1e6, tb/1e6
		if c := bytes.Compare(ia[:], ib[:]); ma < mb && c >= 0 || ma > mb && c <= 0 {
			t.Fatalf("times %d < %d ms but ids %v, %v", ma, mb, ia, ib)
		}
		kept := func(id sink.RecordID) sink.RecordID {
			var k sink.RecordID
			copy(k[6:], id[6:])
			k[6] &= 0x0f
			k[8] &= 0x3f
			return k
		}
		if kept(a) != kept(b) && TimeOrdered(a, ta) == TimeOrdered(b, ta) {
			t.Fatal("different hashes, same id")
		}
	})
}
