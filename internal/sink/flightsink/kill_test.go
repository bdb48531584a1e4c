package flightsink_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/sink"
)

// records makes n records of about size payload bytes, ids unique to tag.
func records(tag string, from, n, size int) []sink.Record {
	out := make([]sink.Record, n)
	for i := range out {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", tag, from+i))
		var id sink.RecordID
		copy(id[:], sum[:])
		p := fmt.Appendf(nil, `{"n":%d,"pad":"`, from+i)
		for len(p) < size-2 {
			p = append(p, 'x')
		}
		out[i] = sink.Record{ID: id, Payload: append(p, `"}`...), Source: "socket",
			Received: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(from+i) * time.Microsecond)}
	}
	return out
}

// commitRetrying commits b as the drain does: a transient error is
// retried with backoff, a permanent one fails the test.
func commitRetrying(t *testing.T, s sink.Sink, b sink.Batch) (failures int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		res, err := s.Commit(context.Background(), b)
		if err == nil {
			if len(res.Rejected) > 0 {
				t.Fatalf("commit rejected %d records: %s", len(res.Rejected), res.Rejected[0].Reason)
			}
			return attempt
		}
		if !sink.IsTransient(err) {
			t.Fatalf("commit attempt %d: permanent error %v; a killed server must be transient", attempt+1, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit still failing after %d attempts: %v", attempt+1, err)
		}
		time.Sleep(min(20*time.Millisecond<<min(attempt, 4), 300*time.Millisecond))
	}
}

// TestServerKilledMidStream kills the Flight server (listener and every
// connection closed at once) three times, each right after it made a
// batch of a DoPut durable and before that batch's PutResult, and
// restarts it on the same address over the same directory. The sink must
// fail those commits transient and succeed on retry; afterwards every
// record of every acknowledged commit is in the server's Parquet files,
// and the copies the replays made (the batches durable before each kill)
// are absorbed by the id column: the distinct weir_record_id values are
// exactly the records committed.
func TestServerKilledMidStream(t *testing.T) {
	const (
		commits  = 12
		perBatch = 800
		payload  = 1000 // about 230 rows per 256 KiB message: 4 record batches per DoPut
	)
	kills := map[int64]bool{6: true, 17: true, 31: true} // mid-DoPut: never a multiple of 4
	var srv *flighttest.Server
	var wg sync.WaitGroup
	var mu sync.Mutex
	var restartErr error
	srv = flighttest.Start(t, flighttest.Options{AfterDurable: func(n int64) {
		if !kills[n] {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.Stop()
			time.Sleep(200 * time.Millisecond)
			if err := srv.Restart(); err != nil {
				mu.Lock()
				restartErr = err
				mu.Unlock()
			}
		}()
	}})
	s := openSink(t, srv.Endpoint(), func(o *flightsink.Options) {
		o.MaxMessageBytes = 256 << 10
		o.MaxBatchSize = perBatch
	})
	var acked []sink.Record
	failures := 0
	for c := range commits {
		recs := records("kill", c*perBatch, perBatch, payload)
		failures += commitRetrying(t, s, sink.NewBatch(recs))
		acked = append(acked, recs...)
	}
	wg.Wait()
	if restartErr != nil {
		t.Fatal(restartErr)
	}
	if failures < len(kills) {
		t.Errorf("%d failed commits over %d kills mid-stream: each kill must fail the commit in flight", failures, len(kills))
	}
	got, err := readBack(t, vfs.OS, srv.Dir())(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[sink.RecordID]int{}
	for _, g := range got {
		distinct[g.ID]++
	}
	missing := 0
	for _, r := range acked {
		if distinct[r.ID] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged records missing from the server", missing, len(acked))
	}
	if len(distinct) != len(acked) {
		t.Errorf("%d distinct ids stored, %d records committed", len(distinct), len(acked))
	}
	copies := len(got) - len(distinct)
	if copies == 0 {
		t.Errorf("no replayed copies stored: the kills did not land after a durable batch of a DoPut")
	}
	t.Logf("%d commits, %d transient failures, %d rows stored, %d distinct ids, %d replayed copies",
		commits, failures, len(got), len(distinct), copies)
}
