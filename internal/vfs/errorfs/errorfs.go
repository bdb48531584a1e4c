// Package errorfs wraps a vfs.FS and injects faults into it
// deterministically, so that tests (and, through a spec string, a test
// build of the daemon) can make a chosen write, fdatasync, rename or other
// call fail with a chosen errno.
//
// A Rule matches an operation and a path glob. Its first After matching
// calls go through; from the next one on it fires: the call fails with the
// rule's errno (EIO by default) without reaching the wrapped FS. A Once rule
// fires a single time and then lets everything through again. A Torn write
// rule writes a prefix of the buffer to the wrapped file first (half of it,
// or TornBytes bytes) and then fails, like a write interrupted by a full
// disk. A Delay rule holds the call for its Delay first, and then lets it
// through (or fails it, if the rule names an errno): a slow disk rather
// than a broken one. When several rules match a call, the first one (in the
// order they were added) that fires decides; every matching rule counts the
// call.
//
// The FS counts every call per operation and per (operation, path), so a
// test can assert for example that fdatasync was not retried on a file, and
// an optional hook sees every call after it returns.
//
// # Spec grammar
//
// Parse reads rules from a string, e.g. for an environment variable:
//
//	spec   = rule { ";" rule }
//	rule   = op ":" glob { ":" param }
//	op     = "create" | "open" | "read" | "write" | "sync" | "syncdir" |
//	         "rename" | "remove" | "preallocate" | "truncate" | "mkdir" |
//	         "readdir" | "stat" | "lock" | "close" | "*"
//	glob   = pattern over the whole path: "*" matches any run of characters
//	         (including "/"), "?" any one character, all else itself;
//	         it may not contain ":" or ";"
//	param  = "after=" N     let N matching calls through first (default 0)
//	       | "once"         fire only once
//	       | "torn"         (write) write half the buffer, then fail
//	       | "torn=" N      (write) write N bytes (at most the buffer), then fail
//	       | "larger=" N    (write, preallocate) match only calls of more
//	                        than N bytes, like a disk with N bytes free
//	       | "delay=" D     hold the call for D (a Go duration, e.g. 40ms),
//	                        then let it through unless an errno is given
//	       | "alternate=" P the rule is on for P, off for P, on again, ...
//	                        (a Go duration), counted from when the FS was
//	                        made: a disk alternating slow and fast
//	       | errno          EIO (default), ENOSPC, EDQUOT, EROFS, EACCES, ...
//
// Example: "sync:*/shard-000/*.wab:after=3:EIO;write:*:after=10:ENOSPC:torn"
// fails the fourth and every later fdatasync of open segments of shard 0
// with EIO, and tears the eleventh and every later write anywhere with
// ENOSPC; "sync:*.wab:delay=40ms" makes every fdatasync of an open segment
// take 40 ms longer; "sync:*/out/*:delay=300ms:alternate=3s" makes the file
// sink's fdatasync 300 ms slower for 3 s, then normal for 3 s, and so on.
// The phases are a function of the clock alone (no randomness, so nothing to
// seed): two runs see the same schedule relative to their start. Whitespace around rules is ignored; an empty spec has no rules.
//
// "open" covers both Open and OpenReadWrite; "read" covers Read and ReadAt;
// "rename" matches when either the old or the new name matches the glob.
package errorfs

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// Op is a kind of file-system call.
type Op uint8

// Operations that rules can match.
const (
	OpAny Op = iota
	OpCreate
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpSyncDir
	OpRename
	OpRemove
	OpPreallocate
	OpTruncate
	OpMkdir
	OpReadDir
	OpStat
	OpLock
	OpClose
	numOps
)

var opNames = [numOps]string{
	OpAny: "*", OpCreate: "create", OpOpen: "open", OpRead: "read", OpWrite: "write",
	OpSync: "sync", OpSyncDir: "syncdir", OpRename: "rename", OpRemove: "remove",
	OpPreallocate: "preallocate", OpTruncate: "truncate", OpMkdir: "mkdir",
	OpReadDir: "readdir", OpStat: "stat", OpLock: "lock", OpClose: "close",
}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Rule describes one fault.
type Rule struct {
	Op    Op
	Path  string // glob; "" matches every path
	After int    // matching calls let through before the rule fires
	Once  bool
	Errno syscall.Errno // 0 means EIO
	// Torn (writes only): write a prefix before failing: TornBytes bytes
	// if > 0, else half the buffer.
	Torn      bool
	TornBytes int
	// Larger (writes and preallocations only): when > 0, the rule matches
	// only calls of more than Larger bytes; smaller ones are not even
	// counted by it.
	Larger int64
	// Delay holds a call this rule fires for that long before it goes on.
	// With Errno 0 a Delay rule then lets the call through (it is not an
	// injected failure); with an Errno it fails it.
	Delay time.Duration
	// Alternate, when > 0, switches the rule on and off: on for Alternate
	// from the FS's creation, then off for Alternate, and so on. While off
	// the rule matches nothing (calls are not even counted by it).
	Alternate time.Duration
}

// delayOnly reports that the rule slows calls down without failing them.
func (r Rule) delayOnly() bool { return r.Delay > 0 && r.Errno == 0 }

func (r Rule) errno() syscall.Errno {
	if r.Errno == 0 {
		return syscall.EIO
	}
	return r.Errno
}

// String formats the rule in the spec grammar.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Op.String())
	b.WriteByte(':')
	if r.Path == "" {
		b.WriteByte('*')
	} else {
		b.WriteString(r.Path)
	}
	if r.After > 0 {
		fmt.Fprintf(&b, ":after=%d", r.After)
	}
	if r.Once {
		b.WriteString(":once")
	}
	if r.Larger > 0 {
		fmt.Fprintf(&b, ":larger=%d", r.Larger)
	}
	if r.Alternate > 0 {
		fmt.Fprintf(&b, ":alternate=%s", r.Alternate)
	}
	if r.Delay > 0 {
		fmt.Fprintf(&b, ":delay=%s", r.Delay)
		if r.delayOnly() {
			return b.String()
		}
	}
	if r.Torn {
		if r.TornBytes > 0 {
			fmt.Fprintf(&b, ":torn=%d", r.TornBytes)
		} else {
			b.WriteString(":torn")
		}
	}
	b.WriteByte(':')
	b.WriteString(errnoName(r.errno()))
	return b.String()
}

// InjectedError is the cause of every injected failure; it unwraps to its
// errno, so errors.Is(err, syscall.ENOSPC) works through it.
type InjectedError struct{ Errno syscall.Errno }

func (e *InjectedError) Error() string { return "injected " + errnoName(e.Errno) }
func (e *InjectedError) Unwrap() error { return e.Errno }

// Event describes one call, given to the hook after the call returned.
type Event struct {
	Op   Op
	Path string
	Err  error // the call's result, injected or real
	// Injected reports that the rule engine produced Err.
	Injected bool
	// Delayed is how long a delay rule held the call (0: not held).
	Delayed time.Duration
}

type ruleState struct {
	Rule
	seen  int
	fired int
}

type opPath struct {
	op   Op
	path string
}

// FS injects faults into a wrapped vfs.FS. It is safe for concurrent use.
type FS struct {
	inner vfs.FS

	mu        sync.Mutex
	rules     []*ruleState
	calls     [numOps]int
	pathCalls map[opPath]int
	injected  int
	delayed   int
	hook      func(Event)
	// start is when the FS was made, the origin of Alternate's phases;
	// now is the clock (a seam for tests).
	start time.Time
	now   func() time.Time
}

var _ vfs.FS = (*FS)(nil)

// New wraps inner (vfs.OS when nil) with the given rules.
func New(inner vfs.FS, rules ...Rule) *FS {
	if inner == nil {
		inner = vfs.OS
	}
	fs := &FS{inner: inner, pathCalls: make(map[opPath]int), now: time.Now}
	fs.start = fs.now()
	for _, r := range rules {
		fs.Add(r)
	}
	return fs
}

// Add appends a rule.
func (fs *FS) Add(r Rule) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.rules = append(fs.rules, &ruleState{Rule: r})
}

// Clear removes every rule (counts are kept).
func (fs *FS) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.rules = nil
}

// SetHook installs a function called after every call with its outcome.
// It runs on the caller's goroutine and must not call back into fs.
func (fs *FS) SetHook(h func(Event)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.hook = h
}

// Calls is how many op calls were made (OpAny: all calls).
func (fs *FS) Calls(op Op) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if op == OpAny {
		n := 0
		for _, c := range fs.calls {
			n += c
		}
		return n
	}
	return fs.calls[op]
}

// CallsOn is how many op calls were made on exactly path.
func (fs *FS) CallsOn(op Op, path string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.pathCalls[opPath{op, path}]
}

// Injected is how many calls failed by a rule.
func (fs *FS) Injected() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.injected
}

// Delayed is how many calls a delay-only rule held and then let through.
func (fs *FS) Delayed() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.delayed
}

// check counts a call and returns the rule that fires for it, if any.
func (fs *FS) check(op Op, paths ...string) *Rule { return fs.checkSize(op, -1, paths...) }

// checkSize is check for a call of size bytes (-1: not sized).
func (fs *FS) checkSize(op Op, size int64, paths ...string) *Rule {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.calls[op]++
	fs.pathCalls[opPath{op, paths[0]}]++
	var hit *Rule
	var since time.Duration // since start, read once per call
	for _, r := range fs.rules {
		if r.Op != OpAny && r.Op != op {
			continue
		}
		if !anyMatch(r.Path, paths) || r.Larger > 0 && size <= r.Larger {
			continue
		}
		if r.Alternate > 0 {
			if since == 0 {
				since = max(fs.now().Sub(fs.start), 1)
			}
			if (since/r.Alternate)%2 == 1 {
				continue // the rule's off phase
			}
		}
		r.seen++
		if hit != nil || r.seen <= r.After || (r.Once && r.fired > 0) {
			continue
		}
		r.fired++
		rule := r.Rule
		hit = &rule
	}
	switch {
	case hit == nil:
	case hit.delayOnly():
		fs.delayed++
	default:
		fs.injected++
	}
	return hit
}

func anyMatch(glob string, paths []string) bool {
	if glob == "" || glob == "*" {
		return true
	}
	for _, p := range paths {
		if Match(glob, p) {
			return true
		}
	}
	return false
}

func (fs *FS) done(op Op, path string, err error, injected bool, delayed time.Duration) {
	fs.mu.Lock()
	h := fs.hook
	fs.mu.Unlock()
	if h != nil {
		h(Event{Op: op, Path: path, Err: err, Injected: injected, Delayed: delayed})
	}
}

// hold applies a firing rule's delay and reports whether the call then
// goes through (a delay-only rule), with the time it was held.
func hold(r *Rule) (pass bool, delayed time.Duration) {
	if r == nil {
		return true, 0
	}
	if r.Delay > 0 {
		time.Sleep(r.Delay)
	}
	return r.delayOnly(), r.Delay
}

func injectErr(op Op, path string, r *Rule) error {
	return &os.PathError{Op: op.String(), Path: path, Err: &InjectedError{Errno: r.errno()}}
}

// do runs a call that returns only an error through the rules and the hook.
func (fs *FS) do(op Op, path string, call func() error, extra ...string) error {
	r := fs.check(op, append([]string{path}, extra...)...)
	pass, delayed := hold(r)
	if !pass {
		err := injectErr(op, path, r)
		fs.done(op, path, err, true, delayed)
		return err
	}
	err := call()
	fs.done(op, path, err, false, delayed)
	return err
}

// Create implements vfs.FS.
func (fs *FS) Create(name string, perm os.FileMode) (vfs.File, error) {
	var f vfs.File
	err := fs.do(OpCreate, name, func() (err error) { f, err = fs.inner.Create(name, perm); return })
	if err != nil {
		return nil, err
	}
	return &file{fs: fs, f: f, name: name}, nil
}

// OpenReadWrite implements vfs.FS.
func (fs *FS) OpenReadWrite(name string) (vfs.File, error) {
	var f vfs.File
	err := fs.do(OpOpen, name, func() (err error) { f, err = fs.inner.OpenReadWrite(name); return })
	if err != nil {
		return nil, err
	}
	return &file{fs: fs, f: f, name: name}, nil
}

// Open implements vfs.FS.
func (fs *FS) Open(name string) (vfs.File, error) {
	var f vfs.File
	err := fs.do(OpOpen, name, func() (err error) { f, err = fs.inner.Open(name); return })
	if err != nil {
		return nil, err
	}
	return &file{fs: fs, f: f, name: name}, nil
}

// Rename implements vfs.FS.
func (fs *FS) Rename(oldname, newname string) error {
	return fs.do(OpRename, oldname, func() error { return fs.inner.Rename(oldname, newname) }, newname)
}

// Remove implements vfs.FS.
func (fs *FS) Remove(name string) error {
	return fs.do(OpRemove, name, func() error { return fs.inner.Remove(name) })
}

// MkdirAll implements vfs.FS.
func (fs *FS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.do(OpMkdir, dir, func() error { return fs.inner.MkdirAll(dir, perm) })
}

// ReadDir implements vfs.FS.
func (fs *FS) ReadDir(dir string) ([]string, error) {
	var names []string
	err := fs.do(OpReadDir, dir, func() (err error) { names, err = fs.inner.ReadDir(dir); return })
	return names, err
}

// Stat implements vfs.FS.
func (fs *FS) Stat(name string) (os.FileInfo, error) {
	var fi os.FileInfo
	err := fs.do(OpStat, name, func() (err error) { fi, err = fs.inner.Stat(name); return })
	return fi, err
}

// SyncDir implements vfs.FS.
func (fs *FS) SyncDir(dir string) error {
	return fs.do(OpSyncDir, dir, func() error { return fs.inner.SyncDir(dir) })
}

// Lock implements vfs.FS.
func (fs *FS) Lock(name string) (io.Closer, error) {
	var c io.Closer
	err := fs.do(OpLock, name, func() (err error) { c, err = fs.inner.Lock(name); return })
	return c, err
}

type file struct {
	fs   *FS
	f    vfs.File
	name string
}

func (f *file) Read(p []byte) (int, error) {
	var n int
	err := f.fs.do(OpRead, f.name, func() (err error) { n, err = f.f.Read(p); return })
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	var n int
	err := f.fs.do(OpRead, f.name, func() (err error) { n, err = f.f.ReadAt(p, off); return })
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	r := f.fs.checkSize(OpWrite, int64(len(p)), f.name)
	pass, delayed := hold(r)
	if !pass {
		n := 0
		if r.Torn && len(p) > 0 {
			k := len(p) / 2
			if r.TornBytes > 0 {
				k = min(r.TornBytes, len(p))
			}
			n, _ = f.f.Write(p[:k])
		}
		err := injectErr(OpWrite, f.name, r)
		f.fs.done(OpWrite, f.name, err, true, delayed)
		return n, err
	}
	n, err := f.f.Write(p)
	f.fs.done(OpWrite, f.name, err, false, delayed)
	return n, err
}

func (f *file) Close() error {
	return f.fs.do(OpClose, f.name, f.f.Close)
}

func (f *file) Sync() error {
	return f.fs.do(OpSync, f.name, f.f.Sync)
}

func (f *file) Truncate(size int64) error {
	return f.fs.do(OpTruncate, f.name, func() error { return f.f.Truncate(size) })
}

func (f *file) Preallocate(off, n int64) error {
	r := f.fs.checkSize(OpPreallocate, n, f.name)
	pass, delayed := hold(r)
	if !pass {
		err := injectErr(OpPreallocate, f.name, r)
		f.fs.done(OpPreallocate, f.name, err, true, delayed)
		return err
	}
	err := f.f.Preallocate(off, n)
	f.fs.done(OpPreallocate, f.name, err, false, delayed)
	return err
}

// StartWriteback passes the call on to the wrapped file, if it can start
// writeback (vfs.WritebackStarter); no rule applies to it, since it
// promises nothing.
func (f *file) StartWriteback(off, n int64) error { return vfs.StartWriteback(f.f, off, n) }

func (f *file) Seek(offset int64, whence int) (int64, error) { return f.f.Seek(offset, whence) }
func (f *file) Stat() (os.FileInfo, error)                   { return f.f.Stat() }
func (f *file) Birth() time.Time                             { return f.f.Birth() }
func (f *file) Name() string                                 { return f.name }

// Match reports whether path matches glob: "*" matches any run of
// characters including "/", "?" matches one character, anything else
// matches itself.
func Match(glob, path string) bool {
	// Iterative wildcard matching with single-star backtracking.
	g, p := 0, 0
	star, mark := -1, 0
	for p < len(path) {
		switch {
		case g < len(glob) && (glob[g] == '?' || glob[g] == path[p]) && glob[g] != '*':
			g++
			p++
		case g < len(glob) && glob[g] == '*':
			star, mark = g, p
			g++
		case star >= 0:
			mark++
			p = mark
			g = star + 1
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}
