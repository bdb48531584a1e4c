package flightsrc

import (
	"bytes"
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
)

// batchReader reads a call's batches on a goroutine of its own, one when
// asked, so that the call stops waiting for its client when the source
// stops. It owns the flight.Reader, and releases it when done.
type batchReader struct {
	next chan struct{}
	out  chan readResult
}

type readResult struct {
	batch arrow.RecordBatch // retained; nil at the end
	md    []byte
	err   error // at the end: why, nil for the client's end of the call
}

func readBatches(rdr *flight.Reader) *batchReader {
	r := &batchReader{next: make(chan struct{}), out: make(chan readResult, 1)}
	go func() {
		defer rdr.Release()
		for range r.next {
			if !rdr.Next() {
				r.out <- readResult{err: rdr.Err()}
				return
			}
			b := rdr.RecordBatch()
			b.Retain()
			r.out <- readResult{batch: b, md: bytes.Clone(rdr.LatestAppMetadata())}
		}
	}()
	return r
}

// read returns the next batch, or false when ctx ended first.
func (r *batchReader) read(ctx context.Context) (readResult, bool) {
	select {
	case r.next <- struct{}{}:
	case <-ctx.Done():
		return readResult{}, false
	}
	select {
	case res := <-r.out:
		return res, true
	case <-ctx.Done():
		return readResult{}, false
	}
}

// close lets the reading goroutine end once the call has.
func (r *batchReader) close() { close(r.next) }
