// Package arrowipcsrc is the arrow_ipc source: it reads a directory of
// Arrow IPC files (the random-access format, .arrow) and streams (the
// streaming format, .arrows), in name order, one record per row, and
// writes them through a gate, saving its cursor only after the gate has
// made them durable.
//
// # Position regime
//
// Store-managed: for every file the cursor keeps its identity (device,
// inode, generation), the offset of the first message not wholly durable,
// the index of the next record batch, how many of its rows are durable,
// and whether the file is done. It is saved only after Gate.Write returned
// nil for every row before it; a crash between the two re-reads the rows
// of that write, under the same ids. The origin is replayable: losing the
// cursor costs a re-read.
//
// # Reading what is complete
//
// Both formats are read as a sequence of messages (a file's begin after
// its 8-byte magic): [0xFFFFFFFF][int32 metadata length][flatbuffer
// Message][body], or the pre-0.15 form without the marker. The framing is
// read here (frame.go), the metadata's header type and body length only,
// every offset checked: a message is taken once it lies wholly within the
// file's current size, so a file being written — without its footer, its
// last batch torn — is read up to its last complete batch, and the rest
// at a later poll. A file is done at the end-of-stream marker once its
// footer and closing magic follow, a stream at the marker. The footer is
// read only for a file whose schema is nowhere else (Arrow JS writes it
// so; footer.go): its batches wait for it.
//
// # Decoding, and what does not decode
//
// Schema and dictionary messages are kept; each record batch is decoded
// on its own by arrow-go's reader, over the schema, the dictionaries so
// far and the batch (reader.go), after verify.go has checked the metadata
// against its bounds (arrow-go trusts vector lengths and decompressed
// sizes). Rows are mapped by internal/arrowrec, under recover: arrow-go
// does not check that buffers agree with the lengths. A batch that fails
// any of this is one undecodable record (source.Record.Undecodable, the
// message's bytes as payload), which the gate quarantines with code
// decode; reading goes on after it. A broken framing ends the file: its
// rest is quarantined the same way.
//
// # Record ids
//
// source.TimedID(t, name, file key, birth, batch index, row index): t is
// the row's event-time column value, or the file's birth time (statx
// btime) when there is none.
package arrowipcsrc
