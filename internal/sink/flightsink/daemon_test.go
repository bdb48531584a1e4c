package flightsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weir-io/weir/internal/components"
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/daemon"
	"github.com/weir-io/weir/internal/sink/flightsink"
	"github.com/weir-io/weir/internal/testenv"
	"github.com/weir-io/weir/internal/testenv/flighttest"
	"github.com/weir-io/weir/internal/vfs"
)

// TestDaemonDelivers runs the daemon in process with a file source, the
// file sink as primary raw and a flight [[secondary]] configured through
// the registry: every line reaches the Flight server, under the
// configured descriptor path.
func TestDaemonDelivers(t *testing.T) {
	dir := shortDir(t)
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var body []byte
	for i := range n {
		body = fmt.Appendf(body, "line-%d\n", i)
	}
	if err := os.WriteFile(filepath.Join(logs, "a.log"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := flighttest.Start(t, flighttest.Options{})
	ctx := runDaemon(t, dir, fmt.Sprintf(`
[[source]]
name = "logs"
type = "file"
[source.file]
glob = %q
poll_interval = "20ms"

[[secondary]]
name = "lake"
type = "flight"
[secondary.flight]
endpoint = %q
path = ["weir", "logs"]
batch_records = 128
`, filepath.Join(logs, "*.log"), srv.Endpoint()))
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := readBack(t, vfs.OS, srv.Dir())(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, r := range got {
			ids[r.ID.String()] = true
		}
		if len(ids) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the Flight server holds %d of %d records", len(ids), n)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if srv.Batches("weir/logs") == 0 {
		t.Error("nothing acknowledged on the configured descriptor path weir/logs")
	}
}

// TestDaemonFlightToFlightTyped: an arrow-go client DoPuts a batch of
// typed columns into weir's Flight source; a flight [[secondary]] with
// columns = "arrow" delivers it to the Flight server in the batch's own
// schema (after weir_record_id) with the same values, through the JSON
// payload and back.
func TestDaemonFlightToFlightTyped(t *testing.T) {
	srv := flighttest.Start(t, flighttest.Options{})
	listen, _, err := testenv.FreshPort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := runDaemon(t, shortDir(t), fmt.Sprintf(`
[[source]]
name = "arrow"
type = "flight"
[source.flight]
listen = %q
streams = ["orders"]
key_column = "name"

[[secondary]]
name = "lake"
type = "flight"
[secondary.flight]
endpoint = %q
columns = "arrow"
`, listen, srv.Endpoint()))

	batch := arrowBatch(t, 12)
	defer batch.Release()
	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := flight.NewClientFromConn(conn, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := barePut(ctx, client, batch, "orders")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DoPut into weir: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the source is not listening yet
	}

	var got []arrow.RecordBatch
	defer func() {
		for _, r := range got {
			r.Release()
		}
	}()
	for rows := 0; rows < 12; {
		if time.Now().After(deadline) {
			t.Fatalf("the Flight server holds %d of 12 rows", rows)
		}
		time.Sleep(20 * time.Millisecond)
		for _, r := range got {
			r.Release()
		}
		if got, err = flighttest.Read(ctx, vfs.OS, srv.Dir()); err != nil {
			t.Fatal(err)
		}
		rows = 0
		for _, r := range got {
			rows += int(r.NumRows())
		}
	}
	byID := map[int64]int{}
	for i, v := range batch.Column(0).(*array.Int64).Int64Values() {
		byID[v] = i
	}
	for _, r := range got {
		if r.Schema().Field(0).Name != flightsink.ColID || r.NumCols() != batch.NumCols()+1 {
			t.Fatalf("stored schema %s: want weir_record_id and the batch's columns", r.Schema())
		}
		ids := r.Column(1).(*array.Int64)
		for i := range int(r.NumRows()) {
			j, ok := byID[ids.Value(i)]
			if !ok {
				t.Fatalf("a stored row of id %d was never sent", ids.Value(i))
			}
			delete(byID, ids.Value(i))
			for c := range int(batch.NumCols()) {
				if !arrow.TypeEqual(r.Column(c+1).DataType(), batch.Column(c).DataType()) ||
					!array.SliceEqual(r.Column(c+1), int64(i), int64(i+1), batch.Column(c), int64(j), int64(j+1)) {
					t.Errorf("row %d column %s: got %v, want %v", j, batch.ColumnName(c),
						array.NewSlice(r.Column(c+1), int64(i), int64(i+1)), array.NewSlice(batch.Column(c), int64(j), int64(j+1)))
				}
			}
		}
	}
	if len(byID) != 0 {
		t.Errorf("%d rows never stored", len(byID))
	}
}

// shortDir is a data directory with a short path (the socket's path is
// limited), removed when the test ends.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "weir-f-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runDaemon runs the daemon on dir with the configuration body until the
// test ends, and returns a context that ends with it.
func runDaemon(t *testing.T, dir, body string) context.Context {
	t.Helper()
	conf := filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWith(components.Registry(), []string{"--config", conf, "--data-dir", dir, "--metrics-port", "0",
		"--segment-max-age", "50ms", "--coverage-flush-interval", "20ms"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}
