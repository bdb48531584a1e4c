// Package setting is how weir's configuration values are written, read
// and checked: one Type per kind of value (an integer in a range, a size,
// a duration, a choice among names, a path...). The scalar settings of
// package config and the keys of every component's table (package
// component) are built from the same Types, so a key gets the same
// parsing, the same range check and the same line in
// docs/configuration.md wherever it is declared.
//
// A Type reads a value from its text form (a flag, an environment
// variable) and from a TOML value, checks it against its range and shows
// it for messages and documentation. Range is the allowed set as people
// read it; Check returns "" for a valid value or what is wrong, worded to
// follow "<key> = <value>: ".
package setting

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Kind is how a value is written; it is the Type column of the reference
// tables in docs/configuration.md.
type Kind string

// The kinds of value.
const (
	KindString   Kind = "string"
	KindPath     Kind = "path"
	KindGlob     Kind = "glob"
	KindInt      Kind = "integer"
	KindSize     Kind = "size"
	KindDuration Kind = "duration"
	KindAddress  Kind = "address"
	KindList     Kind = "list"
	KindBool     Kind = "boolean"
)

// Type describes values of Go type T.
type Type[T any] struct {
	Kind  Kind
	Range string // the allowed values, as shown to people
	// Parse reads the text form (a flag, an environment variable).
	Parse func(string) (T, error)
	// FromTOML reads a decoded TOML value (string, int64, bool, []any...).
	FromTOML func(any) (T, error)
	// Check returns "" for a valid value, else why it is not; nil accepts
	// every value Parse and FromTOML return.
	Check func(T) string
	// Format shows a value in messages and documentation.
	Format func(T) string
}

// Valid runs Check, treating a nil Check as "always valid".
func (t Type[T]) Valid(v T) string {
	if t.Check == nil {
		return ""
	}
	return t.Check(v)
}

// OrZero accepts the zero value besides t's range, with the given meaning
// ("the default", "unlimited"): for keys whose zero value has always
// meant that.
func OrZero[T comparable](t Type[T], meaning string) Type[T] {
	var zero T
	check := t.Check
	t.Check = func(v T) string {
		if v == zero || check == nil {
			return ""
		}
		if why := check(v); why != "" {
			return why + " (or " + t.Format(zero) + " for " + meaning + ")"
		}
		return ""
	}
	t.Range = t.Format(zero) + " (" + meaning + ") or " + t.Range
	return t
}

// Int is an integer between lo and hi.
func Int(lo, hi int) Type[int] {
	return Type[int]{
		Kind:  KindInt,
		Range: fmt.Sprintf("%s – %s", FormatCount(int64(lo)), FormatCount(int64(hi))),
		Parse: func(s string) (int, error) {
			n, err := ParseInt(s)
			return int(n), err
		},
		FromTOML: func(v any) (int, error) {
			switch v := v.(type) {
			case int64:
				return int(v), nil
			case string:
				n, err := ParseInt(v)
				return int(n), err
			}
			return 0, fmt.Errorf("want an integer, got %s", TOMLType(v))
		},
		Check:  func(v int) string { return Between(int64(v), int64(lo), int64(hi), FormatCount) },
		Format: func(v int) string { return FormatCount(int64(v)) },
	}
}

// Size is a byte count between lo and hi.
func Size(lo, hi int64) Type[int64] {
	return Type[int64]{
		Kind:     KindSize,
		Range:    fmt.Sprintf("%s – %s", FormatSize(lo), FormatSize(hi)),
		Parse:    ParseSize,
		FromTOML: sizeFromTOML,
		Check:    func(v int64) string { return Between(v, lo, hi, FormatSize) },
		Format:   FormatSize,
	}
}

// IntSize is a Size held in an int.
func IntSize(lo, hi int64) Type[int] {
	s := Size(lo, hi)
	return Type[int]{
		Kind:  KindSize,
		Range: s.Range,
		Parse: func(text string) (int, error) {
			n, err := ParseSize(text)
			return int(n), err
		},
		FromTOML: func(v any) (int, error) {
			n, err := sizeFromTOML(v)
			return int(n), err
		},
		Check:  func(v int) string { return s.Check(int64(v)) },
		Format: func(v int) string { return FormatSize(int64(v)) },
	}
}

func sizeFromTOML(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return ParseSize(v)
	}
	return 0, fmt.Errorf("want a size (integer bytes or a string like \"64MiB\"), got %s", TOMLType(v))
}

// Duration is a Go duration between lo and hi. In TOML it is a string;
// the bare integer 0 is also read.
func Duration(lo, hi time.Duration) Type[time.Duration] {
	return Type[time.Duration]{
		Kind:  KindDuration,
		Range: fmt.Sprintf("%s – %s", FormatDuration(lo), FormatDuration(hi)),
		Parse: ParseDuration,
		FromTOML: func(v any) (time.Duration, error) {
			switch v := v.(type) {
			case string:
				return ParseDuration(v)
			case int64:
				if v == 0 {
					return 0, nil
				}
				return 0, fmt.Errorf("want a duration string such as \"5s\", got the integer %d", v)
			}
			return 0, fmt.Errorf("want a duration string such as \"5s\", got %s", TOMLType(v))
		},
		Check: func(v time.Duration) string {
			if v < lo || v > hi {
				return fmt.Sprintf("must be between %s and %s", FormatDuration(lo), FormatDuration(hi))
			}
			return ""
		},
		Format: FormatDuration,
	}
}

// Enum is one of values.
func Enum(values ...string) Type[string] {
	return Type[string]{
		Kind:     KindString,
		Range:    "one of " + strings.Join(QuoteAll(values), ", "),
		Parse:    func(s string) (string, error) { return s, nil },
		FromTOML: TOMLString,
		Check: func(v string) string {
			for _, ok := range values {
				if v == ok {
					return ""
				}
			}
			return "must be one of " + strings.Join(QuoteAll(values), ", ")
		},
		Format: Quote,
	}
}

// Text is a free string; check (nil: any) validates it.
func Text(rangeText string, check func(string) string) Type[string] {
	return Type[string]{
		Kind:     KindString,
		Range:    rangeText,
		Parse:    func(s string) (string, error) { return s, nil },
		FromTOML: TOMLString,
		Check:    check,
		Format:   Quote,
	}
}

// Host is a listen address without a port: an IP address or a host name.
func Host() Type[string] {
	return Text("an IP address or a host name, without a port", CheckHost)
}

// CheckHost accepts an IP address or a host name made of letters, digits,
// dots, dashes and underscores.
func CheckHost(v string) string {
	const msg = "must be an IP address or a host name, without a port"
	if v == "" || len(v) > 253 {
		return msg
	}
	if net.ParseIP(v) != nil {
		return ""
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return msg
		}
	}
	return ""
}

// PathRange is the range of every path: how package config resolves it.
const PathRange = "absolute or relative to the working directory; no NUL, no `..`"

// Path is a file-system path that may not be empty. Package config
// resolves it against the working directory and refuses NUL bytes and
// `..` elements.
func Path() Type[string] {
	return Type[string]{
		Kind:  KindPath,
		Range: PathRange,
		Parse: func(s string) (string, error) {
			if s == "" {
				return "", errors.New("empty path")
			}
			return s, nil
		},
		FromTOML: func(v any) (string, error) {
			s, err := TOMLString(v)
			if err == nil && s == "" {
				err = errors.New("empty path")
			}
			return s, err
		},
		Format: Quote,
	}
}

// OptionalPath is a path that may be empty (not set); rangeText says when
// it is needed.
func OptionalPath(rangeText string) Type[string] {
	return Type[string]{
		Kind:     KindPath,
		Range:    rangeText + "; " + PathRange,
		Parse:    func(s string) (string, error) { return s, nil },
		FromTOML: TOMLString,
		Format:   Quote,
	}
}

// Glob is a filepath.Match pattern; package config makes a relative one
// absolute against the working directory.
func Glob() Type[string] {
	t := Text("a filepath.Match pattern, absolute or relative to the working directory", func(v string) string {
		if _, err := filepath.Match(v, ""); err != nil {
			return "is not a valid pattern: " + err.Error()
		}
		return ""
	})
	t.Kind = KindGlob
	return t
}

// Loopback reports whether host (of a listen address) is reachable only
// from this machine: "localhost" or a loopback IP.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Address is a TCP host:port to listen on; empty turns it off.
func Address() Type[string] {
	return Type[string]{
		Kind:     KindAddress,
		Range:    "empty (off) or host:port; the host may be an IP address, a name, or empty for every interface; port 0 – 65535",
		Parse:    func(s string) (string, error) { return strings.TrimSpace(s), nil },
		FromTOML: TOMLString,
		Check: func(v string) string {
			if v == "" {
				return ""
			}
			_, port, err := net.SplitHostPort(v)
			if err != nil {
				return "must be host:port, such as \"127.0.0.1:9443\" or \":9443\" (IPv6 hosts in brackets: \"[::1]:9443\")"
			}
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || n > 65535 {
				return fmt.Sprintf("port %q must be a number from 0 to 65535", port)
			}
			return ""
		},
		Format: Quote,
	}
}

// List is a list of strings: comma-separated in flags and environment
// variables, an array of strings (or one comma-separated string) in TOML.
// An empty list is nil. check (nil: any) validates one entry.
func List(rangeText string, check func(string) error) Type[[]string] {
	return Type[[]string]{
		Kind:  KindList,
		Range: rangeText + "; comma-separated in a flag or variable, an array of strings in TOML",
		Parse: func(s string) ([]string, error) { return SplitList(s), nil },
		FromTOML: func(v any) ([]string, error) {
			switch v := v.(type) {
			case string:
				return SplitList(v), nil
			case []any:
				var out []string
				for i, e := range v {
					s, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("want an array of strings, element %d is %s", i+1, TOMLType(e))
					}
					if s = strings.TrimSpace(s); s != "" {
						out = append(out, s)
					}
				}
				return out, nil
			}
			return nil, fmt.Errorf("want an array of strings, got %s", TOMLType(v))
		},
		Check: func(vs []string) string {
			if check == nil {
				return ""
			}
			var why []string
			for _, v := range vs {
				if err := check(v); err != nil {
					why = append(why, err.Error())
				}
			}
			return strings.Join(why, "; ")
		},
		Format: func(vs []string) string { return "[" + strings.Join(QuoteAll(vs), ", ") + "]" },
	}
}

// TableList is a List that only a TOML table holds (no flag or variable):
// an array of strings, or one comma-separated string.
func TableList(rangeText string, check func(string) error) Type[[]string] {
	t := List(rangeText, check)
	t.Range = rangeText + "; an array of strings, or one comma-separated string"
	return t
}

// Bool is true or false; TOML takes a boolean (or the string form).
func Bool() Type[bool] {
	parse := func(s string) (bool, error) {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "1", "yes", "on":
			return true, nil
		case "false", "0", "no", "off":
			return false, nil
		}
		return false, fmt.Errorf("want true or false, got %q", s)
	}
	return Type[bool]{
		Kind:  KindBool,
		Range: "true or false",
		Parse: parse,
		FromTOML: func(v any) (bool, error) {
			switch v := v.(type) {
			case bool:
				return v, nil
			case string:
				return parse(v)
			}
			return false, fmt.Errorf("want a boolean, got %s", TOMLType(v))
		},
		Format: strconv.FormatBool,
	}
}

// Secret is a connection string that may hold a password: it is never
// shown, in messages or anywhere else.
func Secret(rangeText string) Type[string] {
	t := Text(rangeText, nil)
	t.Format = func(v string) string {
		if v == "" {
			return `""`
		}
		return "(set, not shown)"
	}
	return t
}

// Ident is a table name: "name" or "schema.name", used verbatim.
func Ident() Type[string] {
	return Text("a table name or schema.table, used verbatim (case-sensitive), at most 63 bytes per part", func(v string) string {
		parts := strings.Split(v, ".")
		if v == "" || len(parts) > 2 {
			return "must be a table name or schema.table"
		}
		for _, p := range parts {
			if p == "" || len(p) > 63 || strings.ContainsRune(p, 0) {
				return "each part must be 1 to 63 bytes, without NUL"
			}
		}
		return ""
	})
}

// Between is the range message of an integer check.
func Between(v, lo, hi int64, f func(int64) string) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %s and %s", f(lo), f(hi))
	}
	return ""
}

// Quote shows a string value.
func Quote(v string) string { return fmt.Sprintf("%q", v) }

// QuoteAll quotes each of vs.
func QuoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = Quote(v)
	}
	return out
}

// TOMLString reads a TOML string.
func TOMLString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("want a string, got %s", TOMLType(v))
}

// TOMLType describes a decoded TOML value for messages.
func TOMLType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// SplitList splits a comma-separated list, trimming space and dropping
// empty entries.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
