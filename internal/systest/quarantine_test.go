package systest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/client"
)

// A Postgres secondary with a jsonb payload column refuses the records
// that are not JSON. They land in the secondary's quarantine directory
// with the server's reason; the clean records reach the table; raw keeps
// everything; the backlog returns to 0.
func TestSecondaryQuarantine(t *testing.T) {
	db := newPGTable(t, "weir_quar")
	conn, table := db.conn, db.table
	cfg := writeConfig(t, pgSecondaryTOML(db.dsn, table, "", `payload_type = "jsonb"`))
	d := newDaemon(t, "--config", cfg, "--coverage-flush-interval", "50ms")
	d.start()

	const clean, bad = 300, 30
	ctx := ctxTimeout(t, 60*time.Second)
	c, err := client.Dial(ctx, d.socket)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < clean+bad; i += 10 {
		var batch [][]byte
		for j := i; j < i+10; j++ {
			if j%11 == 5 && j/11 < bad {
				batch = append(batch, fmt.Appendf(nil, "not json %d", j))
			} else {
				batch = append(batch, fmt.Appendf(nil, `{"n":%d}`, j))
			}
		}
		if err := c.PushBatch(ctx, batch, client.Durable); err != nil {
			t.Fatal(err)
		}
	}
	c.Close(ctx)
	total := clean + bad

	m := d.waitScrape("every record in raw, the secondary caught up", 60*time.Second, func(m map[string]float64) bool {
		return m[`weir_secondary_coverage_end{sink="pg"}`] >= float64(total) && m["weir_recovery_backlog"] == 0
	})
	if got := sum(m, "weir_secondary_quarantined_records_total"); got != bad {
		t.Errorf("weir_secondary_quarantined_records_total = %v, want %d", got, bad)
	}
	if got := sum(m, "weir_secondary_quarantine_shed_records_total"); got != 0 {
		t.Errorf("quarantine shed %v records", got)
	}
	if raw := rawIDs(t, d); len(raw) != total {
		t.Errorf("raw holds %d records, want %d", len(raw), total)
	}
	if tbl := tableIDs(t, conn, table); len(tbl) != total-bad {
		t.Errorf("table holds %d rows, want %d", len(tbl), total-bad)
	}
	// The quarantine lane's writer runs on its own; give it a moment.
	qdir := filepath.Join(d.dir, "quarantine", "pg")
	got := waitQuarantineDir(t, qdir, bad, 10*time.Second)
	if len(got) != bad {
		t.Fatalf("quarantine holds %d records, want %d", len(got), bad)
	}
	for _, e := range got {
		if e.Sink != "pg" || !strings.HasPrefix(e.Record.Payload, "not json ") || !strings.Contains(strings.ToLower(e.Reason), "json") ||
			e.RawPosition >= uint64(total) || e.Record.ID == "" {
			t.Fatalf("quarantine entry %+v", e)
		}
		if e.ReasonCode != "decode" || e.Stage != "secondary" || e.Component != "pg" || e.Error != e.Reason ||
			e.Attempts < 1 || e.FirstSeen == "" {
			t.Fatalf("quarantine entry's rejection %+v", e)
		}
	}
	var decode float64
	for k, v := range m {
		if strings.HasPrefix(k, "weir_secondary_quarantined_records_total{") && strings.Contains(k, `code="decode"`) {
			decode += v
		}
	}
	if decode != bad {
		t.Errorf("weir_secondary_quarantined_records_total{code=\"decode\"} = %v, want %d", decode, bad)
	}
	t.Logf("%d records: %d in the table, %d quarantined; first reason: %s", total, total-bad, len(got), got[0].Reason)
}
