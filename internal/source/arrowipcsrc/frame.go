package arrowipcsrc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// fileMagic opens and closes an IPC file (random-access format); the
// first message starts at fileHeaderLen, after the magic and its padding.
const (
	fileMagic     = "ARROW1"
	fileHeaderLen = 8
	contToken     = 0xFFFFFFFF
)

// frameKind is what the framing says is at an offset.
type frameKind int

const (
	// frameMessage: a complete message, [off, end).
	frameMessage frameKind = iota
	// frameIncomplete: the message at the offset is not all there yet (or
	// nothing is): the writer has not finished it.
	frameIncomplete
	// frameEOS: the end-of-stream marker, [off, end).
	frameEOS
)

// frame is one message of an IPC stream as its framing lays it out:
// [continuation 0xFFFFFFFF][int32 metadata length][metadata][body]. The
// metadata is a flatbuffer Message, whose header type and body length are
// all the framing reads of it.
type frame struct {
	kind     frameKind
	off, end int64
	typ      ipc.MessageType
	metaOff  int64 // metadata: [metaOff, metaOff+metaLen)
	metaLen  int64
	bodyLen  int64 // body: [metaOff+metaLen, end)
	prefixed bool  // has the continuation token (not a pre-0.15 message)
}

// errFraming is wrapped by every error nextFrame returns: the bytes at the
// offset are not an IPC message, so nothing after them can be found.
var errFraming = errors.New("not an Arrow IPC message")

// limits bound what one message may claim, so that a corrupt length is
// refused rather than waited for or allocated.
type limits struct {
	maxMeta int64
	maxBody int64
	maxRows int64 // rows of one record batch
}

// nextFrame reads the framing of the message at off in r, whose first
// size bytes are written. It reads the prefix and the metadata, never the
// body: a message is complete when the framing says it ends within size.
func nextFrame(r io.ReaderAt, off, size int64, lim limits) (frame, error) {
	f := frame{kind: frameIncomplete, off: off}
	var pre [8]byte
	n := min(size-off, 8)
	if n < 4 {
		return f, nil
	}
	if _, err := r.ReadAt(pre[:n], off); err != nil {
		return f, fmt.Errorf("read at %d: %w", off, err)
	}
	cid := binary.LittleEndian.Uint32(pre[:4])
	var metaLen int64
	switch cid {
	case 0:
		f.kind, f.end = frameEOS, off+4
		return f, nil
	case contToken:
		if n < 8 {
			return f, nil
		}
		l := int32(binary.LittleEndian.Uint32(pre[4:8]))
		if l == 0 {
			f.kind, f.end = frameEOS, off+8
			return f, nil
		}
		metaLen, f.metaOff, f.prefixed = int64(l), off+8, true
	default:
		// Before format 0.15 a message began with its length.
		metaLen, f.metaOff = int64(int32(cid)), off+4
	}
	if metaLen < 8 || metaLen > lim.maxMeta {
		return f, fmt.Errorf("%w: metadata length %d at offset %d (limit %d)", errFraming, metaLen, off, lim.maxMeta)
	}
	f.metaLen = metaLen
	if f.metaOff+metaLen > size {
		return f, nil
	}
	meta := make([]byte, metaLen)
	if _, err := r.ReadAt(meta, f.metaOff); err != nil {
		return f, fmt.Errorf("read at %d: %w", f.metaOff, err)
	}
	typ, bodyLen, err := messageHeader(meta)
	if err != nil {
		return f, fmt.Errorf("%w: at offset %d: %w", errFraming, off, err)
	}
	if bodyLen < 0 || bodyLen > lim.maxBody {
		return f, fmt.Errorf("%w: body length %d at offset %d (limit %d)", errFraming, bodyLen, off, lim.maxBody)
	}
	f.typ, f.bodyLen = typ, bodyLen
	if end := f.metaOff + metaLen + bodyLen; end <= size {
		f.kind, f.end = frameMessage, end
	}
	return f, nil
}

// messageHeader reads a flatbuffer Message's header type (field 1) and
// body length (field 3), checking every offset against buf: the framing
// needs no more of it, and must not trust it.
func messageHeader(buf []byte) (ipc.MessageType, int64, error) {
	u32 := func(at int64) (uint32, bool) {
		if at < 0 || at+4 > int64(len(buf)) {
			return 0, false
		}
		return binary.LittleEndian.Uint32(buf[at:]), true
	}
	u16 := func(at int64) (uint16, bool) {
		if at < 0 || at+2 > int64(len(buf)) {
			return 0, false
		}
		return binary.LittleEndian.Uint16(buf[at:]), true
	}
	root, ok := u32(0)
	if !ok {
		return 0, 0, errors.New("metadata too short")
	}
	table := int64(root)
	soff, ok := u32(table)
	if !ok {
		return 0, 0, errors.New("metadata root outside the metadata")
	}
	vtable := table - int64(int32(soff))
	vlen, ok := u16(vtable)
	if !ok || vlen < 4 || vtable+int64(vlen) > int64(len(buf)) {
		return 0, 0, errors.New("metadata vtable outside the metadata")
	}
	field := func(i int64) int64 {
		at := 4 + 2*i
		if at >= int64(vlen) {
			return 0 // as flatbuffers' Table.Offset reads it
		}
		o, _ := u16(vtable + at)
		return int64(o)
	}
	var typ ipc.MessageType
	if o := field(1); o != 0 {
		if table+o >= int64(len(buf)) {
			return 0, 0, errors.New("message header type outside the metadata")
		}
		typ = ipc.MessageType(buf[table+o])
	}
	var bodyLen int64
	if o := field(3); o != 0 {
		if table+o+8 > int64(len(buf)) {
			return 0, 0, errors.New("message body length outside the metadata")
		}
		bodyLen = int64(binary.LittleEndian.Uint64(buf[table+o:]))
	}
	return typ, bodyLen, nil
}

// fileComplete reports whether an IPC file of size bytes is finished: it
// ends with the magic, after a footer whose length fits in the file.
func fileComplete(r io.ReaderAt, size int64) bool {
	const tail = int64(4 + len(fileMagic))
	if size < fileHeaderLen+tail {
		return false
	}
	var b [tail]byte
	if _, err := r.ReadAt(b[:], size-tail); err != nil {
		return false
	}
	footer := int64(int32(binary.LittleEndian.Uint32(b[:4])))
	return string(b[4:]) == fileMagic && footer > 0 && footer <= size-fileHeaderLen-tail
}
