package tap

import (
	"encoding/json"
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// Compile compiles a filter: a CEL expression (cel.dev/cel-go, the
// standard library, as in a contract's rules) that must be a bool, over
// these variables of a record:
//
//	id          string     the record id in hex ("" before it has one)
//	source      string     where it came from ("socket", a [[source]]'s name, the HTTP stream)
//	key         string     its key
//	headers     map(string, string)
//	event_time  timestamp  its own time (the Unix epoch when it has none)
//	code        string     the reason code at a quarantine point ("" elsewhere)
//	rule        string     the contract rule that refused it
//	error       string     why it was refused
//	bytes       int        the payload's size
//	payload     string     the payload as text
//	record      dyn        the payload decoded as JSON (null when it is not JSON)
//
// Examples: `source == "orders"`, `code == "contract"`,
// `record.amount > 100`, `payload.contains("timeout")`. A record on which
// the expression fails at run time (a missing field) is left out.
func Compile(expr string) (func(*Record) bool, error) {
	env, err := cel.NewEnv(
		cel.Variable("id", cel.StringType),
		cel.Variable("source", cel.StringType),
		cel.Variable("key", cel.StringType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("event_time", cel.TimestampType),
		cel.Variable("code", cel.StringType),
		cel.Variable("rule", cel.StringType),
		cel.Variable("error", cel.StringType),
		cel.Variable("bytes", cel.IntType),
		cel.Variable("payload", cel.StringType),
		cel.Variable("record", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, fmt.Errorf("tap: filter environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("tap: filter: %w", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("tap: filter %s: evaluates to %s, want bool", expr, t)
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("tap: filter: %w", err)
	}
	return func(r *Record) bool {
		out, _, err := prg.Eval(&vars{r: r})
		if err != nil {
			return false
		}
		b, ok := out.(types.Bool)
		return ok && bool(b)
	}, nil
}

// vars is one record's activation; the decoded payload and the headers
// are made only when the expression reads them.
type vars struct {
	r *Record
}

var _ interpreter.Activation = (*vars)(nil)

func (v *vars) ResolveName(name string) (any, bool) {
	r := v.r
	switch name {
	case "id":
		if !r.HasID {
			return "", true
		}
		return r.ID.String(), true
	case "source":
		return r.Source, true
	case "key":
		return string(r.Key), true
	case "headers":
		h := make(map[string]string, len(r.Headers))
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		return h, true
	case "event_time":
		if r.EventTime.IsZero() {
			return time.Unix(0, 0).UTC(), true
		}
		return r.EventTime, true
	case "code":
		return r.Code, true
	case "rule":
		return r.Rule, true
	case "error":
		return r.Error, true
	case "bytes":
		return int64(len(r.Payload)), true
	case "payload":
		return string(r.Payload), true
	case "record":
		var x any
		if json.Unmarshal(r.Payload, &x) != nil {
			return nil, true
		}
		return x, true
	}
	return nil, false
}

func (v *vars) Parent() interpreter.Activation { return nil }
