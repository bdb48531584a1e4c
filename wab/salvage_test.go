package wab

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/internal/vfs/errorfs"
	"github.com/weir-io/weir/internal/vfs/memfs"
)

// salvageRecs are the eight records every salvage test segment starts
// with: payloads "rec-0" .. "rec-7" (padded), each with a meta of its own.
func salvageRecs() []Record {
	recs := make([]Record, 8)
	for i := range recs {
		recs[i] = Record{
			Durability: Durability(i % 2),
			Received:   int64(1000 + i),
			Meta:       fmt.Appendf(nil, "meta-%d", i),
			Payload:    fmt.Appendf(nil, "rec-%d-%s", i, bytes.Repeat([]byte{'x'}, 20+i)),
		}
	}
	return recs
}

// salvageImage writes the records as a sealed segment of shard 0, sequence
// 1 (open: without its footer, under the open name) and returns the
// segment's path, its bytes and each record's offset (then the footer's).
func salvageImage(t *testing.T, fsys vfs.FS, dir string, open bool) (string, []byte, []int64) {
	t.Helper()
	path := filepath.Join(dir, ShardDirName(0), SegmentName(1)+".sealed")
	if err := fsys.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	recs := salvageRecs()
	h := Header{Shard: 0, Seq: 1, Instance: [16]byte{7}}
	if !open {
		h.Flags = FlagSyncMarks | FlagTimeOrderedIDs
	}
	if err := WriteSealed(fsys, path, h, recs); err != nil {
		t.Fatal(err)
	}
	b := readFile(t, fsys, path)
	offs := []int64{HeaderSize}
	for _, r := range recs {
		offs = append(offs, offs[len(offs)-1]+RecordSize(len(r.Meta), len(r.Payload)))
	}
	if open {
		b = b[:len(b)-FooterFrameSize]
		if err := fsys.Remove(path); err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, ShardDirName(0), SegmentName(1))
	}
	return path, b, offs
}

func readFile(t *testing.T, fsys vfs.FS, path string) []byte {
	t.Helper()
	f, err := fsys.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, fsys vfs.FS, path string, b []byte) {
	t.Helper()
	if err := fsys.Remove(path); err != nil && !isNotExist(err) {
		t.Fatal(err)
	}
	f, err := fsys.Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
}

// flip damages the body of record i (its CRC no longer matches).
func flip(b []byte, offs []int64, i int) { b[offs[i]+FrameOverhead+2] ^= 0x40 }

func TestSalvage(t *testing.T) {
	frame := func(offs []int64, i int) int64 { return offs[i+1] - offs[i] }
	tests := []struct {
		name    string
		open    bool
		damage  func(b []byte, offs []int64)
		kept    []int // indexes of the records that survive
		lost    func(offs []int64, size int64) []Range
		moved   uint64
		removed bool
	}{
		{
			name:   "middle",
			damage: func(b []byte, offs []int64) { flip(b, offs, 3) },
			kept:   []int{0, 1, 2, 4, 5, 6, 7},
			lost: func(offs []int64, _ int64) []Range {
				return []Range{{Off: offs[3], End: offs[4], Frames: 1, Counted: true}}
			},
			moved: 4,
		},
		{
			name:   "tail record",
			damage: func(b []byte, offs []int64) { flip(b, offs, 7) },
			kept:   []int{0, 1, 2, 3, 4, 5, 6},
			lost: func(offs []int64, _ int64) []Range {
				return []Range{{Off: offs[7], End: offs[8], Frames: 1, Counted: true}}
			},
		},
		{
			name:   "footer",
			damage: func(b []byte, offs []int64) { b[offs[8]+FrameOverhead+3] ^= 1 },
			kept:   []int{0, 1, 2, 3, 4, 5, 6, 7},
			lost: func(offs []int64, size int64) []Range {
				return []Range{{Off: offs[8], End: size, Frames: 1, Counted: true}}
			},
		},
		{
			name: "torn length field",
			damage: func(b []byte, offs []int64) {
				binary.BigEndian.PutUint32(b[offs[2]:], 0xfffff000)
			},
			kept:  []int{0, 1, 3, 4, 5, 6, 7},
			lost:  func(offs []int64, _ int64) []Range { return []Range{{Off: offs[2], End: offs[3]}} },
			moved: 5,
		},
		{
			name: "length field shortened",
			damage: func(b []byte, offs []int64) {
				binary.BigEndian.PutUint32(b[offs[5]:], uint32(frame(offs, 5)-FrameHeaderSize-7))
			},
			kept:  []int{0, 1, 2, 3, 4, 6, 7},
			lost:  func(offs []int64, _ int64) []Range { return []Range{{Off: offs[5], End: offs[6]}} },
			moved: 2,
		},
		{
			name: "every frame bad",
			damage: func(b []byte, offs []int64) {
				for i := range 8 {
					flip(b, offs, i)
				}
				b[offs[8]+FrameOverhead+3] ^= 1
			},
			lost: func(_ []int64, size int64) []Range {
				return []Range{{Off: HeaderSize, End: size, Frames: 9, Counted: true}}
			},
			removed: true,
		},
		{
			name: "multiple regions",
			damage: func(b []byte, offs []int64) {
				flip(b, offs, 1)
				flip(b, offs, 4)
				binary.BigEndian.PutUint32(b[offs[5]:], 3)
			},
			kept: []int{0, 2, 3, 6, 7},
			lost: func(offs []int64, _ int64) []Range {
				return []Range{{Off: offs[1], End: offs[2], Frames: 1, Counted: true}, {Off: offs[4], End: offs[6]}}
			},
			moved: 4,
		},
		{
			name:   "open segment",
			open:   true,
			damage: func(b []byte, offs []int64) { flip(b, offs, 2) },
			kept:   []int{0, 1, 3, 4, 5, 6, 7},
			lost: func(offs []int64, _ int64) []Range {
				return []Range{{Off: offs[2], End: offs[3], Frames: 1, Counted: true}}
			},
			moved: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := memfs.New()
			dir := "/wab"
			path, img, offs := salvageImage(t, fsys, dir, tc.open)
			orig := slices.Clone(img)
			tc.damage(img, offs)
			writeFile(t, fsys, path, img)

			got, err := Salvage(context.Background(), fsys, dir)
			if err != nil || len(got) != 1 || got[0].Path != path || got[0].Salvaged == nil {
				t.Fatalf("Salvage: %+v, %v", got, err)
			}
			s := got[0].Salvaged
			var keptRecs uint64
			for _, r := range s.Kept {
				keptRecs += r.Records
			}
			wantLost := tc.lost(offs, int64(len(img)))
			var lostBytes int64
			for _, r := range wantLost {
				lostBytes += r.End - r.Off
			}
			if s.Records != uint64(len(tc.kept)) || keptRecs != s.Records || !slices.Equal(s.Lost, wantLost) ||
				s.BytesLost != lostBytes || s.Moved != tc.moved || s.Removed != tc.removed {
				t.Fatalf("report %+v, want %d records, lost %v (%d bytes), %d moved, removed %v",
					s, len(tc.kept), wantLost, lostBytes, tc.moved, tc.removed)
			}

			// The original is kept, byte for byte.
			wantAside := filepath.Join(dir, DamagedDirName, ShardDirName(0), filepath.Base(path))
			if s.Aside != wantAside || !bytes.Equal(readFile(t, fsys, wantAside), img) {
				t.Fatalf("original kept at %s, want %s with the damaged bytes", s.Aside, wantAside)
			}
			if tc.removed {
				if _, err := fsys.Stat(path); !isNotExist(err) {
					t.Fatalf("segment without records left in place: %v", err)
				}
				return
			}

			// The new segment: the same header, every kept record byte for
			// byte, clean, and Repair finds nothing more.
			info, err := InspectSegment(fsys, path)
			if err != nil || !info.OK() || info.Records != uint64(len(tc.kept)) || info.HasFooter == tc.open {
				t.Fatalf("salvaged segment: %+v, %v", info, err)
			}
			b := readFile(t, fsys, path)
			if !bytes.Equal(b[:HeaderSize], orig[:HeaderSize]) {
				t.Fatal("salvaged segment has a different header")
			}
			var want []byte
			for _, i := range tc.kept {
				want = append(want, orig[offs[i]:offs[i+1]]...)
			}
			if end := int64(len(b)) - FooterFrameSize; !tc.open && !bytes.Equal(b[HeaderSize:end], want) ||
				tc.open && !bytes.Equal(b[HeaderSize:], want) {
				t.Fatal("salvaged frames are not the kept frames, byte for byte")
			}
			recs, h := readSegment(t, fsys, path)
			all := salvageRecs()
			for j, r := range recs {
				i := tc.kept[j]
				if r.Payload != string(all[i].Payload) || r.Meta != string(all[i].Meta) || r.Received != all[i].Received {
					t.Fatalf("record %d is %+v, want record %d", j, r, i)
				}
				// Ids by position hold up to the first lost range.
				if j == i && r.ID != RecordID(h, uint64(i), all[i].Payload) {
					t.Fatalf("record %d changed id", i)
				}
			}
			if got, err := Repair(context.Background(), fsys, dir, false); err != nil || len(got) != 0 {
				t.Fatalf("Repair after salvage: %+v, %v", got, err)
			}
			if tc.open {
				// Open seals it like any crash leftover.
				l := mustOpen(t, Options{Dir: dir, Shards: 1, FS: fsys})
				mustClose(t, l)
				if recs := readAllSealed(t, fsys, dir); len(recs) != len(tc.kept) {
					t.Fatalf("after Open: %d records, want %d", len(recs), len(tc.kept))
				}
			}
		})
	}
}

// TestSalvageProgress: a sidecar counting records past the damage is
// lowered to the records before it; one within them is left as it is.
func TestSalvageProgress(t *testing.T) {
	for _, tc := range []struct {
		confirmed uint64
		want      uint64
		lowered   bool
	}{{1, 1, false}, {3, 3, false}, {6, 3, true}} {
		fsys := memfs.New()
		path, img, offs := salvageImage(t, fsys, "/wab", false)
		if err := WriteProgress(fsys, path, Progress{Records: tc.confirmed, Offset: offs[tc.confirmed]}); err != nil {
			t.Fatal(err)
		}
		flip(img, offs, 3)
		writeFile(t, fsys, path, img)
		got, err := Salvage(context.Background(), fsys, "/wab")
		if err != nil || len(got) != 1 || got[0].Salvaged.Progress != tc.lowered {
			t.Fatalf("confirmed %d: %+v, %v", tc.confirmed, got, err)
		}
		if p, err := ReadProgress(fsys, path); err != nil || p != (Progress{Records: tc.want, Offset: offs[tc.want]}) {
			t.Fatalf("confirmed %d: sidecar %+v, %v", tc.confirmed, p, err)
		}
	}
}

// TestSalvageFaults: a failed fdatasync, write or rename during a salvage
// leaves the damaged segment in place, unchanged, with no temporary file,
// and fdatasync is not retried.
func TestSalvageFaults(t *testing.T) {
	for _, rule := range []errorfs.Rule{
		{Op: errorfs.OpSync, Path: "*.sealed.tmp", Errno: syscall.ENOSPC},
		{Op: errorfs.OpSync, Path: "*.sealed.tmp", After: 1, Errno: syscall.EIO},
		{Op: errorfs.OpWrite, Path: "*.sealed.tmp", Errno: syscall.ENOSPC, Torn: true},
		{Op: errorfs.OpSync, Path: "*/" + DamagedDirName + "/*", Errno: syscall.EIO},
		{Op: errorfs.OpSyncDir, Path: "*/" + DamagedDirName + "/*", Errno: syscall.EIO},
		{Op: errorfs.OpRename, Path: "/wab/shard-000/*.tmp", Errno: syscall.EIO},
	} {
		t.Run(rule.String(), func(t *testing.T) {
			mem := memfs.New()
			path, img, offs := salvageImage(t, mem, "/wab", false)
			flip(img, offs, 3)
			writeFile(t, mem, path, img)
			fsys := errorfs.New(mem, rule)
			got, err := Salvage(context.Background(), fsys, "/wab")
			var inj *errorfs.InjectedError
			if !errors.As(err, &inj) || len(got) != 1 || got[0].Salvaged != nil {
				t.Fatalf("Salvage: %+v, %v", got, err)
			}
			if rule.Errno == syscall.ENOSPC && !errors.Is(err, ErrDiskFull) {
				t.Fatalf("out of space not reported as ErrDiskFull: %v", err)
			}
			if !bytes.Equal(readFile(t, mem, path), img) {
				t.Fatal("the damaged segment changed")
			}
			if _, err := mem.Stat(path + suffixTemp); !isNotExist(err) {
				t.Fatalf("temporary file left: %v", err)
			}
			if n := fsys.CallsOn(errorfs.OpSync, path+suffixTemp); n > 2 {
				t.Fatalf("%d fdatasyncs of the new segment, want at most 2", n)
			}
			if rule.Op == errorfs.OpSync && rule.After == 0 && rule.Path == "*.sealed.tmp" {
				if n := fsys.CallsOn(errorfs.OpSync, path+suffixTemp); n != 1 {
					t.Fatalf("fdatasync called %d times on the new segment after it failed", n)
				}
			}
			// Nothing was lost: a salvage without faults succeeds.
			if got, err := Salvage(context.Background(), mem, "/wab"); err != nil || len(got) != 1 || got[0].Salvaged.Records != 7 {
				t.Fatalf("second Salvage: %+v, %v", got, err)
			}
		})
	}
}

// TestSalvageHeaderDamaged: without its header a segment's records cannot
// keep their ids; Salvage leaves it and says so.
func TestSalvageHeaderDamaged(t *testing.T) {
	fsys := memfs.New()
	path, img, _ := salvageImage(t, fsys, "/wab", false)
	img[20] ^= 1
	writeFile(t, fsys, path, img)
	got, err := Salvage(context.Background(), fsys, "/wab")
	if !errors.Is(err, ErrCannotSalvage) || len(got) != 1 || got[0].Salvaged != nil {
		t.Fatalf("Salvage: %+v, %v", got, err)
	}
	if !bytes.Equal(readFile(t, fsys, path), img) {
		t.Fatal("the segment changed")
	}
}

// TestSalvageAgain: a second salvage of the same sequence keeps the
// first original and puts the second beside it.
func TestSalvageAgain(t *testing.T) {
	fsys := memfs.New()
	path, img, offs := salvageImage(t, fsys, "/wab", false)
	flip(img, offs, 3)
	writeFile(t, fsys, path, img)
	if _, err := Salvage(context.Background(), fsys, "/wab"); err != nil {
		t.Fatal(err)
	}
	b := readFile(t, fsys, path)
	b[HeaderSize+FrameOverhead+2] ^= 1
	writeFile(t, fsys, path, b)
	got, err := Salvage(context.Background(), fsys, "/wab")
	if err != nil || len(got) != 1 || got[0].Salvaged.Records != 6 {
		t.Fatalf("second Salvage: %+v, %v", got, err)
	}
	first := filepath.Join("/wab", DamagedDirName, ShardDirName(0), filepath.Base(path))
	if got[0].Salvaged.Aside != first+".2" || !bytes.Equal(readFile(t, fsys, first), img) || !bytes.Equal(readFile(t, fsys, first+".2"), b) {
		t.Fatalf("second original kept at %s", got[0].Salvaged.Aside)
	}
}

// TestSalvageCrash: a crash (unsynced data and directory entries lost)
// after any file-system call of a salvage leaves, under the segment's
// name, either the damaged segment as it was or the complete salvaged one
// — and in that case the damaged bytes under damaged/. Open then starts.
func TestSalvageCrash(t *testing.T) {
	for _, empty := range []bool{false, true} {
		mem := memfs.New()
		path, img, offs := salvageImage(t, mem, "/wab", false)
		for i := range 8 {
			if empty || i == 3 {
				flip(img, offs, i)
			}
		}
		writeFile(t, mem, path, img)
		aside := filepath.Join("/wab", DamagedDirName, ShardDirName(0), filepath.Base(path))
		fsys := errorfs.New(mem)
		var clones []*memfs.FS
		fsys.SetHook(func(errorfs.Event) {
			clones = append(clones, mem.CrashClone(memfs.CrashOptions{Mode: memfs.CrashDropUnsynced}))
		})
		if _, err := Salvage(context.Background(), fsys, "/wab"); err != nil {
			t.Fatal(err)
		}
		fsys.SetHook(nil)
		var salvaged int
		for i, c := range clones {
			b, err := func() ([]byte, error) {
				f, err := c.Open(path)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				return io.ReadAll(f)
			}()
			switch {
			case isNotExist(err) && empty:
				salvaged++
			case err != nil:
				t.Fatalf("crash %d: %v", i, err)
			case bytes.Equal(b, img):
				continue
			default:
				info, err := InspectSegment(c, path)
				if err != nil || !info.OK() || info.Records != 7 {
					t.Fatalf("crash %d: segment neither the damaged one nor the salvaged one: %+v, %v", i, info, err)
				}
				salvaged++
			}
			if b := readFile(t, c, aside); !bytes.Equal(b, img) {
				t.Fatalf("crash %d: the segment was replaced before its original was durable aside", i)
			}
			if !empty {
				l := mustOpen(t, Options{Dir: "/wab", Shards: 1, FS: c})
				mustClose(t, l)
			}
		}
		if salvaged == 0 || salvaged == len(clones) {
			t.Fatalf("empty %v: %d of %d crash images salvaged", empty, salvaged, len(clones))
		}
	}
}
