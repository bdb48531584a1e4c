package drain

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

// damageRecord flips a payload bit of record i of the sealed segment seg,
// as media damage would.
func damageRecord(t *testing.T, seg string, i int) {
	t.Helper()
	off := recordOffset(t, seg, i)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[off+wab.FrameOverhead] ^= 1
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// lastDamaged is the last count the drain reported, -1 before any.
func lastDamaged(o *recObserver) int {
	d := o.snapshot().damaged
	if len(d) == 0 {
		return -1
	}
	return d[len(d)-1]
}

// TestDamagedSegmentCounted: a sealed segment damaged on disk is counted
// (SegmentsDamaged, weir_segments_damaged) once the drain has read up to
// the damage, while the drain goes on with the other segments; a restart
// counts it again before any pass — even with the sink down — and once
// weir repair has cut it away the count is 0 again and the records before
// the damage are all that was delivered.
func TestDamagedSegmentCounted(t *testing.T) {
	dir := t.TempDir()
	bad, _ := writeSegment(t, dir, 0, 1, payloads("a", 10)...)
	good, _ := writeSegment(t, dir, 1, 1, payloads("b", 3)...)
	damageRecord(t, bad, 5)

	// First run: the records before the damage and the other segment are
	// delivered, the damaged segment is kept and counted.
	s := &scriptSink{max: 4}
	obs := &recObserver{}
	r := start(t, fastOptions(dir, newDirSource(dir), s, obs))
	waitFor(t, "the damaged segment counted", func() bool { return lastDamaged(obs) == 1 })
	waitFor(t, "the sound segment delivered", func() bool { return !exists(good) })
	r.stop(t)
	if first := obs.snapshot().damaged[0]; first != 0 {
		t.Errorf("first report %d, want 0 (nothing known damaged at start)", first)
	}
	if !exists(bad) {
		t.Fatal("the damaged segment was removed")
	}
	var got []string
	for _, b := range s.got() {
		got = append(got, payloadsOf(b)...)
	}
	want := append(payloads("a", 10)[:5], payloads("b", 3)...)
	if !sameSet(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if n := confirmedCount(t, bad); n != 5 {
		t.Fatalf("confirmed %d records of the damaged segment, want the 5 before the damage", n)
	}

	// Restart with the sink down: the count is right from the start, before
	// any sink call and whatever the sink's state.
	down := &scriptSink{max: 4, script: func(context.Context, int, sink.Batch) (sink.CommitResult, error) {
		return sink.CommitResult{}, sink.Transient(errors.New("sink down"))
	}}
	obs2 := &recObserver{}
	r = start(t, fastOptions(dir, newDirSource(dir), down, obs2))
	waitFor(t, "the first report", func() bool { return lastDamaged(obs2) >= 0 })
	r.stop(t)
	if d := obs2.snapshot().damaged; d[0] != 1 {
		t.Fatalf("after a restart the drain reported %v damaged segments, want 1 at once", d)
	}

	// weir repair --cut (the daemon stopped) takes the damage away: the
	// segment keeps its 5 delivered records, so the next run removes it.
	dmg, err := wab.Repair(context.Background(), vfs.OS, dir, true)
	if err != nil || len(dmg) != 1 {
		t.Fatalf("repair: %v, %v", dmg, err)
	}
	s3 := &scriptSink{max: 4}
	obs3 := &recObserver{}
	r = start(t, fastOptions(dir, newDirSource(dir), s3, obs3))
	waitFor(t, "the repaired segment removed", func() bool { return !exists(bad) })
	r.stop(t)
	if d := obs3.snapshot().damaged; !reflect.DeepEqual(d, []int{0}) {
		t.Fatalf("after repair the drain reported %v damaged segments, want [0]", d)
	}
	if len(s3.got()) != 0 {
		t.Fatalf("the repaired segment's records were delivered again: %v", s3.got())
	}
}

// TestDamagedSegmentRemovedWhileRunning: a damaged segment that leaves the
// listing while the drain runs (removed by hand, or replaced) is counted
// out at the next pass.
func TestDamagedSegmentRemovedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	bad, _ := writeSegment(t, dir, 0, 1, payloads("a", 4)...)
	damageRecord(t, bad, 0) // nothing before the damage
	obs := &recObserver{}
	r := start(t, fastOptions(dir, newDirSource(dir), &scriptSink{max: 4}, obs))
	waitFor(t, "the damaged segment counted", func() bool { return lastDamaged(obs) == 1 })
	if err := wab.RemoveSegment(vfs.OS, bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the count back to 0", func() bool { return lastDamaged(obs) == 0 })
	r.stop(t)
	if d := obs.snapshot().damaged; !reflect.DeepEqual(d, []int{1, 0}) {
		// Found by the start's probe (record 0 is the next to deliver).
		t.Fatalf("reports %v, want [1 0]", d)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}
