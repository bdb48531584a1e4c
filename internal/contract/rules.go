package contract

import (
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// rule is a compiled Rule.
type rule struct {
	Rule
	prg cel.Program
	// fast is the rule's fast path (fastrules.go); nil: none.
	fast *fastExpr
	// isFalse is the Error of a record the rule judges false.
	isFalse string
}

// newEnv is the CEL environment every rule is checked in.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("record", cel.DynType),
		cel.Variable("key", cel.StringType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("source", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
	)
}

// compileRules checks names and severities, type-checks every
// expression and plans it once.
func compileRules(rs []Rule) ([]rule, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("rules: CEL environment: %w", err)
	}
	out := make([]rule, 0, len(rs))
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("rule %d: name is empty", i+1)
		case r.Name == "decode" || r.Name == "schema":
			return nil, fmt.Errorf("rule %q: the name is reserved for weir's own checks", r.Name)
		case seen[r.Name]:
			return nil, fmt.Errorf("rule %q: name used twice", r.Name)
		case r.Severity != Fail && r.Severity != Warn:
			return nil, fmt.Errorf("rule %q: unknown severity %d", r.Name, r.Severity)
		}
		seen[r.Name] = true
		prg, fast, err := compileExpr(env, r.Expr)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		out = append(out, rule{Rule: r, prg: prg, fast: fast, isFalse: r.Expr + " is false"})
	}
	return out, nil
}

// compileExpr type-checks and plans one expression, and compiles its
// fast path when it has one.
func compileExpr(env *cel.Env, expr string) (cel.Program, *fastExpr, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		hint := ""
		if t.IsExactType(cel.DynType) {
			hint = " (compare a record field explicitly, e.g. record.active == true)"
		}
		return nil, nil, fmt.Errorf("%s: evaluates to %s, want bool%s", expr, t, hint)
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, nil, err
	}
	return prg, compileFastRule(ast.NativeRep().Expr()), nil
}

// vars is one record's CEL activation; headers are gathered only when a
// rule reads them.
type vars struct {
	rec     any // as decoded: CEL reads map[string]any members directly
	r       *sink.Record
	headers map[string]string
}

var _ interpreter.Activation = (*vars)(nil)

// ResolveName gives CEL the value of one of the environment's variables.
func (v *vars) ResolveName(name string) (any, bool) {
	switch name {
	case "record":
		return v.rec, true
	case "source":
		return v.r.Source, true
	case "key":
		return string(v.r.Key), true
	case "headers":
		if v.headers == nil {
			v.headers = make(map[string]string, len(v.r.Headers))
			for _, h := range v.r.Headers {
				v.headers[h.Key] = string(h.Value)
			}
		}
		return v.headers, true
	}
	return nil, false
}

// Parent is nil: vars is the whole activation.
func (v *vars) Parent() interpreter.Activation { return nil }

// activations keeps activations from one record to the next; cel-go
// holds none after Eval returns.
var activations = sync.Pool{New: func() any { return new(vars) }}

// evalRules runs the rules in order over the decoded record. It stops at
// the first failing fail rule (res.Code CodeDQ) and lists failing warn
// rules in res.Warned. A rule's fast path decides when it can; cel-go
// decides the rest, in an activation taken only then.
func (c *Contract) evalRules(rec any, r *sink.Record, res *Result) {
	fr := fastFrame{rec: rec, source: r.Source}
	var act *vars
	defer func() {
		if act != nil {
			*act = vars{}
			activations.Put(act)
		}
	}()
	for i := range c.rules {
		ru := &c.rules[i]
		var ok, sure bool
		var why string
		if ru.fast != nil {
			ok, sure = ru.fast.verdict(&fr)
		}
		if !sure {
			if act == nil {
				act = activations.Get().(*vars)
				act.rec, act.r = rec, r
			}
			ok, why = eval(ru.prg, act)
		}
		if ok {
			continue
		}
		if why == "" {
			why = ru.isFalse
		}
		if ru.Severity == Warn {
			res.Warned = append(res.Warned, ru.Name)
			continue
		}
		res.Code, res.Rule, res.Error = record.CodeDQ, ru.Name, why
		return
	}
}

// eval reports whether the program evaluates true; when it fails at
// run time, why is the error ("" when it is simply false).
func eval(prg cel.Program, act *vars) (ok bool, why string) {
	out, _, err := prg.Eval(act)
	if err != nil {
		return false, err.Error()
	}
	if b, isBool := out.(types.Bool); isBool {
		return bool(b), ""
	}
	return false, "evaluated to " + out.Type().TypeName() + ", not bool"
}
