package dedup

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weir-io/weir/sink"
)

// benchBatch is the records per batch of every benchmark here.
const benchBatch = 256

// fill makes claims n·len(claims)… fresh keys with their own ids.
func fill(claims []Claim, n uint64) {
	for i := range claims {
		v := n*uint64(len(claims)) + uint64(i) + 1
		binary.LittleEndian.PutUint64(claims[i].Key[:], v*0x9e3779b97f4a7c15)
		binary.LittleEndian.PutUint64(claims[i].Key[8:], v)
		binary.LittleEndian.PutUint64(claims[i].ID[:], v)
	}
}

// benchClaims claims a batch of fresh keys per iteration and reports ns
// per record (wall and this process's CPU) and round trips per batch (pipelines counts them; nil for an
// in-process store).
func benchClaims(b *testing.B, s Store, pipelines func() int) (records uint64) {
	claims := make([]Claim, benchBatch)
	out := make([]Answer, benchBatch)
	ctx := context.Background()
	var n uint64
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		fill(claims, n)
		n++
		if err := s.Claim(ctx, claims, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*benchBatch), "ns/record")
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n*benchBatch), "cpu-ns/record")
	rt := 0
	if pipelines != nil {
		rt = pipelines()
	}
	b.ReportMetric(float64(rt)/float64(n), "roundtrips/batch")
	return n * benchBatch
}

// processCPU is the CPU time (user and system) the process has used, in
// nanoseconds: with a store on a server, the client's own share of a
// record's cost (ns/record also waits on the server, and the machine).
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkMemoryClaim: one Claim of 256 fresh keys on a full, churning
// in-process store (64 MiB).
//
//	go test -run '^$' -bench 'Claim$' -count 5 ./internal/dedup/
func BenchmarkMemoryClaim(b *testing.B) {
	m := NewMemory(MemoryOptions{MaxBytes: DefaultMaxBytes, Window: time.Hour})
	claims := make([]Claim, benchBatch)
	out := make([]Answer, benchBatch)
	for n := range uint64(DefaultMaxBytes / MemoryEntryBytes / benchBatch) { // fill it first
		fill(claims, 1<<40+n)
		_ = m.Claim(context.Background(), claims, out)
	}
	b.ResetTimer()
	benchClaims(b, m, nil)
}

// BenchmarkRedisClaim: one Claim of 256 fresh keys on the test Redis
// server (WEIR_REDIS_ADDR, default 127.0.0.1:6379): one pipelined round
// trip of 256 SET NX GET PX.
//
//	go test -run '^$' -bench 'Claim$' -count 5 ./internal/dedup/
func BenchmarkRedisClaim(b *testing.B) {
	r := newRedisStore(b, sharedRedisURL(b), time.Minute)
	claimAll(b, r, claimOf("warm-up", 1)) // dial outside the count
	trips := r.roundTrips.Load()
	cpu0 := redisCPU(b)
	b.ResetTimer()
	n := benchClaims(b, r, func() int { return int(r.roundTrips.Load() - trips) })
	b.ReportMetric(float64(redisCPU(b)-cpu0)/float64(n), "server-cpu-ns/record")
}

// redisCPU is the CPU time (user and system, in nanoseconds) the test
// Redis server has used, by INFO cpu: the whole server's, other clients'
// included.
func redisCPU(b *testing.B) int64 {
	opt, err := redis.ParseURL(sharedRedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(l, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return int64(total * 1e9)
}

// BenchmarkJudge: a Deduper over an in-process store judging batches of
// 256 records (16-byte key material, every 8th record a duplicate of an
// earlier batch's), KeyOf included.
//
//	go test -run '^$' -bench 'Judge$' -count 5 ./internal/dedup/
func BenchmarkJudge(b *testing.B) {
	d := New(NewMemory(MemoryOptions{Window: time.Hour}), Options{Stream: "bench", Logger: quiet})
	keys := make([][]byte, benchBatch)
	for i := range keys {
		keys[i] = make([]byte, 16)
	}
	ids := make([]sink.RecordID, benchBatch)
	dup := make([]bool, benchBatch)
	ctx := context.Background()
	var n, dups uint64
	b.ReportAllocs()
	for b.Loop() {
		for i := range keys {
			v := n*benchBatch + uint64(i)
			k := v
			if i%8 == 7 && n > 0 {
				k = v - benchBatch - 1 // the key of a record of the previous batch
			}
			binary.LittleEndian.PutUint64(keys[i], k)
			binary.LittleEndian.PutUint64(ids[i][:], v)
		}
		n++
		d.Judge(ctx, keys, ids, dup)
		for _, x := range dup {
			if x {
				dups++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*benchBatch), "ns/record")
	b.ReportMetric(float64(dups)/float64(n), "dups/batch")
}
