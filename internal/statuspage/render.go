package statuspage

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/weir-io/weir/internal/readout"
)

//go:embed assets
var assets embed.FS

var pageTemplate = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"f":      format,
	"points": budgetLine,
	"neg":    func(v float64) float64 { return -v },
	"sub":    func(a, b float64) float64 { return a - b },
}).ParseFS(assets, "assets/status.html"))

// render writes the page of s.
func render(w io.Writer, s Snapshot) error {
	if err := pageTemplate.Execute(w, s); err != nil {
		return fmt.Errorf("statuspage: %w", err)
	}
	return nil
}

// format writes v as the page's kind of figure (an element's data-f;
// status.js has the same formats): what the first paint shows is what
// the script shows for the same value. v is what the snapshot holds or
// what its JSON decodes to.
func format(kind string, v any) string {
	switch kind {
	case "text":
		if s := fmt.Sprint(v); s != "" {
			return s
		}
		return readout.Dash
	case "yesno":
		if b, _ := v.(bool); b {
			return "yes"
		}
		return "no"
	case "clock":
		switch t := v.(type) {
		case time.Time:
			return readout.Clock(t)
		case string:
			if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
				return readout.Clock(p)
			}
		}
		return readout.Dash
	}
	x, ok := number(v)
	f := numberFormats[kind]
	if !ok || f == nil {
		return readout.Dash
	}
	return f(x)
}

// numberFormats are the kinds of figure of a number.
var numberFormats = map[string]func(float64) string{
	"num":      readout.Num,
	"bytes":    readout.Bytes,
	"rate":     readout.Rate,
	"byterate": readout.ByteRate,
	"secs":     readout.Seconds,
	"age":      readout.Age,
	"pct":      readout.Percent,
	"count": func(x float64) string { // a count that may be unknown (-1)
		if x < 0 {
			return readout.Dash
		}
		return readout.Num(x)
	},
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// budgetLine is the timeline's budget points as an SVG polyline's, in the
// timeline's coordinates: x in seconds (<= 0), y 0 (full) to 100 (empty).
func budgetLine(ps [][2]float64) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%g,%g", p[0], math.Round(1000*(100-100*min(max(p[1], 0), 1)))/1000)
	}
	return b.String()
}
