package readout

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Dash stands for a figure that is not known (no sample yet, no metric,
// nothing observed in the window).
const Dash = "–"

// Num writes v exactly, without exponent: counts and gauges as they are.
func Num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Bytes writes a size in binary units: "512 B", "1.5 KiB", "3.2 GiB".
func Bytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// Rate writes a per-second rate with the precision it deserves: "0/s",
// "2.50/s", "42.5/s", "1234/s"; Dash when negative (not known).
func Rate(v float64) string {
	switch {
	case v < 0 || math.IsNaN(v):
		return Dash
	case v == 0:
		return "0/s"
	case v < 10:
		return fmt.Sprintf("%.2f/s", v)
	case v < 100:
		return fmt.Sprintf("%.1f/s", v)
	}
	return fmt.Sprintf("%.0f/s", v)
}

// ByteRate writes bytes per second: "1.5 MiB/s"; Dash when negative.
func ByteRate(v float64) string {
	if v < 0 || math.IsNaN(v) {
		return Dash
	}
	return Bytes(v) + "/s"
}

// Seconds writes a latency: "850 µs", "12.3 ms", "1.20 s"; Dash when
// negative or NaN (nothing observed).
func Seconds(v float64) string {
	switch {
	case v < 0 || math.IsNaN(v):
		return Dash
	case v < 1e-3:
		return fmt.Sprintf("%.0f µs", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.1f ms", v*1e3)
	}
	return fmt.Sprintf("%.2f s", v)
}

// Age writes a span of whole seconds for people: "45s", "3m 07s",
// "2h 05m", "3d 04h"; Dash when negative.
func Age(sec float64) string {
	if sec < 0 || math.IsNaN(sec) {
		return Dash
	}
	s := int64(sec)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh %02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd %02dh", s/86400, s%86400/3600)
}

// Percent writes a ratio as a percentage, one decimal: "42.0%"; Dash
// when negative (not known, or no cap to compare with).
func Percent(r float64) string {
	if r < 0 || math.IsNaN(r) {
		return Dash
	}
	return fmt.Sprintf("%.1f%%", 100*r)
}

// Clock writes a time of day in UTC: "14:03:27Z".
func Clock(t time.Time) string { return t.UTC().Format("15:04:05Z") }
