package arrowipcsrc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The decoder of arrow-go trusts a message's metadata: it makes slices as
// long as the vector lengths the flatbuffer claims (a schema's fields, a
// field's children) and decompresses a buffer into as many bytes as its
// prefix says. A corrupt length would make it allocate without bound, so
// verifyMeta checks, before anything is decoded, every vector and table
// the decoder walks against the metadata's bounds, and verifyBody every
// compressed buffer's stated length against the body limit. (The rest —
// offsets inside the body, which it slices — fails as a recovered panic
// or an error, and the batch is undecodable.)

// fbuf is a flatbuffer under verification.
type fbuf struct {
	b     []byte
	nodes int // tables visited: bounded, as the nesting depth is
}

const (
	maxFBDepth = 64
	maxFBNodes = 1 << 14
)

var errMeta = errors.New("metadata out of bounds")

func (f *fbuf) u32(at int64) (uint32, error) {
	if at < 0 || at+4 > int64(len(f.b)) {
		return 0, errMeta
	}
	return binary.LittleEndian.Uint32(f.b[at:]), nil
}

// table checks the table at pos and returns a function giving the
// absolute position of its field i (0 when absent).
func (f *fbuf) table(pos int64) (func(i int) int64, error) {
	if f.nodes++; f.nodes > maxFBNodes {
		return nil, fmt.Errorf("metadata with more than %d tables", maxFBNodes)
	}
	soff, err := f.u32(pos)
	if err != nil {
		return nil, err
	}
	vt := pos - int64(int32(soff))
	if vt < 0 || vt+4 > int64(len(f.b)) {
		return nil, errMeta
	}
	vlen := int64(binary.LittleEndian.Uint16(f.b[vt:]))
	tlen := int64(binary.LittleEndian.Uint16(f.b[vt+2:]))
	if vlen < 4 || vt+vlen > int64(len(f.b)) || pos+tlen > int64(len(f.b)) {
		return nil, errMeta
	}
	return func(i int) int64 {
		// As flatbuffers' Table.Offset reads it: a field whose slot
		// starts inside the vtable is there, even if the vtable's length
		// is odd and the slot ends past it.
		at := 4 + 2*int64(i)
		if at >= vlen || vt+at+2 > int64(len(f.b)) {
			return 0
		}
		o := int64(binary.LittleEndian.Uint16(f.b[vt+at:]))
		if o == 0 {
			return 0
		}
		return pos + o
	}, nil
}

// ref follows the offset at field position at (0: absent).
func (f *fbuf) ref(at int64) (int64, error) {
	if at == 0 {
		return 0, nil
	}
	o, err := f.u32(at)
	if err != nil {
		return 0, err
	}
	return at + int64(o), nil
}

// vector checks the vector the field at at refers to, of elements of
// elem bytes, and returns its start and length (0, 0: absent).
func (f *fbuf) vector(at int64, elem int64) (start int64, n int64, err error) {
	p, err := f.ref(at)
	if err != nil || p == 0 {
		return 0, 0, err
	}
	l, err := f.u32(p)
	if err != nil {
		return 0, 0, err
	}
	n = int64(l)
	if p+4+n*elem > int64(len(f.b)) {
		return 0, 0, fmt.Errorf("metadata vector of %d elements past its end", n)
	}
	return p + 4, n, nil
}

// tables checks a vector of tables, each with check.
func (f *fbuf) tables(at int64, depth int, check func(pos int64, depth int) error) error {
	start, n, err := f.vector(at, 4)
	if err != nil {
		return err
	}
	for i := range n {
		p, err := f.ref(start + 4*i)
		if err != nil {
			return err
		}
		if err := check(p, depth); err != nil {
			return err
		}
	}
	return nil
}

// str checks a string field.
func (f *fbuf) str(at int64) error {
	_, _, err := f.vector(at, 1)
	return err
}

func (f *fbuf) keyValue(pos int64, _ int) error {
	fld, err := f.table(pos)
	if err != nil {
		return err
	}
	if err := f.str(fld(0)); err != nil {
		return err
	}
	return f.str(fld(1))
}

// field checks a Field: name, type (a Union's type ids), dictionary,
// children, custom metadata.
func (f *fbuf) field(pos int64, depth int) error {
	if depth > maxFBDepth {
		return fmt.Errorf("metadata nested deeper than %d", maxFBDepth)
	}
	fld, err := f.table(pos)
	if err != nil {
		return err
	}
	if err := f.str(fld(0)); err != nil {
		return err
	}
	if typ, err := f.ref(fld(3)); err != nil {
		return err
	} else if typ != 0 {
		t, err := f.table(typ)
		if err != nil {
			return err
		}
		const unionType = 14 // Type.Union: its typeIds vector
		if at := fld(2); at != 0 && at < int64(len(f.b)) && f.b[at] == unionType {
			if _, _, err := f.vector(t(1), 4); err != nil {
				return err
			}
		}
	}
	if dict, err := f.ref(fld(4)); err != nil {
		return err
	} else if dict != 0 {
		d, err := f.table(dict)
		if err != nil {
			return err
		}
		if idx, err := f.ref(d(1)); err != nil {
			return err
		} else if idx != 0 {
			if _, err := f.table(idx); err != nil {
				return err
			}
		}
	}
	if err := f.tables(fld(5), depth+1, f.field); err != nil {
		return err
	}
	return f.tables(fld(6), depth, f.keyValue)
}

// recordBatch checks a RecordBatch: its nodes and buffers (structs of 16
// bytes), compression, variadic buffer counts; it returns the buffers'
// vector and whether they are compressed.
func (f *fbuf) recordBatch(pos int64) (bufStart, bufN int64, compressed bool, err error) {
	rb, err := f.table(pos)
	if err != nil {
		return 0, 0, false, err
	}
	if _, _, err := f.vector(rb(1), 16); err != nil {
		return 0, 0, false, err
	}
	if bufStart, bufN, err = f.vector(rb(2), 16); err != nil {
		return 0, 0, false, err
	}
	if c, err := f.ref(rb(3)); err != nil {
		return 0, 0, false, err
	} else if c != 0 {
		if _, err := f.table(c); err != nil {
			return 0, 0, false, err
		}
		compressed = true
	}
	if _, _, err := f.vector(rb(4), 8); err != nil {
		return 0, 0, false, err
	}
	return bufStart, bufN, compressed, nil
}

// verifyMessage checks a message's metadata, and, for a compressed record
// or dictionary batch, that no buffer claims to decompress into more than
// maxBody bytes.
func verifyMessage(meta, body []byte, maxBody int64) error {
	f := &fbuf{b: meta}
	root, err := f.u32(0)
	if err != nil {
		return err
	}
	msg, err := f.table(int64(root))
	if err != nil {
		return err
	}
	if err := f.tables(msg(4), 0, f.keyValue); err != nil {
		return err
	}
	hdr, err := f.ref(msg(2))
	if err != nil || hdr == 0 {
		return err
	}
	var typ byte
	if at := msg(1); at != 0 && at < int64(len(meta)) {
		typ = meta[at]
	}
	rb := hdr
	switch typ {
	case 1: // Schema
		return f.schema(hdr)
	case 2: // DictionaryBatch
		h, err := f.table(hdr)
		if err != nil {
			return err
		}
		if rb, err = f.ref(h(1)); err != nil || rb == 0 {
			return err
		}
	case 3: // RecordBatch
	default:
		return nil
	}
	start, n, compressed, err := f.recordBatch(rb)
	if err != nil || !compressed {
		return err
	}
	for i := range n {
		at := start + 16*i
		off := int64(binary.LittleEndian.Uint64(meta[at:]))
		l := int64(binary.LittleEndian.Uint64(meta[at+8:]))
		if l < 8 || off < 0 || off+8 > int64(len(body)) {
			continue // empty, or out of the body: the decoder refuses it
		}
		if u := int64(binary.LittleEndian.Uint64(body[off:])); u > maxBody {
			return fmt.Errorf("a compressed buffer of %d bytes decompressed (limit %d)", u, maxBody)
		}
	}
	return nil
}

// schema checks a Schema table: its fields, custom metadata, features.
func (f *fbuf) schema(pos int64) error {
	h, err := f.table(pos)
	if err != nil {
		return err
	}
	if err := f.tables(h(1), 0, f.field); err != nil {
		return err
	}
	if err := f.tables(h(2), 0, f.keyValue); err != nil {
		return err
	}
	_, _, err = f.vector(h(3), 8)
	return err
}
