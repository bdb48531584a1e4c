package systest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/testenv"
)

func nullable(fs ...arrow.Field) []arrow.Field {
	for i := range fs {
		fs[i].Nullable = true
	}
	return fs
}

// everyType is a schema with a column of every type the mapping writes
// (internal/arrowrec's table); everyTypeRows are two rows of it, as
// arrow-go's JSON reader takes them, the second all null, and
// everyTypeJSON the payloads docs/sources.md and the table say they
// become — written out here by hand, not by the code under test.
var everyType = arrow.NewSchema(nullable(
	arrow.Field{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
	arrow.Field{Name: "i8", Type: arrow.PrimitiveTypes.Int8},
	arrow.Field{Name: "i16", Type: arrow.PrimitiveTypes.Int16},
	arrow.Field{Name: "i32", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
	arrow.Field{Name: "u16", Type: arrow.PrimitiveTypes.Uint16},
	arrow.Field{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
	arrow.Field{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
	arrow.Field{Name: "f16", Type: arrow.FixedWidthTypes.Float16},
	arrow.Field{Name: "f32", Type: arrow.PrimitiveTypes.Float32},
	arrow.Field{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
	arrow.Field{Name: "s", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "ls", Type: arrow.BinaryTypes.LargeString},
	arrow.Field{Name: "sv", Type: arrow.BinaryTypes.StringView},
	arrow.Field{Name: "bin", Type: arrow.BinaryTypes.Binary},
	arrow.Field{Name: "lbin", Type: arrow.BinaryTypes.LargeBinary},
	arrow.Field{Name: "bv", Type: arrow.BinaryTypes.BinaryView},
	arrow.Field{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 3}},
	arrow.Field{Name: "d32", Type: arrow.FixedWidthTypes.Date32},
	arrow.Field{Name: "d64", Type: arrow.FixedWidthTypes.Date64},
	arrow.Field{Name: "t32s", Type: arrow.FixedWidthTypes.Time32s},
	arrow.Field{Name: "t32ms", Type: arrow.FixedWidthTypes.Time32ms},
	arrow.Field{Name: "t64us", Type: arrow.FixedWidthTypes.Time64us},
	arrow.Field{Name: "t64ns", Type: arrow.FixedWidthTypes.Time64ns},
	arrow.Field{Name: "ts_s", Type: &arrow.TimestampType{Unit: arrow.Second}},
	arrow.Field{Name: "ts_ms", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
	arrow.Field{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}},
	arrow.Field{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "-05:00"}},
	arrow.Field{Name: "dur_s", Type: arrow.FixedWidthTypes.Duration_s},
	arrow.Field{Name: "dur_ns", Type: arrow.FixedWidthTypes.Duration_ns},
	arrow.Field{Name: "dec128", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}},
	arrow.Field{Name: "dec256", Type: &arrow.Decimal256Type{Precision: 40, Scale: 5}},
	arrow.Field{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	arrow.Field{Name: "ll", Type: arrow.LargeListOf(arrow.BinaryTypes.String)},
	arrow.Field{Name: "fsl", Type: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float64)},
	arrow.Field{Name: "st", Type: arrow.StructOf(nullable(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String})...)},
	arrow.Field{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)},
	arrow.Field{Name: "mi", Type: arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String)},
	arrow.Field{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}},
), nil)

var everyTypeJSON = []string{
	`{"b":true,"i8":-8,"i16":-16,"i32":-32,"i64":-9007199254740993,"u8":8,"u16":16,"u32":32,"u64":18446744073709551615,` +
		`"f16":1.5,"f32":0.1,"f64":-2.5e-300,"s":"héllo \"w\"\n","ls":"large","sv":"a view string longer than twelve",` +
		`"bin":"AAEC/w==","lbin":"aGk=","bv":"dmlldw==","fsb":"AQID","d32":"2024-03-01","d64":"2024-03-01",` +
		`"t32s":"13:04:05","t32ms":"13:04:05.123","t64us":"13:04:05.123456","t64ns":"13:04:05.123456789",` +
		`"ts_s":"2024-03-01T13:04:05Z","ts_ms":"2024-03-01T13:04:05.123Z","ts_us":"2024-03-01T14:04:05.123456+01:00",` +
		`"ts_ns":"2024-03-01T08:04:05.123456789-05:00","dur_s":-5,"dur_ns":1500000000,"dec128":"-12.50",` +
		`"dec256":"12345678901234567890123456789012345.12345","l":[1,null,3],"ll":["x","y"],"fsl":[1.5,2],` +
		`"st":{"a":1,"b":"z"},"m":{"k":1,"j":null},"mi":{"7":"seven","-1":"minus one"},"dict":"red"}`,
	`{"b":null,"i8":null,"i16":null,"i32":null,"i64":null,"u8":null,"u16":null,"u32":null,"u64":null,"f16":null,"f32":null,` +
		`"f64":null,"s":null,"ls":null,"sv":null,"bin":null,"lbin":null,"bv":null,"fsb":null,"d32":null,"d64":null,"t32s":null,` +
		`"t32ms":null,"t64us":null,"t64ns":null,"ts_s":null,"ts_ms":null,"ts_us":null,"ts_ns":null,"dur_s":null,"dur_ns":null,` +
		`"dec128":null,"dec256":null,"l":null,"ll":null,"fsl":null,"st":null,"m":null,"mi":null,"dict":null}`,
}

// everyTypeBatch builds the two rows: every column but the dictionary by
// arrow-go's JSON reader, the dictionary by its builder.
func everyTypeBatch(t testing.TB) arrow.RecordBatch {
	t.Helper()
	plain := arrow.NewSchema(everyType.Fields()[:everyType.NumFields()-1], nil)
	b := arrowBatch(t, plain, `[{"b": true, "i8": -8, "i16": -16, "i32": -32, "i64": -9007199254740993, "u8": 8, "u16": 16,
		"u32": 32, "u64": 18446744073709551615, "f16": 1.5, "f32": 0.1, "f64": -2.5e-300, "s": "héllo \"w\"\n", "ls": "large",
		"sv": "a view string longer than twelve", "bin": "AAEC/w==", "lbin": "aGk=", "bv": "dmlldw==", "fsb": "AQID",
		"d32": 19783, "d64": 1709251200000, "t32s": 47045, "t32ms": 47045123, "t64us": 47045123456, "t64ns": 47045123456789,
		"ts_s": 1709298245, "ts_ms": 1709298245123, "ts_us": 1709298245123456, "ts_ns": 1709298245123456789,
		"dur_s": -5, "dur_ns": 1500000000, "dec128": "-12.50", "dec256": "12345678901234567890123456789012345.12345",
		"l": [1, null, 3], "ll": ["x", "y"], "fsl": [1.5, 2], "st": {"a": 1, "b": "z"},
		"m": [{"key": "k", "value": 1}, {"key": "j", "value": null}],
		"mi": [{"key": 7, "value": "seven"}, {"key": -1, "value": "minus one"}]},
		{}]`)
	defer b.Release()
	db := array.NewDictionaryBuilder(memory.DefaultAllocator, everyType.Field(everyType.NumFields()-1).Type.(*arrow.DictionaryType)).(*array.BinaryDictionaryBuilder)
	defer db.Release()
	if err := db.AppendString("red"); err != nil {
		t.Fatal(err)
	}
	db.AppendNull()
	dict := db.NewArray()
	defer dict.Release()
	return array.NewRecordBatch(everyType, append(b.Columns(), dict), b.NumRows())
}

// TestFlightEveryTypeToFileAndPostgres: a batch with a column of every
// mapped type, put by arrow-go's own Flight client into the real daemon,
// lands in the file sink and in Postgres as the documented JSON, with the
// configured key, event time and header columns.
func TestFlightEveryTypeToFileAndPostgres(t *testing.T) {
	batch := everyTypeBatch(t)
	defer batch.Release()
	extra := `key_column = "s"
event_time_column = "ts_ms"
header_columns = ["i32"]`
	putAll := func(t *testing.T, addr string) {
		c := flightClient(t, addr)
		call, err := openPut(context.Background(), c, everyType, "orders", "every-type")
		if err != nil {
			t.Fatal(err)
		}
		if err := call.Send(batch, 1); err != nil {
			t.Fatal(err)
		}
		if err := call.Close(); err != nil {
			t.Fatalf("DoPut: %v", err)
		}
		if seqs := collect(call.acks); fmt.Sprint(seqs) != "[1]" {
			t.Fatalf("PutResults %v, want [1]", seqs)
		}
	}
	t.Run("file", func(t *testing.T) {
		d, addr := flightDaemon(t, nil, extra)
		putAll(t, addr)
		deadline := time.Now().Add(30 * time.Second)
		for {
			lines, err := readSinkLines(d.outDir())
			if err == nil && len(lines) >= 2 {
				for i, l := range lines {
					if string(l.Payload) != everyTypeJSON[i] {
						t.Errorf("row %d in the file sink:\n%s\nwant\n%s", i, l.Payload, everyTypeJSON[i])
					}
				}
				l0, l1 := lines[0], lines[1]
				if string(l0.Key) != "héllo \"w\"\n" || !l0.EventTime.Equal(time.UnixMilli(1709298245123)) {
					t.Errorf("row 0: key %q, event time %v", l0.Key, l0.EventTime)
				}
				if l1.Key != nil || !l1.EventTime.IsZero() {
					t.Errorf("row 1 (nulls): key %q, event time %v; want none", l1.Key, l1.EventTime)
				}
				if len(l0.Headers) < 3 || l0.Headers[0].Key != "i32" || string(l0.Headers[0].Value) != "-32" ||
					l0.Headers[1].Key != "weir-arrow-schema" || l0.Headers[2].Key != "weir-arrow-schema-ipc" {
					t.Errorf("row 0 headers %q", l0.Headers)
				}
				if l0.Source != "fl" {
					t.Errorf("source %q", l0.Source)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d lines in the file sink after 30s (%v)\n%s", len(lines), err, tail(d.log.String(), 3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Postgres(t)
		table := testenv.TableName("weir_flight")
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
			conn.Close(context.Background())
		})
		d, addr := flightDaemon(t, nil, extra, "--sink-type", "postgres", "--sink-postgres-dsn", dsn, "--sink-postgres-table", table)
		putAll(t, addr)
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := map[string]bool{}
			rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT convert_from(payload, 'UTF8') FROM %s", table))
			if err == nil {
				for rows.Next() {
					var p string
					if rows.Scan(&p) == nil {
						got[p] = true
					}
				}
				rows.Close()
			}
			if len(got) >= 2 {
				for i, want := range everyTypeJSON {
					if !got[want] {
						t.Errorf("row %d not in Postgres as\n%s\nhave %v", i, want, got)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d rows in Postgres after 30s (%v)\n%s", len(got), err, tail(d.log.String(), 3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func collect[T any](c <-chan T) []T {
	var out []T
	for v := range c {
		out = append(out, v)
	}
	return out
}

// ordersSchema is the rows of the Flight load tests: a unique id and a
// body.
var ordersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "body", Type: arrow.BinaryTypes.String},
}, nil)

// ordersBatch is rows [from, from+n) of ordersSchema, each body of
// bodyBytes.
func ordersBatch(t testing.TB, from, n, bodyBytes int) arrow.RecordBatch {
	t.Helper()
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	defer ib.Release()
	defer sb.Release()
	body := strings.Repeat("x", bodyBytes)
	for i := range n {
		ib.Append(int64(from + i))
		sb.Append(body)
	}
	ids, bodies := ib.NewArray(), sb.NewArray()
	defer ids.Release()
	defer bodies.Release()
	return array.NewRecordBatch(ordersSchema, []arrow.Array{ids, bodies}, int64(n))
}

// TestFlightPutResultAfterFdatasync: through the real binary (the
// faultinject build), every fdatasync of the buffer's segments is held
// 40 ms. A PutResult may only be sent once the fdatasync that covers its
// batch has returned, and that fdatasync starts after the batch reached
// the daemon: every PutResult comes at least 40 ms after its batch was
// sent.
func TestFlightPutResultAfterFdatasync(t *testing.T) {
	const syncDelay = 40 * time.Millisecond
	_, addr := flightDaemon(t, []string{"WEIR_FAULTS=sync:*/shard-*/*.wab:delay=" + syncDelay.String()}, "", "--segment-max-age", "1h")
	c := flightClient(t, addr)
	call, err := openPut(context.Background(), c, ordersSchema, "orders", "slow-disk")
	if err != nil {
		t.Fatal(err)
	}
	var early []time.Duration
	for seq := range uint64(10) {
		b := ordersBatch(t, int(seq)*8, 8, 32)
		t0 := time.Now()
		if err := call.Send(b, seq); err != nil {
			t.Fatal(err)
		}
		b.Release()
		got, ok := <-call.acks
		el := time.Since(t0)
		if !ok || got != seq {
			t.Fatalf("PutResult %d (%v), want %d: %v", got, ok, seq, call.err)
		}
		if el < syncDelay {
			early = append(early, el)
		}
		time.Sleep(syncDelay) // let the flusher go idle: the next batch waits for a sync of its own
	}
	if err := call.Close(); err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 {
		t.Fatalf("%d PutResults came sooner than the %v fdatasync: %v", len(early), syncDelay, early)
	}
}

// TestFlightKill9Resend: a producer puts batches as fast as it is
// acknowledged while the daemon is killed -9 and restarted; it reconnects
// and resends every batch it has no PutResult for, with the same producer
// id and sequence numbers. Every acknowledged row is in the sink, and each
// row has one record id however often it was sent.
func TestFlightKill9Resend(t *testing.T) {
	const batches, rows = 300, 20
	d, addr := flightDaemon(t, nil, "")
	c := flightClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var mu sync.Mutex
	acked := map[uint64]bool{}
	sent := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			mu.Lock()
			var todo []uint64
			for s := range uint64(batches) {
				if !acked[s] {
					todo = append(todo, s)
				}
			}
			mu.Unlock()
			if len(todo) == 0 {
				return
			}
			call, err := openPut(ctx, c, ordersSchema, "orders", "kill9-producer")
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			go func() {
				for s := range call.acks {
					mu.Lock()
					acked[s] = true
					mu.Unlock()
				}
			}()
			for _, s := range todo {
				b := ordersBatch(t, int(s)*rows, rows, 64)
				err := call.Send(b, s)
				b.Release()
				sent++
				if err != nil {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			_ = call.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(400 * time.Millisecond)
	d.kill()
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	d.start()
	<-done
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if ctx.Err() != nil {
		t.Fatalf("the producer did not get every batch acknowledged: %d of %d", n, batches)
	}
	t.Logf("%d batches acknowledged before the kill, %d sent in all", before, sent)
	want := batches * rows
	deadline := time.Now().Add(60 * time.Second)
	for {
		lines, err := readSinkLines(d.outDir())
		if err != nil {
			t.Fatal(err)
		}
		idsOf := map[string]map[string]bool{} // row payload → record ids
		for _, l := range lines {
			if idsOf[string(l.Payload)] == nil {
				idsOf[string(l.Payload)] = map[string]bool{}
			}
			idsOf[string(l.Payload)][l.ID.String()] = true
		}
		if len(idsOf) >= want {
			for p, ids := range idsOf {
				if len(ids) != 1 {
					t.Errorf("row %s has %d record ids, want 1", p, len(ids))
				}
			}
			for s := range batches * rows {
				p := fmt.Sprintf(`{"id":%d,"body":"%s"}`, s, strings.Repeat("x", 64))
				if idsOf[p] == nil {
					t.Errorf("acknowledged row %d missing from the sink", s)
				}
			}
			t.Logf("%d rows, %d sink lines (replays absorbed by id)", len(idsOf), len(lines))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows in the sink after 60s\n%s", len(idsOf), want, tail(d.log.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFlightAuth: with a token file, the real daemon refuses a DoPut
// without a token or with one that may not push, and takes one with a
// push token.
func TestFlightAuth(t *testing.T) {
	tokens := t.TempDir() + "/tokens"
	if err := os.WriteFile(tokens, []byte(sha256Hex("flight-push")+" scopes=push\n"+sha256Hex("flight-admin")+" scopes=admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := flightDaemon(t, nil, fmt.Sprintf("token_file = %q", tokens))
	c := flightClient(t, addr)
	b := ordersBatch(t, 0, 4, 8)
	defer b.Release()
	for _, tc := range []struct {
		ctx  context.Context
		code codes.Code
	}{
		{context.Background(), codes.Unauthenticated},
		{withToken(context.Background(), "wrong"), codes.Unauthenticated},
		{withToken(context.Background(), "flight-admin"), codes.PermissionDenied},
		{withToken(context.Background(), "flight-push"), codes.OK},
	} {
		call, err := openPut(tc.ctx, c, ordersSchema, "orders", "auth")
		if err != nil {
			t.Fatal(err)
		}
		_ = call.Send(b, 1)
		if err := call.Close(); status.Code(err) != tc.code {
			t.Errorf("DoPut: %v, want %v", err, tc.code)
		}
		if n := len(collect(call.acks)); (tc.code == codes.OK) != (n == 1) {
			t.Errorf("DoPut answered %v with %d PutResults", tc.code, n)
		}
	}
}
