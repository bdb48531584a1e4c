package arrowipcsrc

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// evKind is what reading an IPC file further yields.
type evKind int

const (
	// evIncomplete: nothing more is complete yet (the writer is still at
	// it, or the file is torn and waits to be completed).
	evIncomplete evKind = iota
	// evBatch: a record batch, decoded.
	evBatch
	// evUndecodable: bytes that could not be decoded — a corrupt record
	// batch, or, when the framing itself is broken, the rest of the file.
	evUndecodable
	// evDone: the file or stream is finished; nothing follows.
	evDone
)

// event is one step of a reader. For evBatch and evUndecodable, [off, end)
// is what the step consumed and batch the record batch's index in the
// file (-1 for undecodable bytes that are not a record batch).
type event struct {
	kind     evKind
	off, end int64
	batch    int64
	rec      arrow.RecordBatch // evBatch
	raw      []byte            // evUndecodable: the bytes, as read
	why      string            // evUndecodable
}

// reader reads one IPC file or stream, message by message, from its start
// or from a position reached by skipTo. It reads no further than the last
// complete message: what the writer has not finished is left for a later
// call, with the file's new size.
type reader struct {
	r      io.ReaderAt
	lim    limits
	file   bool  // random-access format (ARROW1 magic), else stream
	off    int64 // the next message
	batch  int64 // the index of the next record batch
	schema *ipc.Message
	dicts  []*ipc.Message
	done   bool
	opened bool // the format is known
}

func newReader(r io.ReaderAt, lim limits) *reader { return &reader{r: r, lim: lim} }

// open finds the format once size bytes are there to tell it.
func (rd *reader) open(size int64) bool {
	if rd.opened {
		return true
	}
	if size < fileHeaderLen {
		return false
	}
	var head [len(fileMagic)]byte
	if _, err := rd.r.ReadAt(head[:], 0); err != nil {
		return false
	}
	rd.file, rd.opened = string(head[:]) == fileMagic, true
	if rd.file {
		rd.off = fileHeaderLen
	}
	return true
}

// next reads the next step of the file, whose first size bytes are
// written. An error is an I/O error reading the file; what the bytes hold
// is never an error but an event.
func (rd *reader) next(size int64) (event, error) {
	for {
		if rd.done {
			return event{kind: evDone, off: rd.off, end: rd.off}, nil
		}
		if !rd.open(size) {
			return event{kind: evIncomplete, off: rd.off}, nil
		}
		fr, err := nextFrame(rd.r, rd.off, size, rd.lim)
		if errors.Is(err, errFraming) {
			// Nothing after a broken frame can be found: the rest of the
			// file as it is now is one undecodable record, and the file
			// is finished.
			return rd.undecodableRest(size, err.Error())
		}
		if err != nil {
			return event{}, err
		}
		switch fr.kind {
		case frameIncomplete:
			return event{kind: evIncomplete, off: rd.off}, nil
		case frameEOS:
			return rd.eos(fr, size)
		}
		if fr.typ == ipc.MessageRecordBatch && rd.schema == nil && rd.file {
			// The schema only in the footer (Arrow JS): wait for it.
			if !fileComplete(rd.r, size) {
				return event{kind: evIncomplete, off: rd.off}, nil
			}
			sch, err := footerSchema(rd.r, size, rd.lim)
			if errors.Is(err, errFraming) {
				return rd.undecodableRest(size, err.Error())
			}
			if err != nil {
				return event{}, err
			}
			rd.schema = sch
		}
		ev, consumed, err := rd.message(fr)
		if err != nil || consumed {
			return ev, err
		}
	}
}

// eos handles the end-of-stream marker: a stream is finished (bytes after
// it are undecodable); a file once its footer and closing magic are there.
func (rd *reader) eos(fr frame, size int64) (event, error) {
	if rd.file {
		if !fileComplete(rd.r, size) {
			return event{kind: evIncomplete, off: rd.off}, nil
		}
		rd.off, rd.done = fr.end, true
		return event{kind: evDone, off: fr.off, end: fr.end}, nil
	}
	rd.off = fr.end
	if fr.end < size {
		return rd.undecodableRest(size, fmt.Sprintf("%d bytes after the end-of-stream marker", size-fr.end))
	}
	rd.done = true
	return event{kind: evDone, off: fr.off, end: fr.end}, nil
}

// undecodableRest yields the bytes from the reader's offset to size (at
// most the largest message's worth) as undecodable and finishes the file.
func (rd *reader) undecodableRest(size int64, why string) (event, error) {
	ev := event{kind: evUndecodable, off: rd.off, end: size, batch: -1, why: "the rest of the file cannot be read: " + why}
	n := min(size-rd.off, rd.lim.maxMeta+rd.lim.maxBody)
	if n < size-rd.off {
		ev.why += fmt.Sprintf(" (the first %d of its %d bytes are kept)", n, size-rd.off)
	}
	ev.raw = make([]byte, n)
	if _, err := rd.r.ReadAt(ev.raw, rd.off); err != nil {
		return event{}, fmt.Errorf("read at %d: %w", rd.off, err)
	}
	rd.off, rd.done = size, true
	return ev, nil
}

// message handles a complete message: a schema or dictionary is kept
// (consumed false: read on), a record batch decoded.
func (rd *reader) message(fr frame) (ev event, consumed bool, err error) {
	meta, body, err := rd.read(fr)
	if err != nil {
		return event{}, false, err
	}
	start := rd.off
	rd.off = fr.end
	if err := verifyMessage(meta, body, rd.lim.maxBody); err != nil {
		if fr.typ == ipc.MessageRecordBatch {
			rd.batch++
			return rd.undecodable(fr, start, rd.batch-1, err.Error()), true, nil
		}
		return rd.undecodable(fr, start, -1, fmt.Sprintf("a %v message: %v", fr.typ, err)), true, nil
	}
	switch fr.typ {
	case ipc.MessageSchema:
		if rd.schema == nil {
			rd.schema = ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body))
			return event{}, false, nil
		}
		return rd.undecodable(fr, start, -1, "a second schema message"), true, nil
	case ipc.MessageDictionaryBatch:
		rd.dicts = append(rd.dicts, ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body)))
		return event{}, false, nil
	case ipc.MessageRecordBatch:
		i := rd.batch
		rd.batch++
		rec, err := rd.decode(meta, body)
		if err != nil {
			return rd.undecodable(fr, start, i, err.Error()), true, nil
		}
		return event{kind: evBatch, off: start, end: fr.end, batch: i, rec: rec}, true, nil
	}
	return rd.undecodable(fr, start, -1, fmt.Sprintf("a %v message, not a record batch", fr.typ)), true, nil
}

// read reads a complete message's metadata and body, each into its own
// buffer (the body's buffers are aligned as the decoder expects).
func (rd *reader) read(fr frame) (meta, body []byte, err error) {
	meta = make([]byte, fr.metaLen)
	if _, err := rd.r.ReadAt(meta, fr.metaOff); err != nil {
		return nil, nil, fmt.Errorf("read at %d: %w", fr.metaOff, err)
	}
	body = make([]byte, fr.bodyLen)
	if _, err := rd.r.ReadAt(body, fr.metaOff+fr.metaLen); err != nil && fr.bodyLen > 0 {
		return nil, nil, fmt.Errorf("read at %d: %w", fr.metaOff+fr.metaLen, err)
	}
	return meta, body, nil
}

// undecodable is the event of a complete message that cannot be decoded:
// its bytes, prefix included.
func (rd *reader) undecodable(fr frame, start, batch int64, why string) event {
	raw := make([]byte, fr.end-start)
	if _, err := rd.r.ReadAt(raw, start); err != nil {
		raw = nil // read a moment ago: keep the reason at least
	}
	return event{kind: evUndecodable, off: start, end: fr.end, batch: batch, raw: raw, why: why}
}

// decode decodes one record batch message against the file's schema and
// the dictionaries so far, checking that every column has the batch's
// length. A panic of the decoder on bytes it does not expect is an error.
func (rd *reader) decode(meta, body []byte) (rec arrow.RecordBatch, err error) {
	if rd.schema == nil {
		return nil, errors.New("a record batch before the schema")
	}
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("corrupt record batch: %v", p)
		}
	}()
	msgs := make([]*ipc.Message, 0, 2+len(rd.dicts))
	msgs = append(append(append(msgs, rd.schema), rd.dicts...), ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body)))
	r, err := ipc.NewReaderFromMessageReader(&messages{msgs: msgs}, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("corrupt record batch (its schema or dictionaries): %w", err)
	}
	defer r.Release()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("corrupt record batch: %w", err)
		}
		return nil, errors.New("corrupt record batch: nothing decoded")
	}
	rec = r.RecordBatch()
	if n := rec.NumRows(); n < 0 || n > rd.lim.maxRows {
		return nil, fmt.Errorf("a record batch of %d rows (limit %d)", n, rd.lim.maxRows)
	}
	for i, c := range rec.Columns() {
		if c.Len() != int(rec.NumRows()) {
			return nil, fmt.Errorf("corrupt record batch: column %d has %d values for %d rows", i, c.Len(), rec.NumRows())
		}
	}
	rec.Retain()
	return rec, nil
}

// skipTo reads from the start up to off, where a saved cursor resumes,
// keeping the schema and dictionaries and counting the record batches
// (without decoding them). It reports false when off is not the start of
// a message of the file as it is now (the file was replaced).
func (rd *reader) skipTo(off, size int64) (bool, error) {
	if !rd.open(size) {
		return off == 0, nil
	}
	for rd.off < off {
		fr, err := nextFrame(rd.r, rd.off, size, rd.lim)
		if errors.Is(err, errFraming) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if fr.kind != frameMessage {
			return false, nil
		}
		if fr.typ == ipc.MessageRecordBatch {
			rd.off = fr.end
			rd.batch++
			continue
		}
		if _, _, err := rd.message(fr); err != nil {
			return false, err
		}
	}
	return rd.off == off, nil
}

// messages replays a sequence of messages to ipc's reader.
type messages struct {
	msgs []*ipc.Message
	i    int
}

func (m *messages) Message() (*ipc.Message, error) {
	if m.i >= len(m.msgs) {
		return nil, io.EOF
	}
	m.i++
	return m.msgs[m.i-1], nil
}

func (m *messages) Retain()  {}
func (m *messages) Release() {}
