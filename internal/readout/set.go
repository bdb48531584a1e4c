// Package readout reads gathered Prometheus metrics the way weir's views
// for people need them — series by name, sums over label matches, the
// label values whose gauge is set, histogram quantiles over a window —
// and writes numbers and units for people. `weir status` (from a scrape)
// and the status page (from the daemon's own registry) share it, so a
// figure reads the same in both.
package readout

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a counter, gauge or untyped metric.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Histogram is one histogram series: cumulative bucket counts by upper
// bound, ascending (the +Inf bucket is Count).
type Histogram struct {
	Labels  map[string]string
	Count   float64
	Sum     float64
	Buckets []Bucket
}

// Bucket is a histogram bucket: Count observations at most Upper.
type Bucket struct {
	Upper float64
	Count float64
}

// Set is the series of one gather or scrape, by metric name.
type Set struct {
	series map[string][]Sample
	hists  map[string][]Histogram
}

// FromFamilies reads the families of prometheus.Gatherer.Gather.
func FromFamilies(fams []*dto.MetricFamily) Set {
	s := Set{series: map[string][]Sample{}, hists: map[string][]Histogram{}}
	for _, f := range fams {
		s.add(f)
	}
	return s
}

// Parse reads the text exposition format (a /metrics body).
func Parse(r io.Reader) (Set, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Set{}, fmt.Errorf("readout: parse metrics: %w", err)
	}
	s := Set{series: map[string][]Sample{}, hists: map[string][]Histogram{}}
	for _, f := range fams {
		s.add(f)
	}
	return s, nil
}

func (s Set) add(f *dto.MetricFamily) {
	name := f.GetName()
	for _, m := range f.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		switch {
		case m.Counter != nil:
			s.series[name] = append(s.series[name], Sample{labels, m.GetCounter().GetValue()})
		case m.Gauge != nil:
			s.series[name] = append(s.series[name], Sample{labels, m.GetGauge().GetValue()})
		case m.Untyped != nil:
			s.series[name] = append(s.series[name], Sample{labels, m.GetUntyped().GetValue()})
		case m.Histogram != nil:
			h := m.GetHistogram()
			x := Histogram{Labels: labels, Count: float64(h.GetSampleCount()), Sum: h.GetSampleSum()}
			for _, b := range h.GetBucket() {
				if math.IsInf(b.GetUpperBound(), +1) {
					continue
				}
				x.Buckets = append(x.Buckets, Bucket{b.GetUpperBound(), float64(b.GetCumulativeCount())})
			}
			s.hists[name] = append(s.hists[name], x)
		}
	}
}

// Has reports whether the set holds a series of name.
func (s Set) Has(name string) bool { return len(s.series[name]) > 0 || len(s.hists[name]) > 0 }

// Series are the series of name.
func (s Set) Series(name string) []Sample { return s.series[name] }

// Sum adds the series of name whose labels include match.
func (s Set) Sum(name string, match map[string]string) float64 {
	var t float64
	for _, x := range s.series[name] {
		if matches(x.Labels, match) {
			t += x.Value
		}
	}
	return t
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// LabelsWhere are the values of label of name's series whose value
// satisfies pred, sorted.
func (s Set) LabelsWhere(name, label string, pred func(float64) bool) []string {
	var out []string
	for _, x := range s.series[name] {
		if pred(x.Value) {
			out = append(out, x.Labels[label])
		}
	}
	sort.Strings(out)
	return out
}

// Values are the distinct values of label among name's series, sorted.
func (s Set) Values(name, label string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s.series[name] {
		if v, ok := x.Labels[label]; ok && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// Breakdown renders " (a 1, b 2)": the non-zero series of name summed by
// label, in label order; "" when all are zero.
func (s Set) Breakdown(name, label string) string {
	by := map[string]float64{}
	for _, x := range s.series[name] {
		if x.Value > 0 {
			by[x.Labels[label]] += x.Value
		}
	}
	if len(by) == 0 {
		return ""
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %s", k, Num(by[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Histogram merges the histogram series of name whose labels include
// match (bucket counts added by upper bound). ok is false when there is
// none.
func (s Set) Histogram(name string, match map[string]string) (h Histogram, ok bool) {
	byUpper := map[float64]float64{}
	for _, x := range s.hists[name] {
		if !matches(x.Labels, match) {
			continue
		}
		ok = true
		h.Count += x.Count
		h.Sum += x.Sum
		for _, b := range x.Buckets {
			byUpper[b.Upper] += b.Count
		}
	}
	for u, c := range byUpper {
		h.Buckets = append(h.Buckets, Bucket{u, c})
	}
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].Upper < h.Buckets[j].Upper })
	return h, ok
}

// Since is what h counted after old, an earlier reading of the same
// series: their difference, bucket by bucket. A reset (a count that went
// down) gives h itself.
func (h Histogram) Since(old Histogram) Histogram {
	if old.Count > h.Count || len(old.Buckets) != len(h.Buckets) {
		return h
	}
	d := Histogram{Labels: h.Labels, Count: h.Count - old.Count, Sum: h.Sum - old.Sum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		d.Buckets[i] = Bucket{b.Upper, b.Count - old.Buckets[i].Count}
	}
	return d
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) of h as Prometheus's
// histogram_quantile does: linear interpolation inside the bucket that
// holds the rank, from 0 for the first bucket; a rank beyond the last
// finite bucket is that bucket's upper bound. It is NaN for an empty
// histogram.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Buckets) == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank {
			if b.Count == below {
				return b.Upper
			}
			return lower + (b.Upper-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.Upper, b.Count
	}
	return h.Buckets[len(h.Buckets)-1].Upper
}
