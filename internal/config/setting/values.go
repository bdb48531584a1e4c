package setting

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var errEmpty = errors.New("empty value")

// ParseInt reads a 32-bit integer.
func ParseInt(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errEmpty
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	if n > math.MaxInt32 || n < math.MinInt32 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// ParseSize reads a byte count: a plain integer of bytes, or an integer
// followed by KiB, MiB or GiB (optionally separated by a space), for
// example "4096", "64KiB", "256 MiB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errEmpty
	}
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || t == "" || t[0] == '+' {
		return 0, fmt.Errorf("%q is not a size: want bytes as an integer, optionally with a KiB, MiB or GiB suffix", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is not a size: negative", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// FormatSize writes n in the largest of GiB, MiB, KiB that divides it
// exactly, or in bytes.
func FormatSize(n int64) string {
	if n != 0 {
		for _, u := range sizeUnits[:3] {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseDuration reads a Go duration.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errEmpty
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: want a number with a unit, such as \"250ms\", \"5s\" or \"1m\"", s)
	}
	return d, nil
}

// FormatDuration writes d as Go does, without zero tails (1m, not 1m0s).
func FormatDuration(d time.Duration) string {
	s := d.String()
	// time.Duration.String writes 1m0s and 1h0m0s; drop the zero tails.
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// FormatCount writes an integer.
func FormatCount(n int64) string { return strconv.FormatInt(n, 10) }
