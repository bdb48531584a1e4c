package arrowipcsrc

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func kinds(steps []step) (out []evKind) {
	for _, s := range steps {
		out = append(out, s.kind)
	}
	return out
}

// TestReaderWholeAndGrowing: a stream and a file written by arrow-go read
// as their batches then done; while being written — at every length —
// they read up to their last complete batch and no further, waiting for
// the rest, and then read on to the same batches.
func TestReaderWholeAndGrowing(t *testing.T) {
	for _, file := range []bool{false, true} {
		b := writeIPC(t, file, 3, 0, 5)
		whole := readAll(t, newReader(bytes.NewReader(b), fuzzLimits), int64(len(b)))
		want := []evKind{evBatch, evBatch, evBatch, evDone}
		if got := kinds(whole); !equalKinds(got, want) || whole[0].rows != 3 || whole[1].rows != 0 || whole[2].rows != 5 {
			t.Fatalf("file=%v: read %v, want 3 batches of 3, 0, 5 rows then done", file, whole)
		}
		// Every prefix: the batches complete in it, then incomplete; then
		// the rest.
		for k := range len(b) {
			rd := newReader(bytes.NewReader(b), fuzzLimits)
			part := readAll(t, rd, int64(k))
			if part[len(part)-1].kind != evIncomplete {
				t.Fatalf("file=%v: a prefix of %d of %d bytes ends %v, want incomplete", file, k, len(b), part)
			}
			for i, s := range part[:len(part)-1] {
				if s != whole[i] || s.end > int64(k) {
					t.Fatalf("file=%v: prefix %d step %d = %v, want %v within the prefix", file, k, i, s, whole[i])
				}
			}
			rest := append(part[:len(part)-1], readAll(t, rd, int64(len(b)))...)
			if len(rest) != len(whole) {
				t.Fatalf("file=%v: prefix %d then the rest read %v, want %v", file, k, rest, whole)
			}
			for i := range rest {
				if rest[i] != whole[i] {
					t.Fatalf("file=%v: prefix %d then the rest read %v, want %v", file, k, rest, whole)
				}
			}
		}
	}
}

func equalKinds(a, b []evKind) bool { return bytes.Equal(kindBytes(a), kindBytes(b)) }

func kindBytes(ks []evKind) []byte {
	out := make([]byte, len(ks))
	for i, k := range ks {
		out[i] = byte(k)
	}
	return out
}

// batchFrames returns the [off, end) of each record batch message of b.
func batchFrames(t *testing.T, b []byte) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for _, s := range readAll(t, newReader(bytes.NewReader(b), fuzzLimits), int64(len(b))) {
		if s.kind == evBatch {
			out = append(out, [2]int64{s.off, s.end})
		}
	}
	return out
}

// corruptBatch makes the record batch message at fr undecodable and
// keeps its framing: its body length in the metadata is kept, its
// buffers' lengths are not (the metadata's last bytes, where the
// flatbuffer keeps the vectors, are overwritten).
func corruptBatch(b []byte, fr [2]int64) {
	metaLen := int64(binary.LittleEndian.Uint32(b[fr[0]+4:]))
	body := fr[0] + 8 + metaLen
	for i := body; i < fr[1]; i++ {
		b[i] = 0xff
	}
	// Node and buffer descriptions: the vectors near the metadata's end.
	for i := fr[0] + 8 + metaLen - 48; i < fr[0]+8+metaLen-8; i++ {
		b[i] ^= 0x5a
	}
}

// TestReaderCorruptBatchIsUndecodableAndReadingGoesOn: a batch whose
// bytes are garbage inside intact framing yields an undecodable event of
// exactly its message, and the batches after it are read.
func TestReaderCorruptBatchIsUndecodableAndReadingGoesOn(t *testing.T) {
	for _, file := range []bool{false, true} {
		b := writeIPC(t, file, 3, 4, 5)
		frames := batchFrames(t, b)
		corruptBatch(b, frames[1])
		steps := readAll(t, newReader(bytes.NewReader(b), fuzzLimits), int64(len(b)))
		want := []evKind{evBatch, evUndecodable, evBatch, evDone}
		if !equalKinds(kinds(steps), want) || steps[1].off != frames[1][0] || steps[1].end != frames[1][1] || steps[1].batch != 1 ||
			steps[0].rows != 3 || steps[2].rows != 5 || steps[2].batch != 2 {
			t.Fatalf("file=%v: read %v, want batch 0, batch 1 undecodable at %v, batch 2, done", file, steps, frames[1])
		}
	}
}

// schemaInFooterOnly is an IPC file as Arrow JS writes it: the schema in
// the footer, not as the first message.
func schemaInFooterOnly(t testing.TB, sizes ...int) []byte {
	t.Helper()
	b := writeIPC(t, true, sizes...)
	fr, err := nextFrame(bytes.NewReader(b), fileHeaderLen, int64(len(b)), fuzzLimits)
	if err != nil || fr.kind != frameMessage || fr.typ != 1 {
		t.Fatalf("first message %+v, %v: want the schema", fr, err)
	}
	return append(bytes.Clone(b[:fileHeaderLen]), b[fr.end:]...)
}

// TestReaderSchemaInFooterOnly: a file whose schema is only in its footer
// is read once the footer is there (before, nothing: its batches cannot
// be decoded yet), every batch of it.
func TestReaderSchemaInFooterOnly(t *testing.T) {
	b := schemaInFooterOnly(t, 3, 0, 5)
	whole := readAll(t, newReader(bytes.NewReader(b), fuzzLimits), int64(len(b)))
	if !equalKinds(kinds(whole), []evKind{evBatch, evBatch, evBatch, evDone}) || whole[0].rows != 3 || whole[2].rows != 5 {
		t.Fatalf("read %v, want 3 batches then done", whole)
	}
	rd := newReader(bytes.NewReader(b), fuzzLimits)
	if part := readAll(t, rd, int64(len(b)-1)); !equalKinds(kinds(part), []evKind{evIncomplete}) {
		t.Fatalf("without its last byte it read %v, want nothing yet", part)
	}
	if rest := readAll(t, rd, int64(len(b))); len(rest) != len(whole) || rest[2] != whole[2] {
		t.Fatalf("completed it read %v, want %v", rest, whole)
	}
}
