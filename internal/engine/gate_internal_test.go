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

// BenchmarkGateMetas encodes the metas of a 1024-record Write of Kafka
// records: "v1-origin" is the version-1 origin (id and source name, one
// allocation per record) the gate wrote before record metadata, the
// baseline; "v2" is today's record.Meta with key, two headers, event time
// and origin position, into a recycled arena.
func BenchmarkGateMetas(b *testing.B) {
	recs := make([]source.Record, 1024)
	for i := range recs {
		recs[i] = source.Record{Source: "kafka:orders", Key: []byte("customer-1234"), OriginPos: "orders/3@123456",
			Headers: []sink.Header{{Key: "trace", Value: []byte("0af7651916cd43dd")}, {Key: "type", Value: []byte("created")}},
			Time:    time.Unix(1700000000, 0)}
	}
	b.Run("v1-origin", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			metas := make([][]byte, 0, len(recs))
			for i := range recs {
				r := &recs[i]
				m := make([]byte, 0, 18+len(r.Source))
				m = append(m, 1)
				m = append(m, r.ID[:]...)
				m = append(m, byte(len(r.Source)))
				metas = append(metas, append(m, r.Source...))
			}
			_ = metas
		}
	})
	b.Run("v2", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			metas := make([][]byte, 0, len(recs))
			a := getMetaArena(recs)
			buf := (*a)[:0]
			for i := range recs {
				m := metaOf(&recs[i])
				start := len(buf)
				buf = record.Append(buf, &m)
				metas = append(metas, buf[start:len(buf):len(buf)])
			}
			*a = buf
			putMetaArena(a)
			_ = metas
		}
	})
}
