package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weir-io/weir/internal/testenv"
)

// jetStream connects to the server on the machine, or skips (fails under
// WEIR_REQUIRE_SERVICES=1) when none answers.
func jetStream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	url := testenv.NATS(t)
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return url, js
}

// TestJetStreamSourceKill9: a JetStream source under the daemon, killed -9
// mid-stream again and again; every published message ends in raw.
func TestJetStreamSourceKill9(t *testing.T) {
	url, js := jetStream(t)
	sfx := testenv.Suffix()
	stream, subject := "WEIRSYS_"+sfx, "weirsys."+sfx
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	cfg := writeConfig(t, fmt.Sprintf(`
[[source]]
name = "events"
type = "nats"
[source.nats]
url = %q
stream = %q
consumer = "weir"
fetch_batch = 200
fetch_max_wait = "500ms"
# Unacknowledged messages of a killed daemon come back after this.
ack_wait = "3s"
`, url, stream))
	d := newDaemon(t, "--config", cfg)
	d.start()

	const n = 5000
	var mu sync.Mutex
	published := map[string]bool{}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			p := fmt.Sprintf("js-%06d", i)
			if _, err := js.Publish(pctx, fmt.Sprintf("%s.%d", subject, i%3), []byte(p)); err != nil {
				if pctx.Err() == nil {
					t.Errorf("publish: %v", err)
				}
				return
			}
			mu.Lock()
			published[p] = true
			mu.Unlock()
			if i%50 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	for cycle := 1; cycle <= sourceKillCycles; cycle++ {
		d.waitScrape("source writing", 30*time.Second, func(m map[string]float64) bool { return written(m) > 0 })
		time.Sleep(time.Duration(150+cycle*97%300) * time.Millisecond)
		d.kill()
		mu.Lock()
		t.Logf("cycle %d: %d published", cycle, len(published))
		mu.Unlock()
		d.start()
	}
	wg.Wait()
	mu.Lock()
	want := published
	mu.Unlock()
	if len(want) != n {
		t.Fatalf("published %d of %d", len(want), n)
	}
	got := waitDelivered(t, d, want, 60*time.Second)
	dups := 0
	for _, c := range got {
		dups += c - 1
	}
	t.Logf("all %d messages in raw (%d duplicates)", n, dups)
	if err := d.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestFileSourceRotationAndRestart: a file source tails a log that is
// rotated while the daemon is stopped, killed and restarted mid-file;
// every line ends in raw.
func TestFileSourceRotationAndRestart(t *testing.T) {
	logDir := t.TempDir()
	logPath := filepath.Join(logDir, "app.log")
	cfg := writeConfig(t, fmt.Sprintf(`
[[source]]
name = "applog"
type = "file"
[source.file]
glob = %q
poll_interval = "50ms"
max_batch_records = 100
`, filepath.Join(logDir, "*.log")))
	d := newDaemon(t, "--config", cfg)
	d.start()

	lg := newGrowingLog(t, logPath, "line")
	write, rotate := lg.write, lg.rotate
	steps := []func(){
		func() { write(2000) },
		func() { time.Sleep(150 * time.Millisecond); d.kill(); write(500); d.start() }, // kill -9 mid-file
		func() { write(1000); rotate(); write(1000) },                                  // rotation while running
		func() {
			time.Sleep(100 * time.Millisecond)
			if err := d.stop(30 * time.Second); err != nil {
				t.Fatalf("stop: %v", err)
			}
			write(300)
			rotate() // rotated while the daemon is down
			write(700)
			d.start()
		},
		func() {
			write(1000)
			time.Sleep(100 * time.Millisecond)
			d.kill()
			rotate()
			write(500)
			d.start()
		},
	}
	for _, s := range steps {
		s()
		time.Sleep(300 * time.Millisecond)
	}
	lg.close()
	want := lg.want
	got := waitDelivered(t, d, want, 60*time.Second)
	dups := 0
	for _, c := range got {
		dups += c - 1
	}
	t.Logf("all %d lines in raw after rotations, a stop and two kills (%d duplicates)", len(want), dups)
}

// growingLog is an application's log file that the file-source tests
// append numbered lines to and rotate by rename.
type growingLog struct {
	t      *testing.T
	path   string
	prefix string
	f      *os.File
	line   int
	want   map[string]bool // every line written
}

func newGrowingLog(t *testing.T, path, prefix string) *growingLog {
	g := &growingLog{t: t, path: path, prefix: prefix, want: map[string]bool{}}
	g.open()
	return g
}

func (g *growingLog) open() {
	f, err := os.OpenFile(g.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		g.t.Fatal(err)
	}
	g.f = f
}

// write appends k lines.
func (g *growingLog) write(k int) {
	for range k {
		p := fmt.Sprintf("%s-%06d", g.prefix, g.line)
		g.line++
		if _, err := fmt.Fprintln(g.f, p); err != nil {
			g.t.Fatal(err)
		}
		g.want[p] = true
	}
}

// rotate renames the file to path.<lines so far> and starts a new one.
func (g *growingLog) rotate() {
	if err := g.f.Close(); err != nil {
		g.t.Fatal(err)
	}
	if err := os.Rename(g.path, g.path+"."+fmt.Sprint(g.line)); err != nil {
		g.t.Fatal(err)
	}
	g.open()
}

func (g *growingLog) close() { g.f.Close() }
