package readout

import (
	"math"
	"strings"
	"testing"
)

const text = `# TYPE weir_records_acked_total counter
weir_records_acked_total{durability="durable"} 10
weir_records_acked_total{durability="buffered"} 5
# TYPE weir_records_nacked_total counter
weir_records_nacked_total{code="QueueFull",durability="durable"} 3
weir_records_nacked_total{code="FrameTooLarge",durability="durable"} 0
weir_records_nacked_total{code="QueueFull",durability="buffered"} 1
# TYPE weir_drain_state gauge
weir_drain_state{state="idle"} 0
weir_drain_state{state="draining"} 1
# TYPE weir_fdatasync_duration_seconds histogram
weir_fdatasync_duration_seconds_bucket{shard="0",le="0.001"} 50
weir_fdatasync_duration_seconds_bucket{shard="0",le="0.01"} 90
weir_fdatasync_duration_seconds_bucket{shard="0",le="0.1"} 100
weir_fdatasync_duration_seconds_bucket{shard="0",le="+Inf"} 100
weir_fdatasync_duration_seconds_sum{shard="0"} 0.5
weir_fdatasync_duration_seconds_count{shard="0"} 100
weir_fdatasync_duration_seconds_bucket{shard="1",le="0.001"} 0
weir_fdatasync_duration_seconds_bucket{shard="1",le="0.01"} 0
weir_fdatasync_duration_seconds_bucket{shard="1",le="0.1"} 0
weir_fdatasync_duration_seconds_bucket{shard="1",le="+Inf"} 100
weir_fdatasync_duration_seconds_sum{shard="1"} 50
weir_fdatasync_duration_seconds_count{shard="1"} 100
`

func TestSet(t *testing.T) {
	s, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sum("weir_records_acked_total", nil); got != 15 {
		t.Errorf("sum %v", got)
	}
	if got := s.Sum("weir_records_acked_total", map[string]string{"durability": "durable"}); got != 10 {
		t.Errorf("sum durable %v", got)
	}
	if got := s.Breakdown("weir_records_nacked_total", "code"); got != " (QueueFull 4)" {
		t.Errorf("breakdown %q", got)
	}
	if got := s.LabelsWhere("weir_drain_state", "state", func(v float64) bool { return v == 1 }); len(got) != 1 || got[0] != "draining" {
		t.Errorf("labels where %v", got)
	}
	if got := s.Values("weir_records_nacked_total", "durability"); strings.Join(got, ",") != "buffered,durable" {
		t.Errorf("values %v", got)
	}
	if !s.Has("weir_fdatasync_duration_seconds") || s.Has("weir_nothing") {
		t.Error("Has")
	}
	if _, err := Parse(strings.NewReader("not metrics {")); err == nil {
		t.Error("a malformed body parses")
	}
}

func TestQuantile(t *testing.T) {
	s, _ := Parse(strings.NewReader(text))
	shard0, _ := s.Histogram("weir_fdatasync_duration_seconds", map[string]string{"shard": "0"})
	both, _ := s.Histogram("weir_fdatasync_duration_seconds", nil)
	tests := []struct {
		name string
		h    Histogram
		q    float64
		want float64
	}{
		{"median in the first bucket, from 0", shard0, 0.5, 0.001},
		{"p25 interpolated", shard0, 0.25, 0.0005},
		{"p95 in the third bucket", shard0, 0.95, 0.01 + 0.09*0.5},
		{"merged: p99 beyond the last finite bucket", both, 0.99, 0.1},
		{"merged median at a bucket's top", both, 0.5, 0.1},
		{"empty", Histogram{}, 0.5, math.NaN()},
	}
	for _, tt := range tests {
		got := tt.h.Quantile(tt.q)
		if !(got == tt.want || math.Abs(got-tt.want) < 1e-12 || (math.IsNaN(got) && math.IsNaN(tt.want))) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	// Since: what was observed after an earlier reading.
	old := Histogram{Count: 50, Buckets: []Bucket{{0.001, 50}, {0.01, 50}, {0.1, 50}}}
	d := shard0.Since(old)
	if d.Count != 50 || d.Buckets[0].Count != 0 || d.Buckets[1].Count != 40 {
		t.Errorf("since %+v", d)
	}
	if got := d.Quantile(0.5); math.Abs(got-(0.001+0.009*25/40)) > 1e-12 {
		t.Errorf("windowed median %v", got)
	}
	if r := old.Since(shard0); r.Count != old.Count {
		t.Errorf("a reset counts from zero: %+v", r)
	}
}
