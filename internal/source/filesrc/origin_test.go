package filesrc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/engine/enginetest"
	"github.com/weir-io/weir/internal/source/filesrc"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
	"github.com/weir-io/weir/source"
)

// memCursors is a cursor store in memory whose saves can be made to fail,
// as if the process died between the durable write and the cursor save.
type memCursors struct {
	mu        sync.Mutex
	m         map[string]source.Cursor
	saves     int
	failAfter int // saves that succeed before every later one fails; < 0: none fails
}

var errSaveCrash = errors.New("test: crashed before the cursor save")

func (c *memCursors) Load(_ context.Context, name string) (source.Cursor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.m[name]), nil
}

func (c *memCursors) Save(_ context.Context, name string, cur source.Cursor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failAfter >= 0 && c.saves >= c.failAfter {
		return errSaveCrash
	}
	c.saves++
	c.m[name] = slices.Clone(cur)
	return nil
}

func (c *memCursors) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.saves
}

// originEnv is a directory of log files tailed by a source that is its own
// raw, and everything the source offered to OnDurable.
type originEnv struct {
	t       *testing.T
	dir     string // the logs
	idx     string // the index
	fs      vfs.FS
	mod     func(*filesrc.Options)
	cursors *memCursors
	o       *filesrc.OriginRaw

	mu        sync.Mutex
	batches   [][]sink.Positioned // as offered to OnDurable
	onDurable func()              // if set, called first in OnDurable
}

func newOriginEnv(t *testing.T, mod func(*filesrc.Options)) *originEnv {
	t.Helper()
	e := &originEnv{t: t, dir: t.TempDir(), idx: t.TempDir(), fs: vfs.OS, mod: mod,
		cursors: &memCursors{m: map[string]source.Cursor{}, failAfter: -1}}
	e.open()
	t.Cleanup(func() { e.o.Close() })
	return e
}

func (e *originEnv) options() filesrc.Options {
	o := filesrc.Options{
		Name:         srcName,
		Glob:         filepath.Join(e.dir, "*.log"),
		PollInterval: 10 * time.Millisecond,
		RotateGrace:  200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if e.mod != nil {
		e.mod(&o)
	}
	return o
}

func (e *originEnv) openErr() (*filesrc.OriginRaw, error) {
	return filesrc.OpenOriginRaw(context.Background(), filesrc.OriginOptions{FS: e.fs, Dir: e.idx, Source: e.options()})
}

func (e *originEnv) open() {
	e.t.Helper()
	o, err := e.openErr()
	if err != nil {
		e.t.Fatal(err)
	}
	e.o = o
}

// reopen closes the index and opens it again, as a restarted process does.
func (e *originEnv) reopen() {
	e.t.Helper()
	if err := e.o.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
}

func (e *originEnv) source() *filesrc.Source {
	e.t.Helper()
	o := e.options()
	o.Origin = e.o
	o.OnDurable = func(first uint64, recs []source.Record) {
		if e.onDurable != nil {
			e.onDurable()
		}
		b := make([]sink.Positioned, len(recs))
		for i, r := range recs {
			b[i] = sink.Positioned{Pos: first + uint64(i), Record: sink.Record{
				ID: r.ID, Payload: r.Payload, Durability: sink.Durable, Received: r.Received, Source: r.Source}}
		}
		e.mu.Lock()
		e.batches = append(e.batches, b)
		e.mu.Unlock()
	}
	s, err := filesrc.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *originEnv) start() *running {
	return enginetest.Start(context.Background(), e.source(), nil, e.cursors)
}

// durable is every record offered to OnDurable, by position.
func (e *originEnv) durable() []sink.Positioned {
	e.mu.Lock()
	defer e.mu.Unlock()
	var all []sink.Positioned
	for _, b := range e.batches {
		all = append(all, b...)
	}
	slices.SortFunc(all, func(a, b sink.Positioned) int { return int(a.Pos) - int(b.Pos) })
	return all
}

func (e *originEnv) batchCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.batches)
}

func (e *originEnv) waitRecords(n int) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(e.durable()) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d records offered to OnDurable, want %d", len(e.durable()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSaves waits until the cursor was saved after every batch.
func (e *originEnv) waitSaves() {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for e.cursors.count() < e.batchCount() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d cursor saves after %d batches", e.cursors.count(), e.batchCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *originEnv) create(name string) *os.File {
	e.t.Helper()
	f, err := os.OpenFile(filepath.Join(e.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	return f
}

func (e *originEnv) rename(from, to string) {
	e.t.Helper()
	if err := os.Rename(filepath.Join(e.dir, from), filepath.Join(e.dir, to)); err != nil {
		e.t.Fatal(err)
	}
}

func write(t *testing.T, f *os.File, s string) {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// lines writes n lines "<prefix>-<i>".
func lines(t *testing.T, f *os.File, prefix string, n int) []string {
	t.Helper()
	var b strings.Builder
	var out []string
	for i := range n {
		l := fmt.Sprintf("%s-%04d", prefix, i)
		out = append(out, l)
		b.WriteString(l + "\n")
	}
	write(t, f, b.String())
	return out
}

// checkPositions checks that the batches offered to OnDurable hold
// contiguous positions from 0 to End, and each of want exactly once.
func (e *originEnv) checkPositions(want []string) {
	e.t.Helper()
	all := e.durable()
	got := map[string]int{}
	for i, p := range all {
		if p.Pos != uint64(i) {
			e.t.Fatalf("record %d of %d is at position %d: positions not contiguous", i, len(all), p.Pos)
		}
		got[string(p.Record.Payload)]++
	}
	for _, w := range want {
		if got[w] != 1 {
			e.t.Errorf("%q has %d positions, want 1", w, got[w])
		}
	}
	if len(all) != len(want) {
		e.t.Errorf("%d records have positions, want %d", len(all), len(want))
	}
	if end, _ := e.o.End(context.Background()); end != uint64(len(all)) {
		e.t.Errorf("End = %d, want %d", end, len(all))
	}
}

// readBack reads every position below End in small pages and checks each
// record against what OnDurable received; positions of records for which
// gone is true must instead be reported gone (and no others).
func (e *originEnv) readBack(want []sink.Positioned, gone func(payload string) bool) {
	e.t.Helper()
	ctx := context.Background()
	end, err := e.o.End(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if end != uint64(len(want)) {
		e.t.Fatalf("End = %d, want %d", end, len(want))
	}
	wantGone := func(p uint64) bool { return gone != nil && gone(string(want[p].Record.Payload)) }
	for p := uint64(0); p < end; {
		got, err := e.o.ReadFrom(ctx, p, 7, 0)
		var ge *filesrc.GoneError
		if errors.As(err, &ge) {
			if !errors.Is(err, sink.ErrPositionGone) || ge.First > p || ge.End <= p || ge.End > end {
				e.t.Fatalf("ReadFrom(%d): bad gone error %v", p, err)
			}
			for q := p; q < ge.End; q++ {
				if !wantGone(q) {
					e.t.Fatalf("ReadFrom(%d): position %d (%q) reported gone: %v", p, q, want[q].Record.Payload, err)
				}
			}
			p = ge.End
			continue
		}
		if err != nil {
			e.t.Fatalf("ReadFrom(%d): %v", p, err)
		}
		if len(got) == 0 {
			e.t.Fatalf("ReadFrom(%d) returned nothing below End %d", p, end)
		}
		for _, g := range got {
			if g.Pos != p {
				e.t.Fatalf("ReadFrom returned position %d, want %d", g.Pos, p)
			}
			if wantGone(p) {
				e.t.Fatalf("position %d (%q) read back, want it gone", p, g.Record.Payload)
			}
			w := want[p].Record
			r := g.Record
			if r.ID != w.ID || !bytes.Equal(r.Payload, w.Payload) || r.Source != w.Source || r.Durability != w.Durability || !r.Received.Equal(w.Received) {
				e.t.Fatalf("position %d read back as %q (id %s, source %q, received %v), source emitted %q (id %s, source %q, time %v)",
					p, r.Payload, r.ID, r.Source, r.Received, w.Payload, w.ID, w.Source, w.Received)
			}
			p++
		}
	}
	if got, err := e.o.ReadFrom(ctx, end, 10, 0); err != nil || len(got) != 0 {
		e.t.Fatalf("ReadFrom(End) = %d records, %v; want none", len(got), err)
	}
}

func TestOriginPositions(t *testing.T) {
	tests := []struct {
		name  string
		batch int                                      // MaxBatchRecords
		run   func(e *originEnv, r **running) []string // returns every line written
		gone  func(payload string) bool                // lines whose positions the origin no longer keeps
	}{{
		name:  "appends to two files",
		batch: 13,
		run: func(e *originEnv, _ **running) []string {
			a, b := e.create("a.log"), e.create("b.log")
			var all []string
			for i := range 5 {
				all = append(all, lines(e.t, a, fmt.Sprintf("a%d", i), 20)...)
				all = append(all, lines(e.t, b, fmt.Sprintf("b%d", i), 7)...)
				time.Sleep(5 * time.Millisecond)
			}
			return all
		},
	}, {
		name:  "rotation by rename",
		batch: 10,
		run: func(e *originEnv, _ **running) []string {
			old := e.create("app.log")
			all := lines(e.t, old, "first", 30)
			e.waitRecords(30)
			e.rename("app.log", "app.log.1")
			all = append(all, lines(e.t, old, "late", 5)...) // the writer still has it open
			all = append(all, lines(e.t, e.create("app.log"), "second", 25)...)
			return append(all, lines(e.t, old, "later", 3)...)
		},
	}, {
		name:  "copytruncate",
		batch: 10,
		run: func(e *originEnv, _ **running) []string {
			f := e.create("app.log")
			all := lines(e.t, f, "before", 30)
			e.waitRecords(30)
			data, err := os.ReadFile(f.Name())
			if err != nil {
				e.t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.dir, "app.log.1"), data, 0o600); err != nil {
				e.t.Fatal(err)
			}
			if err := f.Truncate(0); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // let the source see the shorter file
			return append(all, lines(e.t, f, "after", 50)...)
		},
		// The copy is another file: the truncated generation's positions
		// are gone.
		gone: func(p string) bool { return strings.HasPrefix(p, "before") },
	}, {
		name:  "restart",
		batch: 10,
		run: func(e *originEnv, r **running) []string {
			f := e.create("app.log")
			all := lines(e.t, f, "first", 25)
			e.waitRecords(25)
			(*r).Stop(e.t)
			e.reopen()
			if end, _ := e.o.End(context.Background()); end != 25 {
				e.t.Fatalf("End after reopen = %d, want 25", end)
			}
			all = append(all, lines(e.t, f, "second", 25)...)
			*r = e.start()
			return all
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = tc.batch })
			r := e.start()
			all := tc.run(e, &r)
			e.waitRecords(len(all))
			time.Sleep(50 * time.Millisecond) // nothing more comes
			r.Stop(t)
			e.checkPositions(all)
			if e.batchCount() < 3 {
				t.Errorf("%d batches; the test wants several", e.batchCount())
			}
			e.readBack(e.durable(), tc.gone)
			e.reopen()
			e.readBack(e.durable(), tc.gone)
		})
	}
}

// Long lines cut into pieces, and the unterminated last line of a dropped
// rotated file, read back as the source cut them — also when pieces and
// lines fall on batch boundaries.
func TestOriginReadBackCutsLinesAsTheSource(t *testing.T) {
	for _, batch := range []int{1, 2, 100} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxLineBytes = 100; o.MaxBatchRecords = batch })
			old := e.create("app.log")
			write(t, old, strings.Repeat("a", 100)+strings.Repeat("b", 100)+strings.Repeat("c", 50)+"\n"+
				strings.Repeat("d", 100)+"\n"+strings.Repeat("e", 101)+"\nafter\n")
			r := e.start()
			e.waitRecords(7)
			e.rename("app.log", "app.log.1")
			write(t, old, "last, unterminated")
			write(t, e.create("app.log"), "new\n")
			e.waitRecords(9)
			r.Stop(t)
			want := []string{strings.Repeat("a", 100), strings.Repeat("b", 100), strings.Repeat("c", 50),
				strings.Repeat("d", 100), strings.Repeat("e", 100), "e", "after", "new", "last, unterminated"}
			e.checkPositions(want)
			for i, p := range e.durable() {
				if string(p.Record.Payload) != want[i] {
					t.Fatalf("position %d holds %q, want %q", i, p.Record.Payload, want[i])
				}
			}
			e.readBack(e.durable(), nil)
			e.reopen()
			e.readBack(e.durable(), nil)
		})
	}
}

// A crash between the index append and the cursor save: the restarted
// source catches up with the index and gives none of those lines a second
// position — for a file the cursor tracks, and for one it never saw.
func TestOriginCrashBeforeCursorSave(t *testing.T) {
	for _, newFile := range []bool{false, true} {
		t.Run(fmt.Sprintf("newFile=%v", newFile), func(t *testing.T) {
			e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = 10 })
			a := e.create("a.log")
			all := lines(t, a, "a", 25)
			r := e.start()
			e.waitRecords(25)
			e.waitSaves()
			saved := e.cursors.count()
			e.cursors.mu.Lock()
			e.cursors.failAfter = saved
			e.cursors.mu.Unlock()
			if newFile {
				all = append(all, lines(t, e.create("b.log"), "b", 5)...)
			} else {
				all = append(all, lines(t, a, "a-more", 5)...)
			}
			select {
			case err := <-r.Done():
				if !errors.Is(err, errSaveCrash) {
					t.Fatalf("Run = %v, want the save crash", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("source did not stop on the cursor store error")
			}
			r.Cancel()
			if n := len(e.durable()); n != 30 {
				t.Fatalf("%d records acknowledged before the crash, want 30", n)
			}
			e.cursors.mu.Lock()
			e.cursors.failAfter = -1
			e.cursors.mu.Unlock()
			e.reopen()
			all = append(all, lines(t, a, "a-after", 5)...)
			r = e.start()
			e.waitRecords(35)
			time.Sleep(100 * time.Millisecond) // a re-read would show by now
			r.Stop(t)
			e.checkPositions(all)
			e.readBack(e.durable(), nil)
		})
	}
}

// stickyCursors behaves like engine.OffsetStore after its file's
// fdatasync failed: Save keeps the cursor in memory (Load returns it) but
// fails, and nothing is persisted any more.
type stickyCursors struct {
	mu        sync.Mutex
	mem, disk map[string]source.Cursor
	broken    bool
}

func (c *stickyCursors) Load(_ context.Context, name string) (source.Cursor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mem[name]), nil
}

func (c *stickyCursors) Save(_ context.Context, name string, cur source.Cursor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mem[name] = slices.Clone(cur)
	if c.broken {
		return errSaveCrash
	}
	c.disk[name] = slices.Clone(cur)
	return nil
}

// A cursor store whose saves keep failing while the daemon restarts the
// source after each failure: every restart appends one more batch, so the
// persisted cursor falls several Appends behind the index. After the
// process restarts, the source catches up with every entry past the
// persisted cursor — not only the last Append's — and no line, of any of
// those files, gets a second position.
// (Also with a cursor saved by a version that did not record how much of
// the index it reflects: then every entry counts.)
func TestOriginCursorFarBehindTheIndex(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) { testCursorFarBehindTheIndex(t, legacy) })
	}
}

func testCursorFarBehindTheIndex(t *testing.T, legacy bool) {
	e := newOriginEnv(t, nil)
	cur := &stickyCursors{mem: map[string]source.Cursor{}, disk: map[string]source.Cursor{}}
	all := lines(t, e.create("a.log"), "a", 3)
	r := enginetest.Start(context.Background(), e.source(), nil, cur)
	e.waitRecords(3)
	time.Sleep(50 * time.Millisecond)
	r.Stop(t)
	cur.mu.Lock()
	cur.broken = true // the offset store's fdatasync failed: sticky
	cur.mu.Unlock()
	// The daemon restarts the source after each failed save; each run
	// appends the batch of a new file first.
	for i, name := range []string{"b", "c", "d"} {
		all = append(all, lines(t, e.create(name+".log"), name, 3)...)
		r := enginetest.Start(context.Background(), e.source(), nil, cur)
		select {
		case err := <-r.Done():
			if !errors.Is(err, errSaveCrash) {
				t.Fatalf("run %d = %v, want the failed save", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d did not stop on the failed save", i)
		}
		r.Cancel()
		e.waitRecords(3 * (i + 2))
	}
	// The process restarts: memory is gone, the persisted cursor is the
	// one of the first run, three Appends behind.
	e.reopen()
	cur.mu.Lock()
	cur.mem, cur.broken = maps.Clone(cur.disk), false
	if legacy {
		var c map[string]json.RawMessage
		if err := json.Unmarshal(cur.mem[srcName], &c); err != nil || c["origin"] == nil {
			t.Fatalf("saved cursor %s (%v): no origin end", cur.mem[srcName], err)
		}
		delete(c, "origin")
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		cur.mem[srcName] = b
	}
	cur.mu.Unlock()
	all = append(all, lines(t, e.create("b.log"), "b-more", 2)...)
	r = enginetest.Start(context.Background(), e.source(), nil, cur)
	e.waitRecords(len(all))
	time.Sleep(100 * time.Millisecond) // a re-read would show by now
	r.Stop(t)
	e.checkPositions(all)
	e.readBack(e.durable(), nil)
}

// An index that lost acknowledged entries (damaged: see TestOriginIndexDamage)
// ends below what the cursor claims of it. The source saves the cursor at
// start with the index's real end, so that a crash between the next
// Append and its cursor save is still caught up with.
func TestOriginCursorAheadOfADamagedIndex(t *testing.T) {
	e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = 10 })
	f := e.create("app.log")
	lines(t, f, "line", 25)
	r := e.start()
	e.waitRecords(25)
	e.waitSaves()
	r.Stop(t)
	if end, _ := e.o.End(context.Background()); end != 25 || e.batchCount() != 3 {
		t.Fatalf("End = %d in %d batches, want 25 in 3", end, e.batchCount())
	}
	// Lose the last entry, [20, 25).
	e.o.Close()
	path := filepath.Join(e.idx, "origin.index")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	e.open()
	if end, _ := e.o.End(context.Background()); end != 20 {
		t.Fatalf("End = %d after cutting the last entry, want 20", end)
	}
	// The next batch is appended, then the process dies before its
	// cursor save.
	e.onDurable = func() {
		e.cursors.mu.Lock()
		e.cursors.failAfter = e.cursors.saves
		e.cursors.mu.Unlock()
	}
	more := lines(t, f, "more", 5)
	r = e.start()
	select {
	case err := <-r.Done():
		if !errors.Is(err, errSaveCrash) {
			t.Fatalf("Run = %v, want the save crash", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("source did not stop on the cursor store error")
	}
	r.Cancel()
	e.onDurable = nil
	e.cursors.mu.Lock()
	e.cursors.failAfter = -1
	e.cursors.mu.Unlock()
	e.reopen()
	after := lines(t, f, "after", 5)
	r = e.start()
	e.waitRecords(35)
	time.Sleep(100 * time.Millisecond) // a re-read would show by now
	r.Stop(t)
	// Lines 20..24 lost their positions with the entry; "more" keeps the
	// ones it got, 20..24, and is not read again.
	d := e.durable()
	got := map[string][]uint64{}
	for _, p := range d {
		got[string(p.Record.Payload)] = append(got[string(p.Record.Payload)], p.Pos)
	}
	for i, l := range append(more, after...) {
		if ps := got[l]; len(ps) != 1 || ps[0] != uint64(20+i) {
			t.Errorf("%q has positions %v, want [%d]", l, ps, 20+i)
		}
	}
	want := d[:20]
	for _, p := range d {
		if l := string(p.Record.Payload); strings.HasPrefix(l, "more") || strings.HasPrefix(l, "after") {
			want = append(want, p)
		}
	}
	e.readBack(want, nil)
}

// The index's last Append torn by a crash is cut at open; damage before a
// good entry is corruption, reported with the file and offset.
func TestOriginIndexDamage(t *testing.T) {
	const entries = 4 // 35 lines in batches of 10
	tests := []struct {
		name    string
		damage  func(data []byte, frame, header int) []byte
		corrupt int // offset named in the error; 0: the open succeeds
		end     uint64
	}{
		{"last entry cut short", func(d []byte, _, _ int) []byte { return d[:len(d)-5] }, 0, 30},
		{"last entry half there, then garbage", func(d []byte, f, _ int) []byte {
			return append(d[:len(d)-f/2], bytes.Repeat([]byte{0xa5}, 17)...)
		}, 0, 30},
		{"zeros after the last entry", func(d []byte, _, _ int) []byte { return append(d, make([]byte, 300)...) }, 0, 35},
		{"last entry's checksum bad", func(d []byte, _, _ int) []byte { d[len(d)-1] ^= 1; return d }, 0, 30},
		{"first entry bad, good ones follow", func(d []byte, _, h int) []byte { d[h+20] ^= 1; return d }, -1, 0},
		{"third entry bad, good one follows", func(d []byte, f, h int) []byte { d[h+2*f+30] ^= 1; return d }, -3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = 10 })
			f := e.create("app.log")
			lines(t, f, "line", 35)
			r := e.start()
			e.waitRecords(35)
			r.Stop(t)
			if e.batchCount() != entries {
				t.Fatalf("%d batches, want %d", e.batchCount(), entries)
			}
			e.o.Close()
			path := filepath.Join(e.idx, "origin.index")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			header := 8 + 2 + len(srcName) + 4
			frame := (len(data) - header) / entries
			if frame != 4+84+len(f.Name())+4 {
				t.Fatalf("frame of %d bytes, want %d", frame, 4+84+len(f.Name())+4)
			}
			if err := os.WriteFile(path, tc.damage(data, frame, header), 0o600); err != nil {
				t.Fatal(err)
			}
			o, err := e.openErr()
			if tc.corrupt < 0 {
				at := header + (-tc.corrupt-1)*frame
				if !errors.Is(err, filesrc.ErrCorruptIndex) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d,", at)) {
					t.Fatalf("open = %v, want %v naming %s and offset %d", err, filesrc.ErrCorruptIndex, path, at)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e.o = o
			if end, _ := o.End(context.Background()); end != tc.end {
				t.Fatalf("End = %d, want %d", end, tc.end)
			}
			if fi, _ := os.Stat(path); fi.Size() != int64(header)+int64(tc.end/10+min(tc.end%10, 1))*int64(frame) {
				t.Fatalf("index has %d bytes after open: the torn tail was not cut", fi.Size())
			}
			e.readBack(e.durable()[:tc.end], nil)
			// Appends go on from the end. (The test cut acknowledged
			// entries whose lines the cursor has passed: they stay
			// without positions.)
			lines(t, f, "more", 12)
			e.mu.Lock()
			e.batches = nil
			e.mu.Unlock()
			r = e.start()
			e.waitRecords(12)
			r.Stop(t)
			if d := e.durable(); d[0].Pos != tc.end || d[len(d)-1].Pos != tc.end+11 {
				t.Fatalf("new lines at positions %d..%d, want from %d", d[0].Pos, d[len(d)-1].Pos, tc.end)
			}
			e.reopen()
			if end, _ := e.o.End(context.Background()); end != tc.end+12 {
				t.Fatalf("End after reopen = %d, want %d", end, tc.end+12)
			}
		})
	}
}

// A failed fdatasync of the index stops it: the batch is not acknowledged
// (no OnDurable, no cursor save), the sync is never retried, and
// reopening recovers — the index being authoritative for what survived.
func TestOriginIndexSyncFailureIsSticky(t *testing.T) {
	e := newOriginEnv(t, nil)
	e.o.Close()
	efs := errorfs.New(nil, errorfs.Rule{Op: errorfs.OpSync, Path: "*/origin.index", After: 1})
	e.fs = efs
	e.open()
	f := e.create("app.log")
	all := lines(t, f, "ok", 10)
	r := e.start()
	e.waitRecords(10)
	e.waitSaves()
	all = append(all, lines(t, f, "failed", 10)...)
	select {
	case err := <-r.Done():
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "fdatasync") {
			t.Fatalf("Run = %v, want the injected fdatasync failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("source did not stop on the index failure")
	}
	r.Cancel()
	if n := e.batchCount(); n != 1 {
		t.Fatalf("OnDurable called for %d batches, want 1 (not for the failed one)", n)
	}
	if n := e.cursors.count(); n != 1 {
		t.Fatalf("cursor saved %d times, want 1 (not after the failed batch)", n)
	}
	if end, _ := e.o.End(context.Background()); end != 10 {
		t.Fatalf("End = %d after the failed batch, want 10", end)
	}
	idx := filepath.Join(e.idx, "origin.index")
	syncs := efs.CallsOn(errorfs.OpSync, idx)
	// Sticky: a later Append fails at once, without syncing again.
	r = e.start()
	if err := <-r.Done(); err == nil || !strings.Contains(err.Error(), "index stopped") {
		t.Fatalf("Run on the stopped index = %v, want the sticky error", err)
	}
	r.Cancel()
	if n := efs.CallsOn(errorfs.OpSync, idx); n != syncs {
		t.Fatalf("index fdatasynced %d more times after it failed", n-syncs)
	}
	if e.batchCount() != 1 || e.cursors.count() != 1 {
		t.Fatalf("%d batches acknowledged, %d cursor saves after the sticky failure, want 1 and 1", e.batchCount(), e.cursors.count())
	}
	// Reopen: the failed batch's entry reached the file (only the sync was
	// refused), so it survives at positions 10..19, unacknowledged, and the
	// cursor catches up with it: its lines are not read again.
	e.o.Close()
	e.fs = vfs.OS
	e.open()
	if end, _ := e.o.End(context.Background()); end != 20 {
		t.Fatalf("End after reopen = %d, want 20 (the unacknowledged entry survived)", end)
	}
	all = append(all, lines(t, f, "after", 10)...)
	r = e.start()
	e.waitRecords(20)
	time.Sleep(100 * time.Millisecond)
	r.Stop(t)
	d := e.durable()
	if len(d) != 20 || d[10].Pos != 20 {
		t.Fatalf("after reopen %d records acknowledged, the first new at position %d; want 20 and position 20", len(d), d[10].Pos)
	}
	got, err := e.o.ReadFrom(context.Background(), 0, 100, 0)
	if err != nil || len(got) != 30 {
		t.Fatalf("ReadFrom(0) = %d records, %v; want 30", len(got), err)
	}
	for i, p := range got {
		if string(p.Record.Payload) != all[i] || p.Pos != uint64(i) {
			t.Fatalf("position %d holds %q at %d, want %q", i, p.Record.Payload, p.Pos, all[i])
		}
	}
}

// A failed fdatasync of an origin file, or of its directory, fails the
// batch before the index is touched and stops the origin raw: the sync is
// never retried (after a failed writeback Linux may mark the pages clean,
// and a second fdatasync succeed although the lines never reached the
// disk — the injected failure fires once, as such a kernel would), every
// later Append fails at once, and reopening recovers.
func TestOriginFileSyncFailureIsSticky(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule func(e *originEnv, path string) (errorfs.Rule, string)
	}{
		{"file", func(_ *originEnv, path string) (errorfs.Rule, string) {
			return errorfs.Rule{Op: errorfs.OpSync, Path: path, Once: true}, path
		}},
		{"directory", func(e *originEnv, _ string) (errorfs.Rule, string) {
			return errorfs.Rule{Op: errorfs.OpSyncDir, Path: e.dir, Once: true}, e.dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newOriginEnv(t, nil)
			path := filepath.Join(e.dir, "app.log")
			write(t, e.create("app.log"), "a\nb\n")
			dev, ino, err := filesrc.Identify(path)
			if err != nil {
				t.Fatal(err)
			}
			x := []filesrc.Extent{{Dev: dev, Ino: ino, Path: path, Start: 0, End: 4, Count: 2}}
			recs := []source.Record{{Payload: []byte("a"), Source: srcName}, {Payload: []byte("b"), Source: srcName}}
			e.o.Close()
			rule, failing := tc.rule(e, path)
			efs := errorfs.New(nil, rule)
			e.fs = efs
			e.open()
			op := rule.Op
			idx := filepath.Join(e.idx, "origin.index")
			before, _ := os.Stat(idx)
			ctx := context.Background()
			if _, err := e.o.Append(ctx, x, recs); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), failing) {
				t.Fatalf("Append = %v, want the injected failure naming %s", err, failing)
			}
			unchanged := func() {
				t.Helper()
				if after, _ := os.Stat(idx); after.Size() != before.Size() || efs.CallsOn(errorfs.OpSync, idx) != 0 {
					t.Fatal("the index was written after the origin's sync failed")
				}
				if end, _ := e.o.End(ctx); end != 0 {
					t.Fatalf("End = %d, want 0", end)
				}
			}
			unchanged()
			syncs := efs.CallsOn(op, failing)
			// Sticky: the next Append fails at once, syncing nothing again
			// (a retried sync would succeed here).
			if _, err := e.o.Append(ctx, x, recs); err == nil || !strings.Contains(err.Error(), "origin raw stopped") {
				t.Fatalf("second Append = %v, want the sticky error", err)
			}
			if n := efs.CallsOn(op, failing); n != syncs {
				t.Fatalf("%s synced %d more times after its sync failed", failing, n-syncs)
			}
			unchanged()
			// Reopening recovers.
			e.reopen()
			if first, err := e.o.Append(ctx, x, recs); err != nil || first != 0 {
				t.Fatalf("Append after reopen = %d, %v; want 0, nil", first, err)
			}
			if end, _ := e.o.End(ctx); end != 2 {
				t.Fatalf("End = %d, want 2", end)
			}
		})
	}
}

// A rotated file deleted after it was read: its positions are gone,
// reported with the file; the new file's positions still read back.
func TestOriginDeletedRotatedFileIsGone(t *testing.T) {
	e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = 8 })
	old := e.create("app.log")
	all := lines(t, old, "old", 20)
	r := e.start()
	e.waitRecords(20)
	e.rename("app.log", "app.log.1")
	all = append(all, lines(t, e.create("app.log"), "new", 10)...)
	e.waitRecords(30)
	r.Stop(t)
	e.checkPositions(all)
	if err := os.Remove(filepath.Join(e.dir, "app.log.1")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, from := range []uint64{0, 5, 19} {
		_, err := e.o.ReadFrom(ctx, from, 100, 0)
		var ge *filesrc.GoneError
		if !errors.Is(err, sink.ErrPositionGone) || !errors.As(err, &ge) {
			t.Fatalf("ReadFrom(%d) = %v, want %v", from, err, sink.ErrPositionGone)
		}
		if ge.End != 20 || ge.First > from || !strings.Contains(err.Error(), filepath.Join(e.dir, "app.log")) {
			t.Fatalf("ReadFrom(%d): %v: want positions up to 20 gone, naming the file", from, err)
		}
	}
	e.readBack(e.durable(), func(p string) bool { return strings.HasPrefix(p, "old") })
}

// A new file that reuses the inode of a deleted one (ext4 hands a freed
// inode out again at once: logrotate deletes app.log.N, then the
// application creates app.log) gets its directory fsynced before its lines
// are acknowledged, as every new file does; a file already synced through
// the same descriptor does not.
func TestOriginDirSyncedForNewFileOnReusedInode(t *testing.T) {
	e := newOriginEnv(t, nil)
	e.o.Close()
	efs := errorfs.New(nil)
	e.fs = efs
	e.open()
	ctx := context.Background()
	path := filepath.Join(e.dir, "app.log")
	var off int64
	appendLine := func(f *os.File, line string) (ino uint64) {
		t.Helper()
		if _, err := f.WriteString(line + "\n"); err != nil {
			t.Fatal(err)
		}
		dev, ino, err := filesrc.Identify(path)
		if err != nil {
			t.Fatal(err)
		}
		x := []filesrc.Extent{{Dev: dev, Ino: ino, Path: path, Start: off, End: off + int64(len(line)+1), Count: 1, File: f}}
		if _, err := e.o.Append(ctx, x, []source.Record{{Payload: []byte(line), Source: srcName, Received: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		off += int64(len(line) + 1)
		return ino
	}
	open := func() *os.File {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := open()
	ino1 := appendLine(f, "first")
	appendLine(f, "more")
	if n := efs.CallsOn(errorfs.OpSyncDir, e.dir); n != 1 {
		t.Fatalf("directory synced %d times for two batches of one file, want 1", n)
	}
	f.Close()
	if err := os.Remove(path); err != nil { // rotated away and deleted
		t.Fatal(err)
	}
	off = 0
	f = open() // a new file, created after the directory sync
	defer f.Close()
	ino2 := appendLine(f, "second")
	if ino1 != ino2 {
		t.Skipf("the file system did not reuse the inode (%d, %d)", ino1, ino2)
	}
	if n := efs.CallsOn(errorfs.OpSyncDir, e.dir); n != 2 {
		t.Fatalf("a new file (reused inode %d) was acknowledged with its directory synced %d times in all, want 2 (once for each file)", ino2, n)
	}
	// A restarted process does not take the inodes in the index for
	// synced: one of them may be a new file's by now.
	e.reopen()
	appendLine(f, "after restart")
	if n := efs.CallsOn(errorfs.OpSyncDir, e.dir); n != 3 {
		t.Fatalf("after reopen the directory was synced %d times in all, want 3", n)
	}
}

// Append refuses an extent whose file has been deleted (the source can
// still read it through its descriptor): its positions could never be
// read back. Nothing is indexed; the refusal is not sticky.
func TestOriginAppendRefusesDeletedFile(t *testing.T) {
	e := newOriginEnv(t, nil)
	ctx := context.Background()
	extent := func(name string) []filesrc.Extent {
		path := filepath.Join(e.dir, name)
		write(t, e.create(name), "a\nb\n")
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		dev, ino, err := filesrc.Identify(path)
		if err != nil {
			t.Fatal(err)
		}
		return []filesrc.Extent{{Dev: dev, Ino: ino, Path: path, Start: 0, End: 4, Count: 2, File: f}}
	}
	recs := []source.Record{{Payload: []byte("a"), Source: srcName}, {Payload: []byte("b"), Source: srcName}}
	x := extent("gone.log")
	if err := os.Remove(x[0].Path); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(e.idx, "origin.index")
	before, _ := os.Stat(idx)
	if _, err := e.o.Append(ctx, x, recs); err == nil || !strings.Contains(err.Error(), "deleted") || !strings.Contains(err.Error(), x[0].Path) {
		t.Fatalf("Append of a deleted file's lines = %v, want it refused naming the file", err)
	}
	if after, _ := os.Stat(idx); after.Size() != before.Size() {
		t.Fatal("the index was written for a deleted file")
	}
	if end, _ := e.o.End(ctx); end != 0 {
		t.Fatalf("End = %d, want 0", end)
	}
	if first, err := e.o.Append(ctx, extent("live.log"), recs); err != nil || first != 0 {
		t.Fatalf("Append of a live file after the refusal = %d, %v; want 0, nil", first, err)
	}
}

// In origin mode the source drops a file deleted under it instead of
// reading on through its descriptor: lines already acknowledged stay
// (reported gone), the unread ones are not given positions, and the source
// goes on with the other files — whether it sees the deletion when it
// looks at the files, or only through Append's refusal.
func TestOriginDeletedFileIsDropped(t *testing.T) {
	t.Run("seen by scan", func(t *testing.T) {
		e := newOriginEnv(t, func(o *filesrc.Options) { o.MaxBatchRecords = 10 })
		all := lines(t, e.create("app.log"), "x", 30)[:10]
		release := make(chan struct{})
		var once sync.Once
		e.onDurable = func() { once.Do(func() { <-release }) } // hold the first batch
		r := e.start()
		e.waitRecords(0)
		time.Sleep(100 * time.Millisecond) // the first batch is appended and held
		if err := os.Remove(filepath.Join(e.dir, "app.log")); err != nil {
			t.Fatal(err)
		}
		close(release)
		e.waitRecords(10)
		e.waitSaves()
		all = append(all, lines(t, e.create("new.log"), "new", 5)...)
		e.waitRecords(15)
		time.Sleep(100 * time.Millisecond) // more lines of the deleted file would show by now
		r.Stop(t)
		e.checkPositions(all)
		e.readBack(e.durable(), func(p string) bool { return strings.HasPrefix(p, "x-") })
	})
	t.Run("refused by Append", func(t *testing.T) {
		e := newOriginEnv(t, nil)
		e.o.Close()
		efs := errorfs.New(nil)
		e.fs = efs
		e.open()
		path := filepath.Join(e.dir, "app.log")
		var once sync.Once
		efs.SetHook(func(ev errorfs.Event) {
			// The first batch's directory sync: delete the file between
			// the source's look at it and the index append.
			if ev.Op == errorfs.OpSyncDir && ev.Path == e.dir {
				once.Do(func() {
					if err := os.Remove(path); err != nil {
						t.Error(err)
					}
				})
			}
		})
		lines(t, e.create("app.log"), "x", 30)
		r := e.start()
		deadline := time.Now().Add(10 * time.Second)
		for efs.CallsOn(errorfs.OpSyncDir, e.dir) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no batch was appended")
			}
			time.Sleep(5 * time.Millisecond)
		}
		all := lines(t, e.create("new.log"), "new", 5)
		e.waitRecords(5)
		time.Sleep(100 * time.Millisecond)
		r.Stop(t) // no error: the source went on
		e.checkPositions(all)
		e.readBack(e.durable(), nil)
	})
}

// The origin raw must have been opened with the source's options.
func TestOriginOptionsMustMatch(t *testing.T) {
	e := newOriginEnv(t, nil)
	o := e.options()
	o.Origin = e.o
	o.MaxLineBytes = 10
	if _, err := filesrc.New(o); err == nil {
		t.Fatal("New accepted an origin raw opened with another MaxLineBytes")
	}
	o = e.options()
	o.Origin = e.o
	o.Name = "other"
	if _, err := filesrc.New(o); err == nil {
		t.Fatal("New accepted an origin raw opened for another source")
	}
	e.o.Close()
	if _, err := filesrc.OpenOriginRaw(context.Background(), filesrc.OriginOptions{Dir: e.idx, Source: o}); err == nil || !strings.Contains(err.Error(), `"files"`) {
		t.Fatalf("opening the index of %q for %q = %v, want it refused", srcName, o.Name, err)
	}
}

// ReadFrom's byte bound on an origin raw, within an entry and across
// entries: it stops before the record past the bound, returns a first
// record larger than the bound alone, and a read from where one stopped
// goes on with the record it refused.
func TestOriginReadFromByteBound(t *testing.T) {
	e := newOriginEnv(t, nil)
	f := e.create("app.log")
	r := e.start()
	n := 0
	for range 2 {
		var b strings.Builder
		for _, size := range []int{100, 300, 50, 6000, 200, 200, 9000, 10} {
			b.WriteString(strings.Repeat(string(rune('a'+n%26)), size) + "\n")
			n++
		}
		write(t, f, b.String())
		e.waitRecords(n)
	}
	r.Stop(t)
	if e.batchCount() < 2 {
		t.Fatalf("%d entries; the test wants two at least", e.batchCount())
	}
	for _, from := range []uint64{0, 5, 13} {
		sinktest.ReadBound(t, e.o, from)
	}
}
