package arrowipcsrc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Some writers of the file format (Arrow JS) put the schema only in the
// footer, not as the first message: the spec's "streaming format" part of
// a file may start with a dictionary or a record batch. Such a file's
// batches can be decoded only once the footer is written. footerSchema
// reads the schema from the footer of a complete file and returns it as a
// schema message for the decoder: a flatbuffer Message whose header is the
// footer's own Schema table (the footer's bytes are moved as one block,
// so every offset inside them holds), dictionary ids and all.
func footerSchema(r io.ReaderAt, size int64, lim limits) (*ipc.Message, error) {
	const tail = int64(4 + len(fileMagic))
	var b [4]byte
	if _, err := r.ReadAt(b[:], size-tail); err != nil {
		return nil, fmt.Errorf("read the footer's length: %w", err)
	}
	n := int64(int32(binary.LittleEndian.Uint32(b[:])))
	if n <= 0 || n > lim.maxMeta || n > size-fileHeaderLen-tail {
		return nil, fmt.Errorf("%w: footer length %d", errFraming, n)
	}
	// The Message: root offset (4 bytes), its vtable (12), its table (24),
	// then the footer.
	const vt, tb, fo = 4, 16, 40
	buf := make([]byte, fo+n)
	if _, err := r.ReadAt(buf[fo:], size-tail-n); err != nil {
		return nil, fmt.Errorf("read the footer: %w", err)
	}
	sch, err := verifyFooter(buf[fo:])
	if err != nil {
		return nil, fmt.Errorf("%w: footer: %w", errFraming, err)
	}
	le := binary.LittleEndian
	le.PutUint32(buf[0:], tb)
	for i, v := range []uint16{12, 24, 4, 6, 8, 16} { // vtable: sizes, version, header_type, header, bodyLength
		le.PutUint16(buf[vt+2*i:], v)
	}
	le.PutUint32(buf[tb:], tb-vt)                    // the table's vtable
	le.PutUint16(buf[tb+4:], uint16(ipc.MetadataV5)) // version
	buf[tb+6] = byte(ipc.MessageSchema)              // header_type
	le.PutUint32(buf[tb+8:], uint32(fo+sch-(tb+8)))  // header: the footer's Schema
	le.PutUint64(buf[tb+16:], 0)                     // bodyLength
	return ipc.NewMessage(memory.NewBufferBytes(buf), memory.NewBufferBytes(nil)), nil
}

// verifyFooter checks a footer (Footer { version, schema, dictionaries,
// recordBatches, custom_metadata }) against its bounds, as verifyMessage
// does a schema message, and returns its schema's position.
func verifyFooter(footer []byte) (int64, error) {
	f := &fbuf{b: footer}
	root, err := f.u32(0)
	if err != nil {
		return 0, err
	}
	ft, err := f.table(int64(root))
	if err != nil {
		return 0, err
	}
	if _, _, err := f.vector(ft(2), 24); err != nil { // dictionaries: Block structs
		return 0, err
	}
	if _, _, err := f.vector(ft(3), 24); err != nil { // record batches
		return 0, err
	}
	if err := f.tables(ft(4), 0, f.keyValue); err != nil {
		return 0, err
	}
	sch, err := f.ref(ft(1))
	if err == nil && sch == 0 {
		err = errors.New("no schema")
	}
	if err != nil {
		return 0, err
	}
	return sch, f.schema(sch)
}
