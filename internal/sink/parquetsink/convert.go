package parquetsink

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/weir-io/weir/internal/vfs"
)

// row is one record as a Parquet row. The schema is:
//
//	message row {
//	  required fixed_len_byte_array(16) weir_record_id;
//	  required binary payload;
//	  required binary source (STRING);
//	  required binary durability (STRING);
//	  required int64 received_at (TIMESTAMP(NANOS,true));
//	  required int64 committed_at (TIMESTAMP(NANOS,true));
//	  optional binary key;
//	  required group headers (LIST) {
//	    repeated group list {
//	      required group element {
//	        required binary key (STRING);
//	        required binary value;
//	      }
//	    }
//	  }
//	  optional int64 event_time (TIMESTAMP(NANOS,true));
//	}
//
// key (null: no key; empty: an empty key), headers (empty: none) and
// event_time (null: none) came with the record model's version 2; a file
// written before them reads with no key, no headers and no event time.
type row struct {
	ID          [16]byte `parquet:"weir_record_id"`
	Payload     []byte   `parquet:"payload"`
	Source      string   `parquet:"source,dict"`
	Durability  string   `parquet:"durability,dict"`
	ReceivedAt  int64    `parquet:"received_at,timestamp(nanosecond:utc)"`
	CommittedAt int64    `parquet:"committed_at,timestamp(nanosecond:utc)"`
	// Key is a pointer so that an empty key and none differ (a nil slice
	// and an empty one would both be written as null).
	Key       *[]byte  `parquet:"key,optional"`
	Headers   []header `parquet:"headers,list"`
	EventTime int64    `parquet:"event_time,optional,timestamp(nanosecond:utc)"`
}

// header is one element of a row's headers.
type header struct {
	Key   string `parquet:"key"`
	Value []byte `parquet:"value"`
}

// detach copies what a row read from a Parquet reader shares with the
// reader's buffers.
func (rw *row) detach() {
	rw.Payload = bytes.Clone(rw.Payload)
	rw.Source = strings.Clone(rw.Source)
	if rw.Key != nil {
		k := bytes.Clone(*rw.Key)
		rw.Key = &k
	}
	for i := range rw.Headers {
		rw.Headers[i] = header{Key: strings.Clone(rw.Headers[i].Key), Value: bytes.Clone(rw.Headers[i].Value)}
	}
}

// rowGroupBytes bounds the payload bytes buffered in memory per row group.
const rowGroupBytes = 32 << 20

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// converter turns stage files into Parquet files.
type converter struct {
	fs    vfs.FS
	dir   string
	level zstd.Level
}

// convert writes the first size bytes of the stage file r (which must be
// valid frames, want rows in all) as base.parquet: into base.parquet.tmp
// first, which is closed with its footer, fdatasynced, renamed into place,
// and followed by a directory fsync. On any error, including reading back
// other than want rows, the temporary file is closed unsynced and removed,
// and nothing becomes visible. It returns bytes written.
func (c *converter) convert(r io.ReaderAt, stageName string, size int64, base string, want int64) (bytes int64, err error) {
	tmp := filepath.Join(c.dir, base+SuffixTemp)
	final := filepath.Join(c.dir, base+SuffixParquet)
	if _, serr := c.fs.Stat(tmp); serr == nil {
		// Left by an earlier attempt of this writer: never reused.
		if rerr := c.fs.Remove(tmp); rerr != nil {
			return 0, fmt.Errorf("parquetsink: remove stale %s: %w", tmp, rerr)
		}
	}
	f, err := c.fs.Create(tmp, filePerm)
	if err != nil {
		return 0, fmt.Errorf("parquetsink: create %s: %w", tmp, err)
	}
	fail := func(err error) (int64, error) {
		_ = f.Close() // never synced after a failure
		_ = c.fs.Remove(tmp)
		return 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	cw := &countingWriter{w: bw}
	codec := &zstd.Codec{Level: c.level}
	w := parquet.NewGenericWriter[row](cw,
		parquet.Compression(codec),
		parquet.CreatedBy("weir", "parquetsink", ""),
		parquet.WriteBufferSize(0),
	)
	var buffered, rows int64
	_, err = scanStage(io.NewSectionReader(r, 0, size), stageName, size, false, func(fr frame, _ int64) error {
		if _, err := w.Write(fr.rows); err != nil {
			return fmt.Errorf("parquetsink: encode %s: %w", tmp, err)
		}
		rows += int64(len(fr.rows))
		for i := range fr.rows {
			buffered += int64(len(fr.rows[i].Payload))
		}
		if buffered >= rowGroupBytes {
			buffered = 0
			if err := w.Flush(); err != nil {
				return fmt.Errorf("parquetsink: write %s: %w", tmp, err)
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if rows != want {
		// A committed frame did not read back: never replace the stage
		// with a file that lacks some of its rows.
		return fail(fmt.Errorf("parquetsink: %s: read back %d rows, %d committed", stageName, rows, want))
	}
	if err := w.Close(); err != nil {
		return fail(fmt.Errorf("parquetsink: write %s: %w", tmp, err))
	}
	if err := bw.Flush(); err != nil {
		return fail(fmt.Errorf("parquetsink: write %s: %w", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("parquetsink: fdatasync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		_ = c.fs.Remove(tmp)
		return 0, fmt.Errorf("parquetsink: close %s: %w", tmp, err)
	}
	if err := c.fs.Rename(tmp, final); err != nil {
		_ = c.fs.Remove(tmp)
		return 0, fmt.Errorf("parquetsink: rename %s: %w", tmp, err)
	}
	if err := c.fs.SyncDir(c.dir); err != nil {
		// The file is complete but its name may not be durable. The
		// stage still holds the same rows and is kept (frozen) by the
		// caller, so the next attempt, or recovery, settles it.
		return 0, fmt.Errorf("parquetsink: sync directory after renaming %s: %w", final, err)
	}
	return cw.n, nil
}
