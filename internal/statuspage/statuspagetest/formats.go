// Package statuspagetest holds what the status page's tests share: the
// table of its figure formats, which the unit tests check render.go's
// formats against and the browser test checks status.js's against.
package statuspagetest

import "time"

// FormatCase is a value and how the page writes it in a kind of figure.
type FormatCase struct {
	Kind  string
	Value any
	Want  string
}

// FormatCases are the page's formats, case by case: the unit tests check
// format against them, and the browser test checks status.js's against
// them, so that the first paint and the refreshes agree.
func FormatCases() []FormatCase {
	return []FormatCase{
		{"text", "degraded", "degraded"},
		{"text", "", "–"},
		{"yesno", true, "yes"},
		{"yesno", false, "no"},
		{"clock", time.Date(2026, 3, 1, 14, 3, 27, 0, time.UTC), "14:03:27Z"},
		{"num", 0.0, "0"},
		{"num", 1234567.0, "1234567"},
		{"num", 0.125, "0.125"},
		{"count", -1.0, "–"},
		{"count", 42.0, "42"},
		{"bytes", 0.0, "0 B"},
		{"bytes", 1023.0, "1023 B"},
		{"bytes", 1536.0, "1.5 KiB"},
		{"bytes", 5.3e9, "4.9 GiB"},
		{"rate", -1.0, "–"},
		{"rate", 0.0, "0/s"},
		{"rate", 2.5, "2.50/s"},
		{"rate", 42.44, "42.4/s"},
		{"rate", 1234.4, "1234/s"},
		{"byterate", 3.1e6, "3.0 MiB/s"},
		{"byterate", -1.0, "–"},
		{"secs", -1.0, "–"},
		{"secs", 0.000851, "851 µs"},
		{"secs", 0.01234, "12.3 ms"},
		{"secs", 1.2, "1.20 s"},
		{"age", -1.0, "–"},
		{"age", 45.9, "45s"},
		{"age", 187.0, "3m 07s"},
		{"age", 7500.0, "2h 05m"},
		{"age", 273600.0, "3d 04h"},
		{"pct", 0.42, "42.0%"},
		{"pct", -1.0, "–"},
	}
}
