package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/wire"
)

const pushUsage = `Usage: weir push [flags] < records

Reads newline-delimited records from stdin (empty lines are skipped) and
pushes them to a running daemon. Prints "acked N nacked M" at the end, and
on stderr each refused record's line number and Nack code, how many
records were resent after a reconnect ("resent N records after
reconnects") and how many frames were sent again after the daemon answered
Overloaded ("retried N frames after Overloaded"; the client waits the pause
the daemon asks for each time). Exits 0 only if every record was acked.

All connections push as one idempotent producer (wire protocol version 2):
each line is numbered once, and what is resent after a reconnect (the
daemon restarted, say) keeps its number, so it is stored under the same
weir_record_id. With a daemon that speaks only version 1, resent records
are new records.

Flags:
`

type pushFlags struct {
	socket      string
	durability  string
	concurrency int
	batch       int
	window      int
	timeout     time.Duration
	maxLine     int
}

func push(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	defSocket := os.Getenv("WEIR_SOCKET_PATH")
	if defSocket == "" {
		defSocket = filepath.Join("data", "weir.sock")
	}
	var f pushFlags
	fs := flag.NewFlagSet("weir push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pushUsage); fs.PrintDefaults() }
	fs.StringVar(&f.socket, "socket-path", defSocket, "daemon socket (env WEIR_SOCKET_PATH)")
	fs.StringVar(&f.durability, "durability", "durable", "tier: durable or buffered")
	fs.IntVar(&f.concurrency, "concurrency", 1, "connections (of one producer)")
	fs.IntVar(&f.batch, "batch", 1, "records per frame (1: single-record frames)")
	fs.IntVar(&f.window, "window", client.DefaultWindow, "records in flight per connection")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up after this long (0: no limit)")
	fs.IntVar(&f.maxLine, "max-record-bytes", wire.DefaultMaxFrameBytes-64, "longest accepted line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var tier client.Durability
	switch f.durability {
	case "durable":
		tier = client.Durable
	case "buffered":
		tier = client.Buffered
	default:
		fmt.Fprintf(stderr, "weir push: --durability %q: must be durable or buffered\n", f.durability)
		return 2
	}
	if f.concurrency < 1 || f.batch < 1 || f.window < 1 {
		fmt.Fprintln(stderr, "weir push: --concurrency, --batch and --window must be at least 1")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	res, err := runPush(ctx, f, tier, stdin, stderr)
	fmt.Fprintf(stdout, "acked %d nacked %d\n", res.acked.Load(), res.nacked.Load())
	if res.resent > 0 {
		fmt.Fprintf(stderr, "resent %d records after reconnects\n", res.resent)
	}
	if res.overloaded > 0 {
		fmt.Fprintf(stderr, "retried %d frames after Overloaded\n", res.overloaded)
	}
	if err != nil {
		fmt.Fprintf(stderr, "weir push: %v\n", err)
		return 1
	}
	if res.nacked.Load() > 0 {
		return 1
	}
	return 0
}

type pushResult struct {
	acked, nacked atomic.Int64
	resent        uint64 // records sent again after a reconnect
	overloaded    uint64 // frames sent again after an Overloaded Nack
}

// chunk is up to --batch consecutive lines; first is the first's line number.
type chunk struct {
	first    int
	payloads [][]byte
}

func runPush(ctx context.Context, f pushFlags, tier client.Durability, stdin io.Reader, stderr io.Writer) (*pushResult, error) {
	res := &pushResult{}
	clients, err := dialProducer(ctx, f)
	if err != nil {
		return res, err
	}

	var errMu sync.Mutex
	var firstErr error
	setErr := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	var nackMu sync.Mutex
	reportNack := func(ch chunk, err error) {
		res.nacked.Add(int64(len(ch.payloads)))
		code := "error"
		var ne *client.NackError
		switch {
		case errors.Is(err, client.ErrOutcomeUnknown):
			code = "outcome unknown"
		case errors.As(err, &ne):
			code = ne.Code.String()
		}
		nackMu.Lock()
		defer nackMu.Unlock()
		for i := range ch.payloads {
			fmt.Fprintf(stderr, "nack line %d: %s: %v\n", ch.first+i, code, err)
		}
	}

	// One feeder per connection keeps each connection's records in input
	// order; chunks are dealt round-robin.
	feeds := make([]chan chunk, f.concurrency)
	var wg sync.WaitGroup
	for i := range feeds {
		feeds[i] = make(chan chunk, 64)
		wg.Add(1)
		go func(c *client.Client, feed <-chan chunk) {
			defer wg.Done()
			for ch := range feed {
				err := c.PushAsync(ctx, ch.payloads, tier, func(err error) {
					if err != nil {
						reportNack(ch, err)
					} else {
						res.acked.Add(int64(len(ch.payloads)))
					}
				})
				if err != nil {
					reportNack(ch, err)
					if ctx.Err() != nil {
						setErr(ctx.Err())
					}
				}
			}
		}(clients[i], feeds[i])
	}

	if err := readChunks(ctx, stdin, f, feeds); err != nil {
		setErr(err)
	}
	for _, feed := range feeds {
		close(feed)
	}
	wg.Wait()
	// Close waits for every in-flight answer (or ctx).
	for _, c := range clients {
		if err := c.Close(ctx); err != nil && !errors.Is(err, client.ErrClosed) {
			setErr(fmt.Errorf("waiting for acks: %w", err))
		}
		res.resent += c.Resent()
		res.overloaded += c.OverloadRetried()
	}
	if ctx.Err() != nil {
		setErr(ctx.Err())
	}
	return res, firstErr
}

// dialProducer opens --concurrency connections of one producer: the
// records share one sequence space, so no two connections ever number a
// record alike.
func dialProducer(ctx context.Context, f pushFlags) ([]*client.Client, error) {
	prod := client.NewProducer()
	clients := make([]*client.Client, f.concurrency)
	for i := range clients {
		c, err := client.Dial(ctx, f.socket, client.WithWindow(f.window), client.WithProducer(prod))
		if err != nil {
			for _, c := range clients[:i] {
				c.Close(context.Background())
			}
			return nil, fmt.Errorf("connect to %s: %w", f.socket, err)
		}
		clients[i] = c
	}
	return clients, nil
}

// readChunks reads stdin into chunks of up to --batch lines and deals them
// round-robin to feeds, until the input or ctx ends.
func readChunks(ctx context.Context, stdin io.Reader, f pushFlags, feeds []chan chunk) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), f.maxLine+1)
	line, next := 0, 0
	cur := chunk{first: 1}
	flush := func() bool {
		if len(cur.payloads) == 0 {
			return true
		}
		select {
		case feeds[next] <- cur:
		case <-ctx.Done():
			return false
		}
		next = (next + 1) % len(feeds)
		cur = chunk{first: line + 1}
		return true
	}
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			if len(cur.payloads) == 0 {
				cur.first = line + 1
			} else if !flush() {
				break
			}
			continue
		}
		if len(cur.payloads) == 0 {
			cur.first = line
		}
		cur.payloads = append(cur.payloads, append([]byte(nil), b...))
		if len(cur.payloads) == f.batch && !flush() {
			break
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading stdin at line %d: %w", line+1, err)
	}
	return nil
}
