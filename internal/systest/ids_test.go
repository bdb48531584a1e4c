package systest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/sink/filesink"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// TestRecordIDsAcrossPaths: a record gets one id whichever way it reaches
// a sink — live delivery to a secondary, a read of raw, and recovery into
// a secondary added later, which replays it from raw — and ids are laid
// out by time: each carries the record's own time (a Kafka timestamp, a
// producer's event time, else the receive time) in milliseconds, so ids
// of records in time order sort in time order. Records come from wire-v1
// producers (ids from their buffer position), an idempotent v2 producer
// with seeded random event times (some left for the client to stamp) and
// a Kafka topic with seeded random timestamps. Replay a run with
// WEIR_ID_SEED.
func TestRecordIDsAcrossPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(envSeed(t, "WEIR_ID_SEED", "seed"), 7))
	// A random time in 2001–2100, or 0 ("none") one time in eight.
	randTime := func() time.Time {
		if rng.IntN(8) == 0 {
			return time.Time{}
		}
		return time.UnixMilli(978_307_200_000 + rng.Int64N(3_155_760_000_000)).Add(time.Duration(rng.IntN(1e6)))
	}

	const topic, group = "ids", "weir-ids"
	c, cl := startKafka(t, topic, 3)
	base := kafkaSourceTOML("orders", group, topic, c.ListenAddrs()) + "\n[[secondary]]\nname = \"live\"\ntype = \"file\"\n"
	cfg := writeConfig(t, base)
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()
	ctx := ctxTimeout(t, 90*time.Second)

	// want[payload] is the time the record's id must carry; v1 records
	// carry their receive time, within [v1From, v1To].
	want := map[string]time.Time{}
	stamped := map[string]bool{} // v2 records whose time the client stamped
	var v1 []string
	v1From := time.Now()
	c1, err := client.Dial(ctx, d.socket, client.WithProtocolVersion(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		p := fmt.Sprintf("v1-%03d", i)
		if err := c1.Push(ctx, []byte(p), client.Durable); err != nil {
			t.Fatal(err)
		}
		v1 = append(v1, p)
	}
	c1.Close(ctx)
	v1To := time.Now()

	c2, err := client.Dial(ctx, d.socket)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 10 {
		var recs []client.Record
		for i := range 10 {
			p := fmt.Sprintf("v2-%02d-%02d", b, i)
			at := randTime()
			recs = append(recs, client.Record{Payload: []byte(p), EventTime: at})
			want[p] = at // zero: the client's stamp, checked below
		}
		before := time.Now()
		if err := c2.PushRecords(ctx, recs, client.Durable); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.EventTime.IsZero() {
				want[string(r.Payload)] = before // at least
				stamped[string(r.Payload)] = true
			}
		}
	}
	c2.Close(ctx)

	var krecs []*kgo.Record
	for i := range 100 {
		p := fmt.Sprintf("kafka-%03d", i)
		at := randTime()
		if at.IsZero() {
			at = time.UnixMilli(1) // Kafka has no "none" a producer can send
		}
		at = at.Truncate(time.Millisecond)
		krecs = append(krecs, &kgo.Record{Value: []byte(p), Timestamp: at})
		want[p] = at
	}
	if err := cl.ProduceSync(ctx, krecs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	total := len(v1) + len(want)

	live := waitSecondary(t, d, "live", total)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	raw := idsByPayload(t, d.outDir())

	// A secondary added now is recovered from raw.
	if err := os.WriteFile(cfg, []byte(base+"\n[[secondary]]\nname = \"late\"\ntype = \"file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	late := waitSecondary(t, d, "late", total)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	type rec struct {
		p  string
		id sink.RecordID
		ms int64
	}
	var all []rec
	for p, id := range raw {
		if live[p] != id || late[p] != id {
			t.Errorf("%s: id %s in raw, %s delivered live, %s recovered", p, id, live[p], late[p])
		}
		at, ok := record.IDTime(id)
		if !ok {
			t.Fatalf("%s: id %s is not time-ordered", p, id)
		}
		w, known := want[p]
		switch {
		case slices.Contains(v1, p):
			if at.Before(v1From.Truncate(time.Millisecond)) || at.After(v1To) {
				t.Errorf("%s: id carries %v, received between %v and %v", p, at, v1From, v1To)
			}
		case !known:
			t.Fatalf("%s: a record nobody sent", p)
		case stamped[p]:
			// Stamped by the client when pushed: no earlier than w.
			if at.Before(w.Truncate(time.Millisecond)) || at.After(time.Now()) {
				t.Errorf("%s: id carries %v, stamped by the client at or after %v", p, at, w)
			}
		default:
			if !at.Equal(w.Truncate(time.Millisecond)) {
				t.Errorf("%s: id carries %v, the record's time is %v", p, at, w)
			}
		}
		all = append(all, rec{p, id, at.UnixMilli()})
	}
	if len(raw) != total {
		t.Fatalf("raw holds %d records, want %d", len(raw), total)
	}
	// Time order is id order wherever the milliseconds differ.
	slices.SortFunc(all, func(a, b rec) int { return bytes.Compare(a.id[:], b.id[:]) })
	for i := 1; i < len(all); i++ {
		if all[i-1].ms > all[i].ms {
			t.Fatalf("ids out of time order: %s (%s, %d ms) sorts before %s (%s, %d ms)",
				all[i-1].p, all[i-1].id, all[i-1].ms, all[i].p, all[i].id, all[i].ms)
		}
	}
}

// waitSecondary waits until the file secondary name of d holds n distinct
// records and returns their ids by payload.
func waitSecondary(t *testing.T, d *daemon, name string, n int) map[string]sink.RecordID {
	t.Helper()
	dir := filepath.Join(d.dir, "secondary", name)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := idsByPayloadTry(dir)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("secondary %s holds %d of %d records\n%s", name, len(got), n, tail(d.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// idsByPayload reads a file sink's dir (retrying while a running daemon
// renames a file under the read) and maps each payload to its id; two
// ids for one payload fail the test.
func idsByPayload(t *testing.T, dir string) map[string]sink.RecordID {
	t.Helper()
	lines, err := readSinkLines(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sink.RecordID{}
	for _, l := range lines {
		if id, ok := out[string(l.Payload)]; ok && id != l.ID {
			t.Fatalf("%s: two ids in %s, %s and %s", l.Payload, dir, id, l.ID)
		}
		out[string(l.Payload)] = l.ID
	}
	return out
}

func idsByPayloadTry(dir string) map[string]sink.RecordID {
	lines, _ := filesink.ReadDirFS(vfs.OS, dir, true)
	out := map[string]sink.RecordID{}
	for _, l := range lines {
		out[string(l.Payload)] = l.ID
	}
	return out
}
