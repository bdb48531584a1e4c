package engine

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/source"
)

// TestMetaSizeBound: the arena Write encodes metas into is sized by
// metaSizeBound, which must bound every encoding, or the arena moves (an
// allocation per Write) while earlier metas point into the old one.
func TestMetaSizeBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := source.Record{
			Source:    rapid.StringN(0, 300, 300).Draw(t, "source"),
			OriginPos: rapid.StringN(0, 300, 300).Draw(t, "pos"),
			Key:       rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "key"),
		}
		if rapid.Bool().Draw(t, "time") {
			r.Time = time.Unix(0, rapid.Int64().Draw(t, "ns"))
		}
		for i, n := 0, rapid.IntRange(0, 5).Draw(t, "headers"); i < n; i++ {
			r.Headers = append(r.Headers, sink.Header{
				Key:   rapid.StringN(0, 200, 200).Draw(t, "hk"),
				Value: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "hv"),
			})
		}
		m := metaOf(&r)
		if n, bound := len(record.Append(nil, &m)), metaSizeBound(&r); n > bound {
			t.Fatalf("meta of %d bytes, bound %d", n, bound)
		}
	})
}

// TestGateMetaEncodingAllocates: encoding the metas of a Write into a
// recycled arena allocates nothing per record.
func TestGateMetaEncodingAllocates(t *testing.T) {
	recs := make([]source.Record, 256)
	for i := range recs {
		recs[i] = source.Record{Source: "kafka:orders", Key: []byte("key"), OriginPos: "orders/3@1234",
			Headers: []sink.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}, Time: time.Unix(1, 2)}
	}
	allocs := testing.AllocsPerRun(50, func() {
		a := getMetaArena(recs)
		buf := (*a)[:0]
		for i := range recs {
			m := metaOf(&recs[i])
			buf = record.Append(buf, &m)
		}
		*a = buf
		putMetaArena(a)
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per Write's metas, want at most 1", allocs)
	}
}
