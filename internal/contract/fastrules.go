package contract

// A fast path for the rules. cel-go converts every member a rule reads
// from the decoded map[string]any into a CEL value, on every record; for
// the common shapes of rule that conversion is most of a rule's cost. At
// compile time, a rule's checked AST is also compiled, where its shape
// allows, into a tree of fastExpr evaluated directly over the decoded
// value. The tree answers true, false or "unsure"; a true or false
// verdict is used as is, and an unsure one (a value of a type the tree
// does not handle, a missing member, anything CEL would turn into an
// error) sends the record to cel-go, which decides and words the error.
// So the one property the tree must have is: when it answers true or
// false, cel-go evaluates the rule to that same bool without an error
// (FuzzFastRulesAgree checks it against cel-go).
//
// Shapes: constants (int, uint, double, string, bool, null), record, source,
// a comprehension's variable, member selection (a.b), has(a.b), the six
// comparisons between any two of these with CEL's heterogeneous numeric
// equality and ordering, size() of a string (code points), list or map,
// x in [constant list] and x in <list>, &&, ||, !, all() and exists() over
// a list, and startsWith, endsWith, contains and matches with a constant
// argument. A part of a rule outside these is "unsure" as a whole, which
// still lets the tree decide `a || <other>` when a holds.

import (
	"regexp"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// fastOp is what a fastExpr computes.
type fastOp uint8

const (
	opUnsure  fastOp = iota // outside the fast path: always unsure
	opConst                 // k
	opMember                // the record (slot -1) or a comprehension variable, then path
	opSource                // the source's name
	opHas                   // has(kids[0].field), kids[0] an opMember
	opSize                  // size(kids[0])
	opCmp                   // kids[0] cmp kids[1]
	opInSet                 // kids[0] in set (a list of constants)
	opInList                // kids[0] in kids[1]
	opAnd                   // kids[0] && kids[1]
	opOr                    // kids[0] || kids[1]
	opNot                   // !kids[0]
	opAll                   // kids[0].all(slot, kids[1])
	opExists                // kids[0].exists(slot, kids[1])
	opStrFn                 // kids[0].fn(str): startsWith, endsWith, contains
	opMatches               // kids[0].matches(re)
)

type fastExpr struct {
	op    fastOp
	kids  []*fastExpr
	k     fval     // opConst
	path  []string // opMember: the members selected, in order
	field string   // opHas
	slot  int      // opMember, opAll, opExists
	cmp   string   // opCmp: the CEL operator, "_<_" ...; opStrFn: the function
	set   []fval   // opInSet
	str   string   // opStrFn
	re    *regexp.Regexp
}

// maxIterDepth bounds nested comprehensions in a fast rule.
const maxIterDepth = 4

// fastFrame is what a fast rule reads.
type fastFrame struct {
	rec    any
	source string
	iter   [maxIterDepth]any
}

// fastRuleCompiler compiles a checked expression; scope holds the
// comprehension variables in force, innermost last.
type fastRuleCompiler struct {
	scope []string
}

// compileFastRule returns the fast path of a checked rule, or nil when
// its top is outside the fast path.
func compileFastRule(e ast.Expr) *fastExpr {
	var c fastRuleCompiler
	n := c.expr(e)
	if n.op == opUnsure {
		return nil
	}
	return n
}

var outside = &fastExpr{op: opUnsure}

func (c *fastRuleCompiler) expr(e ast.Expr) *fastExpr {
	switch e.Kind() {
	case ast.LiteralKind:
		if k, ok := constVal(e.AsLiteral()); ok {
			return &fastExpr{op: opConst, k: k}
		}
	case ast.IdentKind:
		return c.ident(e.AsIdent())
	case ast.SelectKind:
		s := e.AsSelect()
		x := c.expr(s.Operand())
		switch {
		case x.op != opMember:
		case s.IsTestOnly():
			return &fastExpr{op: opHas, kids: []*fastExpr{x}, field: s.FieldName()}
		default:
			path := append(append([]string(nil), x.path...), s.FieldName())
			return &fastExpr{op: opMember, slot: x.slot, path: path}
		}
	case ast.CallKind:
		return c.call(e.AsCall())
	case ast.ComprehensionKind:
		return c.comprehension(e.AsComprehension())
	}
	return outside
}

func (c *fastRuleCompiler) ident(name string) *fastExpr {
	for i := len(c.scope) - 1; i >= 0; i-- {
		if c.scope[i] == name {
			return &fastExpr{op: opMember, slot: i}
		}
	}
	switch name {
	case "record":
		return &fastExpr{op: opMember, slot: -1}
	case "source":
		return &fastExpr{op: opSource}
	}
	return outside
}

// constVal is a CEL literal as a fast value; false for bytes (left to
// cel-go).
func constVal(v any) (fval, bool) {
	switch x := v.(type) {
	case types.Bool:
		return boolVal(bool(x)), true
	case types.Int:
		return intVal(int64(x)), true
	case types.Uint:
		return uintVal(uint64(x)), true
	case types.Double:
		return dblVal(float64(x)), true
	case types.String:
		return fval{k: kString, s: string(x)}, true
	case types.Null:
		return fval{k: kNull}, true
	}
	return unsure, false
}

// both compiles two operands; nil when either is outside.
func (c *fastRuleCompiler) both(a, b ast.Expr) []*fastExpr {
	x, y := c.expr(a), c.expr(b)
	if x.op == opUnsure || y.op == opUnsure {
		return nil
	}
	return []*fastExpr{x, y}
}

func (c *fastRuleCompiler) call(call ast.CallExpr) *fastExpr {
	args := call.Args()
	fn := call.FunctionName()
	if call.IsMemberFunction() {
		if len(args) != 1 {
			if fn == "size" && len(args) == 0 {
				return c.unary(opSize, call.Target())
			}
			return outside
		}
		return c.method(fn, call.Target(), args[0])
	}
	switch {
	case len(args) == 1 && fn == "!_":
		x := c.expr(args[0])
		if x.op == opUnsure {
			return outside
		}
		return &fastExpr{op: opNot, kids: []*fastExpr{x}}
	case len(args) == 1 && fn == "size":
		return c.unary(opSize, args[0])
	case len(args) != 2:
		return outside
	case fn == "_&&_" || fn == "_||_":
		// One side outside still lets the other decide: false && _,
		// true || _ (CEL's logic is commutative about errors).
		op := opAnd
		if fn == "_||_" {
			op = opOr
		}
		x, y := c.expr(args[0]), c.expr(args[1])
		if x.op == opUnsure && y.op == opUnsure {
			return outside
		}
		return &fastExpr{op: op, kids: []*fastExpr{x, y}}
	case fn == "_==_" || fn == "_!=_" || fn == "_<_" || fn == "_<=_" || fn == "_>_" || fn == "_>=_":
		if kids := c.both(args[0], args[1]); kids != nil {
			return &fastExpr{op: opCmp, cmp: fn, kids: kids}
		}
	case fn == "@in":
		return c.in(args[0], args[1])
	}
	return outside
}

func (c *fastRuleCompiler) unary(op fastOp, arg ast.Expr) *fastExpr {
	x := c.expr(arg)
	if x.op == opUnsure {
		return outside
	}
	return &fastExpr{op: op, kids: []*fastExpr{x}}
}

// method compiles target.fn(arg) for the string functions with a
// constant argument.
func (c *fastRuleCompiler) method(fn string, target, arg ast.Expr) *fastExpr {
	if arg.Kind() != ast.LiteralKind {
		return outside
	}
	s, ok := arg.AsLiteral().(types.String)
	if !ok {
		return outside
	}
	x := c.expr(target)
	if x.op == opUnsure {
		return outside
	}
	switch fn {
	case "startsWith", "endsWith", "contains":
		return &fastExpr{op: opStrFn, cmp: fn, str: string(s), kids: []*fastExpr{x}}
	case "matches":
		re, err := regexp.Compile(string(s))
		if err != nil {
			return outside
		}
		return &fastExpr{op: opMatches, re: re, kids: []*fastExpr{x}}
	}
	return outside
}

// in compiles x in list: a literal list of bool, int, uint, double and
// string constants is a set (cel-go plans it as a hash set), anything
// else is looked through.
func (c *fastRuleCompiler) in(x, list ast.Expr) *fastExpr {
	if list.Kind() == ast.ListKind {
		l := list.AsList()
		if len(l.OptionalIndices()) > 0 {
			return outside
		}
		n := &fastExpr{op: opInSet, kids: []*fastExpr{c.expr(x)}}
		if n.kids[0].op == opUnsure {
			return outside
		}
		for _, el := range l.Elements() {
			if el.Kind() != ast.LiteralKind {
				return outside
			}
			k, ok := constVal(el.AsLiteral())
			if !ok || k.k == kNull { // cel-go plans no set for a list holding null
				return outside
			}
			n.set = append(n.set, k)
		}
		return n
	}
	if kids := c.both(x, list); kids != nil {
		return &fastExpr{op: opInList, kids: kids}
	}
	return outside
}

// comprehension compiles the all() and exists() macros as the parser
// expands them: init true, step @result && p, or init false, step
// @result || p; result @result.
func (c *fastRuleCompiler) comprehension(cx ast.ComprehensionExpr) *fastExpr {
	if cx.HasIterVar2() || len(c.scope) == maxIterDepth {
		return outside
	}
	accu := cx.AccuVar()
	init, step, res := cx.AccuInit(), cx.LoopStep(), cx.Result()
	if init.Kind() != ast.LiteralKind || res.Kind() != ast.IdentKind || res.AsIdent() != accu ||
		step.Kind() != ast.CallKind || !c.loopCondition(cx.LoopCondition(), accu) {
		return outside
	}
	b, ok := init.AsLiteral().(types.Bool)
	sc := step.AsCall()
	if !ok || len(sc.Args()) != 2 || sc.Args()[0].Kind() != ast.IdentKind || sc.Args()[0].AsIdent() != accu {
		return outside
	}
	var op fastOp
	switch {
	case bool(b) && sc.FunctionName() == "_&&_":
		op = opAll
	case !bool(b) && sc.FunctionName() == "_||_":
		op = opExists
	default:
		return outside
	}
	rng := c.expr(cx.IterRange())
	if rng.op == opUnsure {
		return outside
	}
	c.scope = append(c.scope, cx.IterVar())
	pred := c.expr(sc.Args()[1])
	c.scope = c.scope[:len(c.scope)-1]
	if pred.op == opUnsure {
		return outside
	}
	return &fastExpr{op: op, slot: len(c.scope), kids: []*fastExpr{rng, pred}}
}

// loopCondition: @not_strictly_false(accu) or @not_strictly_false(!accu).
func (c *fastRuleCompiler) loopCondition(e ast.Expr, accu string) bool {
	if e.Kind() != ast.CallKind || e.AsCall().FunctionName() != "@not_strictly_false" || len(e.AsCall().Args()) != 1 {
		return false
	}
	a := e.AsCall().Args()[0]
	if a.Kind() == ast.CallKind && a.AsCall().FunctionName() == "!_" && len(a.AsCall().Args()) == 1 {
		a = a.AsCall().Args()[0]
	}
	return a.Kind() == ast.IdentKind && a.AsIdent() == accu
}

// verdict evaluates a rule: yes, no, or ok false when unsure.
func (n *fastExpr) verdict(f *fastFrame) (pass, ok bool) {
	v := n.eval(f)
	return v.b, v.k == kBool
}

func (n *fastExpr) eval(f *fastFrame) fval {
	switch n.op {
	case opConst:
		return n.k
	case opMember:
		v, ok := n.member(f)
		if !ok {
			return unsure
		}
		return fromJSON(v)
	case opSource:
		return fval{k: kString, s: f.source}
	case opHas:
		return n.has(f)
	case opCmp, opInList:
		return n.binary(f)
	case opSize, opInSet, opNot, opStrFn, opMatches:
		return n.unary(f)
	case opAnd, opOr:
		return n.logic(f)
	case opAll, opExists:
		return n.comprehension(f)
	}
	return unsure
}

// Each kind of node has its own method, which keeps eval's stack frame,
// set up on every call, small.

func (n *fastExpr) has(f *fastFrame) fval {
	v, ok := n.kids[0].member(f)
	m, isMap := v.(map[string]any)
	if !ok || !isMap {
		return unsure
	}
	_, found := m[n.field]
	return boolVal(found)
}

func (n *fastExpr) binary(f *fastFrame) fval {
	x, y := n.kids[0].eval(f), n.kids[1].eval(f)
	if n.op == opInList {
		return inList(x, y)
	}
	return compare(n.cmp, x, y)
}

func (n *fastExpr) unary(f *fastFrame) fval {
	x := n.kids[0].eval(f)
	switch n.op {
	case opSize:
		return size(x)
	case opInSet:
		return inSet(x, n.set)
	case opNot:
		if x.k != kBool {
			return unsure
		}
		return boolVal(!x.b)
	}
	return n.strTest(x)
}

// member is the decoded value of an opMember; false when a member on
// its path is missing or its parent is not an object (errors in CEL).
func (n *fastExpr) member(f *fastFrame) (any, bool) {
	v := f.rec
	if n.slot >= 0 {
		v = f.iter[n.slot]
	}
	for _, name := range n.path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	return v, true
}

// strTest is a string function with a constant argument; a target
// other than a string has no such overload.
func (n *fastExpr) strTest(x fval) fval {
	if x.k != kString {
		return unsure
	}
	switch {
	case n.op == opMatches:
		return boolVal(n.re.MatchString(x.s))
	case n.cmp == "startsWith":
		return boolVal(strings.HasPrefix(x.s, n.str))
	case n.cmp == "endsWith":
		return boolVal(strings.HasSuffix(x.s, n.str))
	}
	return boolVal(strings.Contains(x.s, n.str))
}

// logic is && and ||: false && anything is false, true || anything is
// true, whatever the other side (an error included).
func (n *fastExpr) logic(f *fastFrame) fval {
	absorbing := n.op == opOr // the value that decides alone
	x := n.kids[0].eval(f)
	if x.k == kBool && x.b == absorbing {
		return x
	}
	y := n.kids[1].eval(f)
	if y.k == kBool && y.b == absorbing {
		return y
	}
	if x.k == kBool && y.k == kBool {
		return boolVal(!absorbing)
	}
	return unsure
}

// comprehension is all() and exists() over a list: one element that
// decides alone (false for all, true for exists) decides; else every
// element must be known.
func (n *fastExpr) comprehension(f *fastFrame) fval {
	rng := n.kids[0].eval(f)
	if rng.k != kList {
		return unsure
	}
	absorbing := n.op == opExists
	sure := true
	for _, el := range rng.raw.([]any) {
		f.iter[n.slot] = el
		v := n.kids[1].eval(f)
		switch {
		case v.k != kBool:
			sure = false
		case v.b == absorbing:
			f.iter[n.slot] = nil
			return v
		}
	}
	f.iter[n.slot] = nil
	if !sure {
		return unsure
	}
	return boolVal(!absorbing)
}
