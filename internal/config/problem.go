package config

import (
	"errors"
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration. Load's error joins one
// error per problem found (errors.Join); those that belong to a setting
// are *Problem, which `weir validate` lists one a line (Problems). Its
// Error is the message Load has always given.
type Problem struct {
	// File is the configuration file the problem was found in, when the
	// check knows it (a table of an array, a TOML syntax error); "" for a
	// knob, whose value may come from the file, a variable or a flag.
	File string
	// Line is the line in File, when known (a TOML syntax error); 0
	// otherwise.
	Line int
	// Table names the table of an array the key is in, as messages do:
	// `[[secondary]] "pg"`, `[[contract]] "orders" rule #2`; "" for a
	// knob.
	Table string
	// Key is the setting: a knob's TOML key ("sink.file.dir"), or a key
	// of Table ("postgres.dsn"); "" when the problem is the file itself.
	Key string
	// Value is the value as shown in messages ("" when none is shown).
	Value string
	// Why says what is wrong and what is allowed.
	Why string

	msg   string
	cause error // what Unwrap gives: the error behind Why, if any
}

func (p *Problem) Error() string { return p.msg }

// Unwrap is the error the problem was made from (a file that cannot be
// read), or nil.
func (p *Problem) Unwrap() error { return p.cause }

// Path is the key's full path: Table and Key, or the one of them set.
func (p *Problem) Path() string {
	switch {
	case p.Table == "":
		return p.Key
	case p.Key == "":
		return p.Table
	}
	return p.Table + " " + p.Key
}

// NewProblem is a problem of the knob key found outside this package
// (a check weir serve makes at start, such as reading a TLS file): its
// message is "config: key = value: why", or without the value when it
// is "".
func NewProblem(key, value, why string) *Problem {
	msg := fmt.Sprintf("config: %s = %s: %s", key, value, why)
	if value == "" {
		msg = fmt.Sprintf("config: %s: %s", key, why)
	}
	return &Problem{Key: key, Value: value, Why: why, msg: msg}
}

// Problems flattens err — Load's or Validate's error, or any tree of
// joined and wrapped errors — into its problems, in order: each *Problem
// as it is, and each other leaf error as a Problem whose Why is its
// message (no key). Nil gives none.
func Problems(err error) []*Problem {
	var out []*Problem
	var walk func(err error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if p, ok := err.(*Problem); ok {
			out = append(out, p)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var p *Problem
		if errors.As(err, &p) {
			out = append(out, p)
			return
		}
		msg := strings.TrimPrefix(err.Error(), "config: ")
		out = append(out, &Problem{Why: msg, msg: err.Error()})
	}
	walk(err)
	return out
}

// unknownKeyWhy is Validate's finding for a key no setting has; Load
// only warns about it.
const unknownKeyWhy = "unknown key: weir serve ignores it with a warning (check its spelling and its table; weir kinds KIND lists a kind's keys)"
