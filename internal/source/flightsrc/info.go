package flightsrc

import (
	"context"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/arrowrec"
)

func (st *streamState) setSchema(s arrowrec.Schema) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.schema = &s
}

func (st *streamState) count(rows, bytes int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rows += rows
	st.bytes += bytes
}

// info describes a stream: its descriptor, the schema of its last DoPut
// (none before the first), and the rows and bytes received since the
// source started (total_records, total_bytes).
func (s *Source) info(name string) *flight.FlightInfo {
	st := s.streams[name]
	st.mu.Lock()
	defer st.mu.Unlock()
	fi := &flight.FlightInfo{
		FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{name}},
		TotalRecords:     st.rows,
		TotalBytes:       st.bytes,
	}
	if st.schema != nil {
		fi.Schema = st.schema.IPC
	}
	return fi
}

// ListFlights lists the configured streams, in name order.
func (v *service) ListFlights(_ *flight.Criteria, out flight.FlightService_ListFlightsServer) error {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range v.src.streams {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		if err := out.Send(v.src.info(n)); err != nil {
			return err
		}
	}
	return nil
}

// GetFlightInfo describes the stream a PATH descriptor names.
func (v *service) GetFlightInfo(_ context.Context, d *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	if d == nil || d.Type != flight.DescriptorPATH || len(d.Path) < 1 {
		return nil, status.Error(codes.InvalidArgument, "the descriptor must be a PATH naming a stream")
	}
	if _, ok := v.src.streams[d.Path[0]]; !ok {
		return nil, status.Errorf(codes.NotFound, "no stream %q here", d.Path[0])
	}
	return v.src.info(d.Path[0]), nil
}
