package kafkasink_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/sink/sinktest"
)

// Payloads the broker refuses (through kfake faults installed by
// refuseMarked): the whole partition batch holding one of them is
// refused, as a broker does.
var (
	markInvalid  = []byte("poison:invalid-record")
	markTooLarge = []byte("poison:message-too-large")
)

// refuseMarked makes c refuse, with INVALID_RECORD or MESSAGE_TOO_LARGE,
// every produce request carrying a marked payload (the sink sends records
// uncompressed by default, so the marker is in the request's bytes).
func refuseMarked(c *kfake.Cluster) {
	has := func(mark []byte) func(kmsg.Request) bool {
		return func(req kmsg.Request) bool {
			for _, t := range req.(*kmsg.ProduceRequest).Topics {
				for _, p := range t.Partitions {
					if bytes.Contains(p.Records, mark) {
						return true
					}
				}
			}
			return false
		}
	}
	c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.InvalidRecord, Count: -1, When: has(markInvalid)},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.MessageTooLarge, Count: -1, When: has(markTooLarge)},
	)
}

// poison is the Harness's Poison: a record over max_message_bytes (refused
// before it is sent), and records the broker refuses on their own.
func poison(kind int) (sink.Record, bool) {
	switch kind {
	case 0:
		return sink.Record{Payload: bytes.Repeat([]byte("x"), 200<<10)}, true
	case 1:
		return sink.Record{Payload: markInvalid}, true
	case 2:
		return sink.Record{Payload: markTooLarge}, true
	}
	return sink.Record{}, false
}

// TestConformance runs the sink conformance suite on kfake. Durability:
// the Crash hook cuts the sink's client off — its process is gone, so
// whatever it had not yet had acknowledged can never arrive — and restarts
// the broker from its log directory; every record a Commit acknowledged
// must be there. A broker's power loss is not simulated (kfake writes
// through the page cache, and Kafka's own answer to it is replication,
// which one in-process broker cannot show).
func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) *sinktest.Harness {
		c := newCluster(t, 3)
		refuseMarked(c.kfake())
		d := &dialer{}
		h := &sinktest.Harness{
			Sink:            open(t, c, d, nil),
			ReadBack:        readBack(c),
			KeepsDuplicates: true,
			BinaryPayloads:  true,
			Metadata:        true,
			Poison:          poison,
			Break:           func(context.Context) error { d.Drop(); return nil },
			Outage: func(context.Context) (func(), error) {
				d.Cut()
				return d.Restore, nil
			},
			Reopen: func(t *testing.T) sink.Sink { return open(t, c, nil, nil) },
			Crash: func(t *testing.T) sinktest.Crashed {
				d.Cut()
				c.restart(t)
				refuseMarked(c.kfake())
				return sinktest.Crashed{ReadBack: readBack(c), Reopen: func(t *testing.T) sink.Sink { return open(t, c, nil, nil) }}
			},
		}
		return h
	})
}
