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

// recordOffset is the byte offset of record i of a segment (of its footer
// for i equal to the record count).
func recordOffset(t *testing.T, seg string, i int) int64 {
	t.Helper()
	r, err := wab.OpenSegment(vfs.OS, seg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range i {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	return r.Offset()
}

// TestResumeSeeksToSidecarOffset: the drain positions a segment at the
// offset its sidecar records instead of reading (and checking) every
// delivered record again, so damage among the delivered records no longer
// stops the rest; with a count-only sidecar (an older version's) it still
// reads them, and a sidecar offset that points at no frame falls back to
// that too.
func TestResumeSeeksToSidecarOffset(t *testing.T) {
	cases := []struct {
		name      string
		sidecar   func(seg string, off int64) error
		delivered bool // the rest of the segment gets delivered
	}{
		{"offset", func(seg string, off int64) error {
			return wab.WriteProgress(vfs.OS, seg, wab.Progress{Records: 6, Offset: off})
		}, true},
		{"count only", func(seg string, off int64) error { return wab.WriteConfirmed(vfs.OS, seg, 6) }, false},
		{"offset at no frame", func(seg string, off int64) error {
			return wab.WriteProgress(vfs.OS, seg, wab.Progress{Records: 6, Offset: off + 3})
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 10)...)
			if err := c.sidecar(seg, recordOffset(t, seg, 6)); err != nil {
				t.Fatal(err)
			}
			// Damage among the delivered records.
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[recordOffset(t, seg, 2)+wab.FrameOverhead] ^= 1
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			s := &scriptSink{max: 3}
			obs := &recObserver{}
			r := start(t, fastOptions(dir, newDirSource(dir), s, obs))
			if !c.delivered {
				waitFor(t, "segment set aside", func() bool { return len(obs.snapshot().deferred) > 0 })
				r.stop(t)
				if len(s.got()) != 0 || !exists(seg) {
					t.Fatalf("sink got %v from a segment whose delivered records are damaged", s.got())
				}
				return
			}
			waitFor(t, "segment delivered", func() bool { return !exists(seg) })
			var got []string
			for _, b := range s.got() {
				got = append(got, payloadsOf(b)...)
			}
			if want := payloads("p", 10)[6:]; !reflect.DeepEqual(got, want) {
				t.Fatalf("sink got %v, want %v", got, want)
			}
		})
	}
}

// TestSidecarRecordsOffset: what the drain confirms carries the offset of
// the next record, so that a restart seeks there.
func TestSidecarRecordsOffset(t *testing.T) {
	dir := t.TempDir()
	seg, _ := writeSegment(t, dir, 0, 1, payloads("p", 10)...)
	s := &scriptSink{max: 4}
	s.script = func(_ context.Context, call int, _ sink.Batch) (sink.CommitResult, error) {
		if call < 2 {
			return sink.CommitResult{}, nil
		}
		return sink.CommitResult{}, sink.Transient(errors.New("sink down"))
	}
	r := start(t, fastOptions(dir, newDirSource(dir), s, nil))
	waitFor(t, "two sub-batches confirmed", func() bool { return confirmedCount(t, seg) == 8 })
	r.stop(t)
	p, err := wab.ReadProgress(vfs.OS, seg)
	if err != nil {
		t.Fatal(err)
	}
	if want := (wab.Progress{Records: 8, Offset: recordOffset(t, seg, 8)}); p != want {
		t.Fatalf("sidecar %+v, want %+v", p, want)
	}
}
