package pgsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weir-io/weir/sink"
)

// copyEdgeRecords are records at the edges of every column copyReader
// encodes: empty and JSON payloads, no key, an empty key, a key with a NUL,
// headers with repeats and binary values, no event time, event and receive
// times with nanoseconds (cut to microseconds), before 2000 (a negative
// PostgreSQL timestamp) and far ahead, non-ASCII sources, both durability
// tiers.
func copyEdgeRecords(n int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		r := &out[i]
		copy(r.ID[:], fmt.Sprintf("cb%014d", i))
		r.Payload = fmt.Appendf(nil, `{"n":%d,"s":"é\u00e9"}`, i)
		r.Source = []string{"socket", "kafka:ördërs", ""}[i%3]
		r.Durability = sink.Durability(i % 2)
		r.Received = time.Date(2026, 12, 3, 14, 0, 0, i*1_234_567+999, time.UTC)
		switch i % 5 {
		case 0:
			r.Key = nil
		case 1:
			r.Key = []byte{}
		case 2:
			r.Key = []byte{0, 1, 0xff}
		default:
			r.Key = fmt.Appendf(nil, "k%d", i)
		}
		switch i % 4 {
		case 1:
			r.Headers = []sink.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte{0, 0xfe}}}
		case 2:
			r.Headers = []sink.Header{{Key: "ü", Value: []byte{}}}
		}
		switch i % 3 {
		case 1:
			r.EventTime = time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
		case 2:
			r.EventTime = time.Date(2262, 1, 1, 0, 0, 0, 1_001, time.FixedZone("x", 3600))
		}
	}
	return out
}

// TestCopyBinaryMatchesUnnest: what copyReader's binary COPY stores equals,
// column for column as the server prints it, what the unnest method stores
// through pgx's own encoders — for every column type the sink writes
// (bytea and jsonb payloads, the metadata columns, a raw table's
// positions).
func TestCopyBinaryMatchesUnnest(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"bytea", Options{}},
		{"bytea, metadata", Options{MetadataColumns: true}},
		{"jsonb, metadata", Options{PayloadType: PayloadJSONB, MetadataColumns: true}},
		{"raw", Options{Positions: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := copyEdgeRecords(60)
			dump := map[string]string{}
			for _, method := range []string{InsertCopy, InsertUnnest} {
				e := newEnv(t)
				opts := tc.opts
				opts.InsertMethod = method
				s := e.open(t, e.dsn, opts)
				before := s.Stats().Statements
				var err error
				if opts.Positions {
					_, _, err = s.CommitRaw(context.Background(), sink.NewBatch(recs))
				} else {
					var res sink.CommitResult
					res, err = s.Commit(context.Background(), sink.NewBatch(recs))
					if err == nil && len(res.Rejected) > 0 {
						err = fmt.Errorf("rejected %+v", res.Rejected)
					}
				}
				if err != nil {
					t.Fatalf("%s: %v", method, err)
				}
				if method == InsertCopy && s.Stats().Statements-before != 1 {
					t.Fatalf("copy: %d statements, want the one COPY", s.Stats().Statements-before)
				}
				dump[method] = e.dumpRows(t)
			}
			if dump[InsertCopy] != dump[InsertUnnest] {
				t.Fatalf("COPY stored\n%s\nunnest stored\n%s", dump[InsertCopy], dump[InsertUnnest])
			}
		})
	}
}

// dumpRows prints every row of the table, every column but committed_at,
// as text, ordered by id.
func (e *env) dumpRows(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	c := e.conn(ctx)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, fmt.Sprintf(`SELECT to_jsonb(t) - 'committed_at' FROM %s t ORDER BY weir_record_id`,
		pgx.Identifier{e.table}.Sanitize()))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b bytes.Buffer
	n := 0
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no rows stored")
	}
	return b.String()
}

// copyReader hands out its stream in whatever pieces the reader asks for,
// the same bytes however it is read.
func TestCopyReaderChunks(t *testing.T) {
	s := &Sink{opts: Options{MetadataColumns: true}}
	recs := copyEdgeRecords(3000) // several copyChunks
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	whole, err := io.ReadAll(newCopyReader(s.rowsOf(recs, idx, nil), false))
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) < 2*copyChunk || !bytes.HasPrefix(whole, copySignature) || !bytes.HasSuffix(whole, []byte{0xff, 0xff}) {
		t.Fatalf("stream of %d bytes: no signature or trailer", len(whole))
	}
	for _, size := range []int{1, 7, 4096, copyChunk + 3} {
		r := newCopyReader(s.rowsOf(recs, idx, nil), false)
		var got []byte
		p := make([]byte, size)
		for {
			n, err := r.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, whole) {
			t.Fatalf("read %d bytes at a time: a different stream (%d bytes, want %d)", size, len(got), len(whole))
		}
	}
}
