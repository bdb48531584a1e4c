package flightsrc

import (
	"encoding/binary"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/arrowrec"
	"github.com/weir-io/weir/source"
)

// sequence is a batch's sequence number: its app_metadata, 8 bytes big
// endian; without one, its index in the call — unless the producer is
// named, whose resends must find the same numbers.
func (c *call) sequence(md []byte, index uint64) (uint64, error) {
	switch {
	case len(md) == 8:
		return binary.BigEndian.Uint64(md), nil
	case len(md) == 0 && !c.named:
		return index, nil
	case len(md) == 0:
		return 0, status.Error(codes.InvalidArgument, "a batch of a named producer needs its sequence number as app_metadata (8 bytes, big endian)")
	}
	return 0, status.Errorf(codes.InvalidArgument, "app_metadata is %d bytes; a batch's sequence number is 8 bytes, big endian", len(md))
}

// records makes a batch's rows records, with their ids.
func (s *Source) records(c *call, seq uint64, rows []arrowrec.Row, received time.Time) []source.Record {
	recs := make([]source.Record, len(rows))
	// A row without an event time of its own gets ms 0 in its id when
	// its producer is named — a resend arrives at another time and must
	// get the first copy's id — and the receive time otherwise.
	idTime := time.Time{}
	if !c.named && !c.dec.HasTime() {
		idTime = received
	}
	name, stream, seqb := []byte(s.opts.Name), []byte(c.stream), source.Uint64(seq)
	pos := c.stream + "/" + strconv.FormatUint(seq, 10) + ":"
	for i := range rows {
		r := &rows[i]
		at := idTime
		if c.dec.HasTime() {
			at = r.Time
		}
		recs[i] = source.Record{
			ID:        source.TimedID(at, idPrefix, name, stream, c.producer, seqb, source.Uint64(uint64(i))),
			Payload:   r.Payload,
			Source:    s.opts.Name,
			Time:      r.Time,
			Key:       r.Key,
			Headers:   r.Headers,
			OriginPos: pos + strconv.Itoa(i),
		}
	}
	return recs
}

// idPrefix is the first part of every Flight record's id.
var idPrefix = []byte("weir-flight")
