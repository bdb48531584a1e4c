package testenv

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/weir-io/weir/sink"
)

// Record id layouts of the database sink benchmarks.
const (
	// IDsRandom: the 16 bytes of a hash, as weir's ids were before they
	// became time-ordered; every insert lands on a random page of a
	// primary-key index.
	IDsRandom = "random"
	// IDsTimeOrdered: a UUIDv7 layout — the first 48 bits a millisecond
	// timestamp (big-endian), then version 7, the RFC 9562 variant, and
	// the rest of the hash — so that keys grow at the right edge of the
	// index.
	IDsTimeOrdered = "time"
)

// BenchRecordsPerMilli is how many benchmark records share one
// millisecond of a time-ordered id: a stream of 100 000 records/s.
const BenchRecordsPerMilli = 100

// TimeOrderedID lays out a time-ordered record id: ms in the first 48 bits,
// version 7, the variant bits 10, and the rest from hash.
func TimeOrderedID(ms uint64, hash []byte) sink.RecordID {
	var id sink.RecordID
	copy(id[:], hash)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(id[:6], ts[2:])
	id[6] = 0x70 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return id
}

// BenchBatches makes the database sink benchmarks' records: batches
// (WEIR_BENCH_BATCHES overrides it) of per records, each payloadBytes of
// text, with ids laid out as ids says (IDsRandom or IDsTimeOrdered). The
// ids differ from one call to the next.
func BenchBatches(ids string, batches, per, payloadBytes int) [][]sink.Record {
	if s := os.Getenv("WEIR_BENCH_BATCHES"); s != "" {
		batches, _ = strconv.Atoi(s)
	}
	payload := []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz", payloadBytes/26+1)[:payloadBytes])
	now := time.Now().Truncate(time.Microsecond)
	tag := now.UnixNano()
	start := uint64(now.UnixMilli())
	out := make([][]sink.Record, batches)
	for i := range out {
		recs := make([]sink.Record, per)
		for j := range recs {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", tag, i, j))
			id := sink.RecordID(sum[:16])
			if ids == IDsTimeOrdered {
				id = TimeOrderedID(start+uint64(i*per+j)/BenchRecordsPerMilli, sum[:])
			}
			recs[j] = sink.Record{ID: id, Payload: payload, Received: now, Source: "socket"}
		}
		out[i] = recs
	}
	return out
}
