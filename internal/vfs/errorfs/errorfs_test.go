package errorfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		glob, path string
		want       bool
	}{
		{"*", "/a/b/c", true},
		{"*.wab", "/d/shard-000/00000000000000000001.wab", true},
		{"*.wab", "/d/shard-000/00000000000000000001.wab.sealed", false},
		{"*/shard-000/*.wab", "/tmp/x/shard-000/1.wab", true},
		{"*/shard-000/*.wab", "/tmp/x/shard-001/1.wab", false},
		{"/a/?/c", "/a/b/c", true},
		{"/a/?/c", "/a/bb/c", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"*a*b*", "xxaxxbxx", true},
		{"*a*b", "xxaxxbxxc", false},
		{"", "", true},
	}
	for _, c := range cases {
		if got := Match(c.glob, c.path); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.glob, c.path, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		spec    string
		want    []Rule
		wantErr bool
	}{
		{spec: "", want: nil},
		{spec: "  ; ", want: nil},
		{
			spec: "sync:*/shard-000/*.wab:after=3:EIO;write:*:after=10:ENOSPC:torn",
			want: []Rule{
				{Op: OpSync, Path: "*/shard-000/*.wab", After: 3, Errno: syscall.EIO},
				{Op: OpWrite, Path: "*", After: 10, Errno: syscall.ENOSPC, Torn: true},
			},
		},
		{spec: "rename:*.sealed:once", want: []Rule{{Op: OpRename, Path: "*.sealed", Once: true}}},
		{spec: "write:*:torn=7:EDQUOT", want: []Rule{{Op: OpWrite, Path: "*", Torn: true, TornBytes: 7, Errno: syscall.EDQUOT}}},
		{spec: "*:*:EROFS", want: []Rule{{Op: OpAny, Path: "*", Errno: syscall.EROFS}}},
		{spec: "fsync:*", wantErr: true},
		{spec: "sync", wantErr: true},
		{spec: "sync::EIO", wantErr: true},
		{spec: "sync:*:after=x", wantErr: true},
		{spec: "sync:*:after=-1", wantErr: true},
		{spec: "sync:*:EWHAT", wantErr: true},
		{spec: "sync:*:EIO:ENOSPC", wantErr: true},
		{spec: "sync:*:torn", wantErr: true},
		{spec: "write:*:torn=0", wantErr: true},
		{spec: "preallocate:*.wab:larger=1048576:ENOSPC", want: []Rule{{Op: OpPreallocate, Path: "*.wab", Larger: 1 << 20, Errno: syscall.ENOSPC}}},
		{spec: "write:*:larger=0", wantErr: true},
		{spec: "sync:*:larger=5", wantErr: true},
		{spec: "sync:*.wab:delay=40ms", want: []Rule{{Op: OpSync, Path: "*.wab", Delay: 40 * time.Millisecond}}},
		{spec: "write:*:after=2:delay=1s:ENOSPC", want: []Rule{{Op: OpWrite, Path: "*", After: 2, Delay: time.Second, Errno: syscall.ENOSPC}}},
		{spec: "sync:*/out/*:delay=300ms:alternate=3s", want: []Rule{{Op: OpSync, Path: "*/out/*", Delay: 300 * time.Millisecond, Alternate: 3 * time.Second}}},
		{spec: "sync:*:alternate=0s", wantErr: true},
		{spec: "sync:*:alternate=often", wantErr: true},
		{spec: "sync:*:delay=0s", wantErr: true},
		{spec: "sync:*:delay=soon", wantErr: true},
	}
	for _, c := range cases {
		got, err := Parse(c.spec)
		if (err != nil) != c.wantErr {
			t.Errorf("Parse(%q) error = %v, wantErr %v", c.spec, err, c.wantErr)
			continue
		}
		if c.wantErr {
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("Parse(%q) = %v, want %v", c.spec, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("Parse(%q)[%d] = %+v, want %+v", c.spec, i, got[i], c.want[i])
			}
			// String round-trips through Parse.
			again, err := Parse(got[i].String())
			if err != nil || len(again) != 1 || again[0].Op != got[i].Op || again[0].After != got[i].After ||
				again[0].errno() != got[i].errno() || again[0].Torn != got[i].Torn || again[0].Once != got[i].Once ||
				again[0].Larger != got[i].Larger || again[0].Delay != got[i].Delay || again[0].Alternate != got[i].Alternate || again[0].delayOnly() != got[i].delayOnly() {
				t.Errorf("round trip of %q: %v, %v", got[i].String(), again, err)
			}
		}
	}
}

// TestDelay: a delay-only rule holds each call it fires for and lets it
// through; with an errno it fails the call after the delay.
func TestDelay(t *testing.T) {
	const d = 30 * time.Millisecond
	cases := []struct {
		name     string
		rule     Rule
		wantFail []bool // per sync
		held     []bool // per sync: held at least d
	}{
		{"delay only", Rule{Op: OpSync, Path: "*.log", After: 1, Delay: d}, []bool{false, false, false}, []bool{false, true, true}},
		{"delay then fail", Rule{Op: OpSync, Path: "*.log", Delay: d, Errno: syscall.EIO, Once: true}, []bool{true, false}, []bool{true, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := New(nil, c.rule)
			var events []Event
			fs.SetHook(func(e Event) { events = append(events, e) })
			f, err := fs.Create(filepath.Join(t.TempDir(), "x.log"), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for i := range c.wantFail {
				t0 := time.Now()
				err := f.Sync()
				el := time.Since(t0)
				if (err != nil) != c.wantFail[i] {
					t.Errorf("sync %d: err %v, want failure %v", i, err, c.wantFail[i])
				}
				if c.held[i] && el < d {
					t.Errorf("sync %d took %v, want at least %v", i, el, d)
				}
				// A call the rule did not hold is checked by the events
				// below, not by its time: a real fdatasync on a busy disk
				// may take longer than d by itself.
			}
			delayed, injected := 0, 0
			for i, want := range c.held {
				if want {
					delayed++
				}
				if c.wantFail[i] {
					injected++
				}
			}
			if fs.Injected() != injected {
				t.Errorf("Injected() = %d, want %d", fs.Injected(), injected)
			}
			if want := delayed - injected; fs.Delayed() != want {
				t.Errorf("Delayed() = %d, want %d", fs.Delayed(), want)
			}
			n := 0
			for _, e := range events {
				if e.Op == OpSync && e.Delayed == d {
					n++
				}
			}
			if n != delayed {
				t.Errorf("%d sync events report the delay, want %d", n, delayed)
			}
		})
	}
}

// TestAlternate: a rule with Alternate is on for the first period from the
// FS's creation, off for the next, on again; while off it does not count
// calls (its after= is counted in the on phases only).
func TestAlternate(t *testing.T) {
	const p = time.Second
	fs := New(nil, Rule{Op: OpSync, Path: "*.log", After: 1, Alternate: p})
	now := fs.start
	fs.now = func() time.Time { return now }
	f, err := fs.Create(filepath.Join(t.TempDir(), "x.log"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	steps := []struct {
		at   time.Duration
		fail bool
	}{
		{0, false},                      // on, but after=1 lets the first through
		{p / 2, true},                   // on
		{p, false},                      // off
		{p + p/2, false},                // off, not counted
		{2 * p, true},                   // on again
		{3*p + time.Millisecond, false}, // off
		{4*p + p/3, true},               // on
	}
	for _, s := range steps {
		now = fs.start.Add(s.at)
		if err := f.Sync(); (err != nil) != s.fail {
			t.Errorf("sync at +%v: err %v, want failure %v", s.at, err, s.fail)
		}
	}
	if got := fs.Injected(); got != 3 {
		t.Errorf("Injected() = %d, want 3", got)
	}
}

func TestRulesFireAfterN(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		rule Rule
		// want[i] reports whether the i-th sync fails.
		want []bool
	}{
		{"forever", Rule{Op: OpSync, Path: "*.log", After: 2}, []bool{false, false, true, true, true}},
		{"once", Rule{Op: OpSync, Path: "*.log", After: 1, Once: true}, []bool{false, true, false, false}},
		{"other path", Rule{Op: OpSync, Path: "*.other"}, []bool{false, false, false}},
		{"other op", Rule{Op: OpWrite, Path: "*"}, []bool{false, false}},
		{"any op", Rule{Op: OpAny, Path: "*.log", After: 1}, []bool{false, true}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := New(nil)
			path := filepath.Join(dir, string(rune('a'+i))+".log")
			f, err := fs.Create(path, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fs.Add(c.rule) // after Create, so "any op" counts syncs only
			for j, wantFail := range c.want {
				err := f.Sync()
				if (err != nil) != wantFail {
					t.Fatalf("sync %d: err = %v, want failure %v", j+1, err, wantFail)
				}
				if err != nil {
					if !errors.Is(err, syscall.EIO) {
						t.Fatalf("sync %d: %v does not wrap EIO", j+1, err)
					}
					var ie *InjectedError
					if !errors.As(err, &ie) {
						t.Fatalf("not an InjectedError: %v", err)
					}
				}
			}
			if got := fs.CallsOn(OpSync, path); got != len(c.want) {
				t.Fatalf("CallsOn(sync) = %d, want %d", got, len(c.want))
			}
			if got := fs.Calls(OpSync); got != len(c.want) {
				t.Fatalf("Calls(sync) = %d, want %d", got, len(c.want))
			}
		})
	}
}

// TestLarger: a rule with Larger fails only calls above that size, and
// does not count the smaller ones.
func TestLarger(t *testing.T) {
	fs := New(nil, Rule{Op: OpPreallocate, Path: "*", Larger: 4096, After: 1, Errno: syscall.ENOSPC},
		Rule{Op: OpWrite, Path: "*", Larger: 3, Errno: syscall.ENOSPC})
	f, err := fs.Create(filepath.Join(t.TempDir(), "f"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, c := range []struct {
		n    int64
		fail bool
	}{{8192, false}, {4096, false}, {100, false}, {4097, true}, {1 << 20, true}, {4096, false}} {
		if err := f.Preallocate(0, c.n); (err != nil) != c.fail || c.fail && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("preallocate #%d of %d bytes: %v, want failure %v", i, c.n, err, c.fail)
		}
	}
	if _, err := f.Write([]byte("abc")); err != nil {
		t.Fatalf("small write: %v", err)
	}
	if n, err := f.Write([]byte("abcd")); n != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("large write: %d, %v", n, err)
	}
}

func TestTornWrite(t *testing.T) {
	for _, c := range []struct {
		name string
		rule Rule
		want int
	}{
		{"half", Rule{Op: OpWrite, Path: "*", Torn: true, Errno: syscall.ENOSPC}, 5},
		{"bytes", Rule{Op: OpWrite, Path: "*", Torn: true, TornBytes: 3, Errno: syscall.ENOSPC}, 3},
		{"bytes capped", Rule{Op: OpWrite, Path: "*", Torn: true, TornBytes: 99, Errno: syscall.ENOSPC}, 10},
		{"not torn", Rule{Op: OpWrite, Path: "*", Errno: syscall.ENOSPC}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			fs := New(nil, c.rule)
			f, err := fs.Create(path, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			n, err := f.Write([]byte("0123456789"))
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("err = %v, want ENOSPC", err)
			}
			if n != c.want {
				t.Fatalf("n = %d, want %d", n, c.want)
			}
			f.Close()
			b, _ := os.ReadFile(path)
			if string(b) != "0123456789"[:c.want] {
				t.Fatalf("file holds %q", b)
			}
		})
	}
}

func TestHookAndPassThrough(t *testing.T) {
	dir := t.TempDir()
	var events []Event
	fs := New(nil, Rule{Op: OpRename, Path: "*/b", Errno: syscall.EROFS})
	fs.SetHook(func(e Event) { events = append(events, e) })
	a := filepath.Join(dir, "a")
	f, err := fs.Create(a, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// rename matches on the new name
	if err := fs.Rename(a, filepath.Join(dir, "b")); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("rename: %v", err)
	}
	if err := fs.Rename(a, filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	wantOps := []Op{OpCreate, OpWrite, OpSync, OpClose, OpRename, OpRename, OpSyncDir}
	if len(events) != len(wantOps) {
		t.Fatalf("events = %v", events)
	}
	for i, op := range wantOps {
		if events[i].Op != op {
			t.Fatalf("event %d = %v, want %v", i, events[i].Op, op)
		}
	}
	if !events[4].Injected || events[5].Injected {
		t.Fatalf("injected flags wrong: %+v", events)
	}
	if fs.Injected() != 1 {
		t.Fatalf("Injected = %d", fs.Injected())
	}
	fs.Clear()
	if _, err := fs.Stat(filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
}

func TestParseFS(t *testing.T) {
	fs, err := ParseFS(nil, "create:*/no:EACCES")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := fs.Create(filepath.Join(dir, "no"), 0o600); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("create: %v", err)
	}
	f, err := fs.Create(filepath.Join(dir, "yes"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := ParseFS(nil, "bogus"); err == nil {
		t.Fatal("bad spec accepted")
	}
}
