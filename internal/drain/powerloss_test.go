package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/vfs/memfs"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
)

var quietLog = slog.New(slog.DiscardHandler)

// lister is a Source over a closed buffer's directory on fsys.
type lister struct {
	fs  *memfs.FS
	dir string
}

func (l lister) Sealed() ([]wab.SegmentRef, error) { return wab.ListSealed(l.fs, l.dir) }
func (l lister) Notify() <-chan struct{}           { return nil }

// crashSink keeps every record committed to it, across the node's crash
// (it is the world outside the node). Its crashAt-th Commit finds the
// power out: it takes the node's power-loss image and stores nothing of
// that batch or any later one.
type crashSink struct {
	mem     *memfs.FS
	crashAt int
	opts    memfs.CrashOptions

	mu    sync.Mutex
	calls int
	ids   map[string]sink.RecordID // payload → id it was delivered under
	dups  int
	bad   []string
	image *memfs.FS
	acked map[string]bool // Durable payloads acknowledged when the image was taken
	live  map[string]bool // acknowledged so far (shared with the producer)
}

func (s *crashSink) Name() string                       { return "crash" }
func (s *crashSink) MaxBatchSize() int                  { return 16 }
func (s *crashSink) Health(context.Context) sink.Health { return sink.Health{State: sink.Healthy} }
func (s *crashSink) Close() error                       { return nil }

var errPowerOut = sink.Transient(errors.New("the node lost power"))

func (s *crashSink) Commit(_ context.Context, b sink.Batch) (sink.CommitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.mem != nil && s.image == nil && s.calls == s.crashAt {
		s.powerOut()
	}
	if s.image != nil && s.mem != nil {
		return sink.CommitResult{}, errPowerOut
	}
	for _, r := range b.Records {
		p := string(r.Payload)
		if id, ok := s.ids[p]; ok {
			s.dups++
			if id != r.ID {
				s.bad = append(s.bad, fmt.Sprintf("%s delivered again under another id", p))
			}
			continue
		}
		s.ids[p] = r.ID
	}
	return sink.CommitResult{}, nil
}

// powerOut takes the power-loss image and notes what was acknowledged
// Durable by then. Callers hold s.mu.
func (s *crashSink) powerOut() {
	s.image = s.mem.CrashClone(s.opts)
	s.acked = make(map[string]bool, len(s.live))
	for p, durable := range s.live {
		if durable {
			s.acked[p] = true
		}
	}
}

// TestDeliveryAcrossPowerLoss: a node takes records into a write-ahead
// buffer on a simulated disk while its drain delivers them — from open
// segments' tails and from sealed segments — recording progress without
// fdatasync; the power fails at a seeded commit, in every crash mode. The
// node restarts on what the disk kept (wab.Open recovers it) and drains
// again. Every Durable record acknowledged before the power loss is in the
// sink, every redelivery carries the id of the first delivery, and no
// sidecar a power loss tore stops the drain. WEIR_DRAIN_POWERLOSS_SEEDS
// sets the seeds per mode (default 8).
func TestDeliveryAcrossPowerLoss(t *testing.T) {
	seeds := 8
	if v := os.Getenv("WEIR_DRAIN_POWERLOSS_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("WEIR_DRAIN_POWERLOSS_SEEDS: %v", err)
		}
		seeds = n
	}
	modes := []memfs.CrashMode{memfs.CrashDropUnsynced, memfs.CrashKeepPrefix, memfs.CrashTornPages, memfs.CrashKeepAll}
	redelivered := 0
	for _, mode := range modes {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%s/%d", mode, seed), func(t *testing.T) {
				redelivered += powerLossRun(t, mode, seed)
			})
		}
	}
	t.Logf("%d runs; %d records delivered again after a power loss (each under its first id)", len(modes)*seeds, redelivered)
}

func powerLossRun(t *testing.T, mode memfs.CrashMode, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, uint64(mode)))
	const dir, records = "/wab", 300
	mem := memfs.New()
	s := &crashSink{mem: mem, crashAt: 2 + rng.IntN(15), ids: map[string]sink.RecordID{}, live: map[string]bool{},
		opts: memfs.CrashOptions{Mode: mode, Rand: rand.NewPCG(seed, 7), PageSize: 512, SectorSize: 64, Junk: seed%2 == 1}}
	l, err := wab.Open(context.Background(), wab.Options{FS: mem, Dir: dir, Shards: 2, Logger: quietLog, SegmentMaxAge: -1,
		SegmentMaxBytes: 1 << 20 / 64 * int64(1+rng.IntN(4)), PreallocateBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	opts := fastOptions(dir, l, s, nil)
	opts.FS = mem
	opts.Linger = time.Duration(rng.IntN(3)) * time.Millisecond
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { d.Run(ctx); close(ran) }()
	for i := range records {
		dur := wab.Durability(rng.IntN(2))
		p := fmt.Sprintf("rec-%04d-%s", i, string(make([]byte, rng.IntN(200))))
		done := make(chan error, 1)
		req := &wab.Request{Durability: dur, Payloads: [][]byte{[]byte(p)}, Received: time.Now().UnixNano(), Done: func(err error) { done <- err }}
		if err := l.Submit(context.Background(), rng.IntN(2), req, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.live[p] = dur == wab.Durable
		taken := s.image != nil
		s.mu.Unlock()
		if taken && rng.IntN(4) == 0 {
			break // the power is out: nothing more is acknowledged
		}
	}
	// Let the drain catch up so that the image, if not taken yet, is
	// taken mid-delivery or after it.
	waitFor(t, "the sink to reach its crash point or deliver everything", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.image != nil || len(s.ids) == len(s.live)
	})
	cancel()
	<-ran
	s.mu.Lock()
	if s.image == nil { // everything delivered before the crash point
		s.powerOut()
	}
	image := s.image
	s.mem = nil // the restarted node's commits are stored
	s.mu.Unlock()
	l.Close(context.Background())

	// Restart on what the disk kept.
	l2, err := wab.Open(context.Background(), wab.Options{FS: image, Dir: dir, Shards: 2, Logger: quietLog, SegmentMaxAge: -1, PreallocateBytes: -1})
	if err != nil {
		t.Fatalf("recovery after the power loss: %v", err)
	}
	if err := l2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts2 := fastOptions(dir, lister{image, dir}, s, nil)
	opts2.FS = image
	d2, err := New(opts2)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	ran2 := make(chan struct{})
	go func() { d2.Run(ctx2); close(ran2) }()
	waitFor(t, "every sealed segment delivered and removed", func() bool {
		refs, err := wab.ListSealed(image, dir)
		return err == nil && len(refs) == 0
	})
	cancel2()
	<-ran2

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bad {
		t.Error(b)
	}
	for p := range s.acked {
		if _, ok := s.ids[p]; !ok {
			t.Errorf("Durable record %.12s… acknowledged before the power loss never reached the sink", p)
		}
	}
	for p := range s.ids {
		if _, ok := s.live[p]; !ok {
			t.Errorf("the sink holds %.12s…, never submitted", p)
		}
	}
	return s.dups
}
