package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/source"
)

// undecodableBatch is five records, the second and fifth of which their
// source could not decode.
func undecodableBatch() []source.Record {
	batch := sourceRecords(5)
	for _, i := range []int{1, 4} {
		batch[i].Undecodable = "corrupt batch"
		batch[i].OriginPos = "x.arrow@batch" + string(rune('0'+i))
	}
	return batch
}

// checkDecodeLane checks that dir's quarantine files hold exactly the
// undecodable records of batch, with code decode at the gate of lane name.
func checkDecodeLane(t *testing.T, dir, name string, batch []source.Record) {
	t.Helper()
	got, err := quarantine.ReadDir(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []source.Record
	for _, r := range batch {
		if r.Undecodable != "" {
			want = append(want, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("lane holds %d records, want %d", len(got), len(want))
	}
	for i, q := range got {
		if q.Record.ID != want[i].ID.String() || q.Record.Payload != string(want[i].Payload) || q.ReasonCode != "decode" ||
			q.Stage != "gate" || q.Sink != name || q.OriginPos != want[i].OriginPos || q.Error != "corrupt batch" {
			t.Errorf("lane record %d: %+v, want %s with code decode", i, q, want[i].Payload)
		}
	}
}

// TestWABGateQuarantinesUndecodable: a record its source could not decode
// (source.Record.Undecodable) is not written to the buffer but stored in
// the rejection lane with code decode before Write returns nil; without a
// lane it fails the Write and nothing is written.
func TestWABGateQuarantinesUndecodable(t *testing.T) {
	dir := t.TempDir()
	w := enginetest.OpenWAB(t, 1)
	counts := gateCounts{}
	g, err := engine.NewWABGate(w.Log, engine.GateOptions{Quarantine: quarantine.NewOnDemand(quarantine.Options{Dir: dir, MaxBytes: 1 << 20}), Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	batch := undecodableBatch()
	if err := g.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if stored := w.Records(t); len(stored) != 3 || stored[0].ID != batch[0].ID || stored[1].ID != batch[2].ID || stored[2].ID != batch[3].ID {
		t.Fatalf("buffer holds %+v, want the 3 decodable records", stored)
	}
	checkDecodeLane(t, dir, "buffer", batch)
	if counts[record.CodeDecode] != 2 || len(counts) != 1 {
		t.Errorf("counted %v, want 2 decode", counts)
	}

	w2 := enginetest.OpenWAB(t, 1)
	bare := w2.Gate(t)
	if err := bare.Write(context.Background(), undecodableBatch()); !errors.Is(err, engine.ErrUndecodable) {
		t.Fatalf("Write without a lane: %v, want ErrUndecodable", err)
	}
	if stored := w2.Records(t); len(stored) != 0 {
		t.Fatalf("buffer holds %d records after a refused Write, want none", len(stored))
	}
}

// TestSinkGateQuarantinesUndecodable: the raw gate likewise stores the
// undecodable records in its quarantine, and commits the others.
func TestSinkGateQuarantinesUndecodable(t *testing.T) {
	dir := t.TempDir()
	m := newMemSink("raw")
	obs := &gateCommits{}
	g := engine.NewSinkGate(m, engine.SinkGateOptions{Name: "raw", Observer: obs,
		Quarantine: quarantine.NewOnDemand(quarantine.Options{Dir: dir, MaxBytes: 1 << 20})})
	batch := undecodableBatch()
	if err := g.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if m.count() != 3 {
		t.Fatalf("sink holds %d records, want 3", m.count())
	}
	checkDecodeLane(t, dir, "raw", batch)
	if obs.quarantined[record.CodeDecode] != 2 {
		t.Errorf("observed %v, want 2 decode", obs.quarantined)
	}

	bare := newMemSink("raw")
	if err := engine.NewSinkGate(bare, engine.SinkGateOptions{}).Write(context.Background(), undecodableBatch()); !errors.Is(err, engine.ErrUndecodable) {
		t.Fatalf("Write without a quarantine: %v, want ErrUndecodable", err)
	}
	if bare.count() != 0 {
		t.Fatalf("sink holds %d records after a refused Write, want none", bare.count())
	}
}
