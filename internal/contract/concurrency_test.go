package contract_test

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/weir-io/weir/internal/contract"
	"github.com/weir-io/weir/sink"
)

// TestCheckConcurrent runs one contract from several goroutines over a
// mix of outcomes (run it with -race) and checks every result against
// the same record checked alone.
func TestCheckConcurrent(t *testing.T) {
	c := mustCompile(t, ordersSpec(t))
	recs := []sink.Record{
		{Payload: []byte(order)},
		{Payload: []byte(strings.Replace(order, `"web"`, `"app"`, 1))},
		{Payload: []byte(strings.Replace(order, `129.95`, `-3`, 1))},
		{Payload: []byte(strings.Replace(order, `129.95`, `"x"`, 1))},
		{Payload: []byte(order[:50])},
		{Payload: []byte(strings.Replace(order, `"channel":"web"`, `"channel":"web","n":1`, 1)), Source: "socket",
			Key: []byte("k"), Headers: []sink.Header{{Key: "a", Value: []byte("b")}}},
	}
	for i := range 40 {
		id := fmt.Sprintf(`"ord-%09d"`, i)
		recs = append(recs, sink.Record{Payload: []byte(strings.Replace(order, `"ord-000123456"`, id, 1))})
	}
	want := make([]contract.Result, len(recs))
	for i := range recs {
		want[i] = c.Check(&recs[i])
	}
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds * len(recs) {
				i := (n + w*7) % len(recs)
				if got := c.Check(&recs[i]); !reflect.DeepEqual(got, want[i]) {
					errs <- fmt.Sprintf("record %d: %+v, alone %+v", i, got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
