//go:build dst

package wab

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// dstFaultKinds are the faults the property layer places: an errorfs rule
// template taking the position (and, for torn writes, the byte count).
var dstFaultKinds = []struct {
	name  string
	rule  func(at, n int) string
	close bool // may also be armed at Close only
}{
	{"fdatasync EIO", func(at, _ int) string { return fmt.Sprintf("sync:*.wab:after=%d:once:EIO", at) }, true},
	{"torn write EIO", func(at, n int) string { return fmt.Sprintf("write:*.wab:after=%d:once:torn=%d:EIO", at, n) }, true},
	{"torn write ENOSPC", func(at, n int) string { return fmt.Sprintf("write:*.wab:after=%d:once:torn=%d:ENOSPC", at, n) }, true},
	{"write ENOSPC", func(at, _ int) string { return fmt.Sprintf("write:*.wab:after=%d:once:ENOSPC", at) }, true},
	{"rename EIO", func(at, _ int) string { return fmt.Sprintf("rename:*.wab:after=%d:once:EIO", at) }, true},
	{"directory fsync EIO", func(at, _ int) string { return fmt.Sprintf("syncdir:*/shard-*:after=%d:once:EIO", at) }, true},
	{"create ENOSPC", func(at, _ int) string { return fmt.Sprintf("create:*.wab:after=%d:once:ENOSPC", at) }, false},
	{"preallocate ENOSPC", func(at, _ int) string { return fmt.Sprintf("preallocate:*.wab:after=%d:once:ENOSPC", at) }, false},
	{"truncate ENOSPC", func(at, _ int) string { return fmt.Sprintf("truncate:*.wab:after=%d:once:ENOSPC", at) }, true},
}

var dstFaultGen = rapid.Custom(func(t *rapid.T) dstFault {
	i := rapid.IntRange(0, len(dstFaultKinds)-1).Draw(t, "fault")
	k := dstFaultKinds[i]
	f := dstFault{Rule: k.rule(rapid.IntRange(0, 40).Draw(t, "at"), rapid.IntRange(1, 400).Draw(t, "torn"))}
	if k.close {
		f.Close = rapid.Bool().Draw(t, "at-close")
	}
	return f
})

// drawSpec draws a whole run: workload, fault list, crash point. Every
// generator shrinks towards the simplest run (few records, one shard, no
// fault, no mid-run crash), so a failure shrinks to a minimal
// counterexample.
func drawSpec(t *rapid.T) *dstSpec {
	s := &dstSpec{
		Scenario:         "property",
		Seed:             hexSeed(rapid.Uint64().Draw(t, "seed")),
		Records:          rapid.IntRange(1, 60).Draw(t, "records"),
		Shards:           rapid.IntRange(1, 2).Draw(t, "shards"),
		Producers:        rapid.IntRange(1, 3).Draw(t, "producers"),
		Interleave:       rapid.Bool().Draw(t, "interleave"),
		MaxPerRequest:    rapid.IntRange(1, 6).Draw(t, "per-request"),
		MaxPayload:       rapid.IntRange(0, 300).Draw(t, "payload"),
		DurablePct:       rapid.SampledFrom([]int{100, 70, 30, 0}).Draw(t, "durable-pct"),
		SegmentMaxBytes:  rapid.Int64Range(300, 8192).Draw(t, "segment-bytes"),
		PreallocateBytes: rapid.SampledFrom([]int64{-1, 256, 4096}).Draw(t, "prealloc"),
		BatchMaxRecords:  rapid.IntRange(1, 16).Draw(t, "batch-records"),
		Faults:           rapid.SliceOfN(dstFaultGen, 0, 4).Draw(t, "faults"),
		CrashMode:        rapid.SampledFrom([]string{"drop", "prefix", "torn"}).Draw(t, "crash-mode"),
		Junk:             rapid.Bool().Draw(t, "junk"),
		Kill:             rapid.Bool().Draw(t, "kill"),
	}
	s.CrashOp = rapid.SampledFrom([]string{"", "*", "sync", "write", "rename", "syncdir", "step"}).Draw(t, "crash-op")
	if s.CrashOp != "" {
		s.CrashN = rapid.IntRange(0, 300).Draw(t, "crash-n")
	}
	return s
}

// TestDSTProperty lets rapid generate the fault list itself and shrink any
// failure to a minimal spec (-rapid.checks sets the number of runs).
func TestDSTProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := drawSpec(t)
		if vs := runSpec(spec); len(vs) > 0 {
			t.Fatal(report(spec, vs))
		}
	})
}

// captureTB is a rapid.TB that records a failure instead of failing.
type captureTB struct {
	*testing.T
	failed bool
	msgs   []string
}

func (c *captureTB) Errorf(format string, args ...any) {
	c.failed = true
	c.msgs = append(c.msgs, fmt.Sprintf(format, args...))
}
func (c *captureTB) Error(args ...any)                 { c.Errorf("%s", fmt.Sprint(args...)) }
func (c *captureTB) Fatalf(format string, args ...any) { c.Errorf(format, args...) }
func (c *captureTB) Fatal(args ...any)                 { c.Error(args...) }
func (c *captureTB) FailNow()                          { c.failed = true }
func (c *captureTB) Fail()                             { c.failed = true }
func (c *captureTB) Failed() bool                      { return c.failed }

// TestDSTPropertyShrinks runs the property on a flusher that acknowledges
// Durable requests before fdatasync and checks that rapid finds it and
// shrinks it to a minimal counterexample: one Durable record, no fault, no
// crash point.
func TestDSTPropertyShrinks(t *testing.T) {
	if f := flag.Lookup("rapid.nofailfile"); f != nil {
		old := f.Value.String()
		f.Value.Set("true")
		defer f.Value.Set(old)
	}
	dstBrokenAckBeforeSync.Store(true)
	defer dstBrokenAckBeforeSync.Store(false)
	var last *dstSpec
	c := &captureTB{T: t}
	rapid.Check(c, func(rt *rapid.T) {
		spec := drawSpec(rt)
		if vs := runSpec(spec); hasViolation(vs, "ack-before-stable-storage") {
			last = spec
			rt.Fatal(report(spec, vs))
		}
	})
	if !c.failed || last == nil {
		t.Fatal("rapid did not find the broken flusher")
	}
	t.Logf("minimal counterexample: %s", last.json())
	if last.Records != 1 || len(last.Faults) != 0 || last.CrashOp != "" || last.DurablePct != 100 {
		t.Fatalf("counterexample not minimal: %s\n%s", last.json(), strings.Join(c.msgs, "\n"))
	}
}
