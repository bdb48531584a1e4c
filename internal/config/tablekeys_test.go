package config

import "testing"

// TestTableKeysAsSettings: the keys of [[secondary]] and [[source]]
// themselves read like every setting — a size with a unit or as integer
// bytes, an integer or a boolean in its text form — and raw_dir is made
// absolute against the working directory like every path.
func TestTableKeysAsSettings(t *testing.T) {
	c := loadClean(t, `
[[secondary]]
name = "pg"
type = "file"
durable = false
queue_batches = "8"
queue_max_bytes = "2 MiB"
quarantine_buffer = 100
quarantine_dir = "q/pg"
quarantine_max_bytes = "1 MiB"
start_at_end = "yes"

[[secondary]]
name = "raw"
type = "file"
quarantine_dir = "q/raw"
quarantine_max_bytes = 4096

[[source]]
name = "app"
type = "file"
own_raw = true
raw_dir = "origin-app"
[source.file]
glob = "/var/log/app/*.log"
`)
	pg, raw := c.Secondaries[0], c.Secondaries[1]
	if pg.Sink.Durable || pg.QueueBatches != 8 || pg.QueueMaxBytes != 2<<20 || pg.QuarantineBuffer != 100 || pg.QuarantineDir != "/srv/weir/q/pg" ||
		pg.QuarantineMaxBytes != 1<<20 || !pg.StartAtEnd {
		t.Errorf("pg: %+v", pg)
	}
	if !raw.Sink.Durable || raw.QuarantineMaxBytes != 4096 || raw.QuarantineDir != "/srv/weir/q/raw" || raw.QueueBatches != DefaultQueueBatches || raw.QueueMaxBytes != 0 {
		t.Errorf("raw: %+v", raw)
	}
	if sc := c.Sources[0]; !sc.OwnRaw || sc.RawDir != "/srv/weir/origin-app" {
		t.Errorf("source: %+v", sc)
	}
}

// TestTableKeyErrors: a bad value of a table's own key is an error naming
// the table, its name, the key, the value and the range, in the format of
// every other setting; raw_dir is checked like a path and against the
// directories other writers use; a secondary may not take a gate's
// quarantine directory.
func TestTableKeyErrors(t *testing.T) {
	const sec = "[[secondary]]\nname = \"pg\"\ntype = \"file\"\n"
	const ownRaw = "[[source]]\nname = \"app\"\ntype = \"file\"\nown_raw = true\n"
	const ownRawTail = "\n[source.file]\nglob = \"/x/*\"\n[[secondary]]\nname = \"s\"\ntype = \"file\"\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"secondary name type", "[[secondary]]\nname = 5\ntype = \"file\"",
			[]string{`[[secondary]] #1: name = 5: want a string, got the integer 5; allowed: 1 – 64 bytes`}},
		{"secondary type type", "[[secondary]]\nname = \"pg\"\ntype = 5",
			[]string{`[[secondary]] "pg": type = 5: want a string, got the integer 5; allowed: one of "file", "parquet", "postgres", "mysql"`}},
		{"durable", sec + `durable = "maybe"`,
			[]string{`[[secondary]] "pg": durable = "maybe": want true or false, got "maybe"; allowed: true or false`}},
		{"queue_batches text", sec + `queue_batches = "lots"`,
			[]string{`[[secondary]] "pg": queue_batches = "lots": "lots" is not an integer; allowed: 1 – 65536`}},
		{"queue_batches range", sec + `queue_batches = 65537`,
			[]string{`[[secondary]] "pg": queue_batches = 65537: must be between 1 and 65536`}},
		{"quarantine_buffer text", sec + `quarantine_buffer = "many"`,
			[]string{`[[secondary]] "pg": quarantine_buffer = "many": "many" is not an integer; allowed: 1 – 16777216`}},
		{"quarantine_max_bytes text", sec + `quarantine_max_bytes = "x"`,
			[]string{`[[secondary]] "pg": quarantine_max_bytes = "x": "x" is not a size`, `allowed: 0 – 1048576GiB`}},
		{"quarantine_max_bytes range", sec + `quarantine_max_bytes = "2000000GiB"`,
			[]string{`[[secondary]] "pg": quarantine_max_bytes = 2000000GiB: must be between 0 and 1048576GiB`}},
		{"quarantine_dir type", sec + `quarantine_dir = 5`,
			[]string{`[[secondary]] "pg": quarantine_dir = 5: want a string, got the integer 5`}},
		{"quarantine_dir dotdot", sec + `quarantine_dir = "../q"`,
			[]string{`[[secondary]] "pg": quarantine_dir = "../q": must not contain a ".." element`}},
		{"start_at_end", sec + `start_at_end = 3`,
			[]string{`[[secondary]] "pg": start_at_end = 3: want a boolean, got the integer 3; allowed: true or false`}},
		{"source type type", "[[source]]\nname = \"app\"\ntype = 5",
			[]string{`[[source]] "app": type = 5: want a string, got the integer 5; allowed: one of "kafka", "nats", "file"`}},
		{"own_raw", "[[source]]\nname = \"app\"\ntype = \"file\"\nown_raw = \"x\"\n[source.file]\nglob = \"/x/*\"",
			[]string{`[[source]] "app": own_raw = "x": want true or false, got "x"; allowed: true or false`}},
		{"raw_dir type", ownRaw + `raw_dir = 7` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = 7: want a string, got the integer 7`}},
		{"raw_dir dotdot", ownRaw + `raw_dir = "../r"` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = "../r": must not contain a ".." element`}},
		{"raw_dir NUL", ownRaw + `raw_dir = "r\u0000"` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = "r\x00": contains a NUL byte`}},
		{"raw_dir is wab_dir", ownRaw + `raw_dir = "data/wab"` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = "/srv/weir/data/wab": must differ from wab_dir`}},
		{"raw_dir is a secondary's dir", ownRaw + `raw_dir = "data/secondary/s"` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = "/srv/weir/data/secondary/s": must differ from the directory of [[secondary]] "s"`}},
		{"raw_dir is a secondary's quarantine", ownRaw + `raw_dir = "data/quarantine/s"` + ownRawTail,
			[]string{`[[source]] "app": raw_dir = "/srv/weir/data/quarantine/s": must differ from the quarantine_dir of [[secondary]] "s"`}},
		{"secondary named buffer", "[[secondary]]\nname = \"buffer\"\ntype = \"file\"",
			[]string{`[[secondary]] "buffer": name = "buffer": is reserved: the quarantine directory it would default to, "/srv/weir/data/quarantine/buffer", is the buffer gate's quarantine lane`}},
		{"secondary named raw", "[[secondary]]\nname = \"raw\"\ntype = \"file\"",
			[]string{`[[secondary]] "raw": name = "raw": is reserved: the quarantine directory it would default to, "/srv/weir/data/quarantine/raw", is the raw gate's quarantine lane`}},
		{"quarantine_dir is a gate's", sec + `quarantine_dir = "data/quarantine/raw"`,
			[]string{`[[secondary]] "pg": quarantine_dir = "/srv/weir/data/quarantine/raw": is the raw gate's quarantine lane`}},
		{"shared quarantine_dir", sec + "quarantine_dir = \"/q\"\n[[secondary]]\nname = \"b\"\ntype = \"file\"\nquarantine_dir = \"/q\"",
			[]string{`[[secondary]] "b": quarantine_dir = "/q": is also the quarantine_dir of [[secondary]] "pg"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantLoadError(t, tc.body, tc.want) })
	}
}
