package contract

// CEL's values and operators, as the rules' fast path (fastrules.go)
// needs them: a decoded JSON value as cel-go sees it, and ==, the
// orderings, size() and in with cel-go's results — the same bool where
// cel-go has one, "unsure" wherever cel-go would raise an error or the
// fast path does not follow it.

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// kind is a fast value's CEL type; kUnsure marks a value the fast path
// does not know (CEL would have an error, or a type it does not handle).
type kind uint8

const (
	kUnsure kind = iota
	kNull
	kBool
	kInt
	kUint
	kDouble
	kString
	kList
	kMap
)

type fval struct {
	k kind
	b bool   // kBool
	n uint64 // kInt: int64(n), kUint: n, kDouble: the float64's bits
	s string // kString
	// raw is the decoded value of a kList ([]any) or kMap
	// (map[string]any), as decoded: boxing it anew would allocate.
	raw any
}

func intVal(i int64) fval     { return fval{k: kInt, n: uint64(i)} }
func uintVal(u uint64) fval   { return fval{k: kUint, n: u} }
func dblVal(d float64) fval   { return fval{k: kDouble, n: math.Float64bits(d)} }
func (v fval) asInt() int64   { return int64(v.n) }
func (v fval) asDbl() float64 { return math.Float64frombits(v.n) }

var (
	unsure  = fval{}
	valTrue = fval{k: kBool, b: true}
	valFals = fval{k: kBool}
)

func boolVal(b bool) fval {
	if b {
		return valTrue
	}
	return valFals
}

// fromJSON is a decoded value as CEL sees it: cel-go converts a
// json.Number to an int when strconv.ParseInt takes it, else to a double
// when strconv.ParseFloat does (else to a string: unsure here).
func fromJSON(v any) fval {
	switch x := v.(type) {
	case nil:
		return fval{k: kNull}
	case bool:
		return boolVal(x)
	case string:
		return fval{k: kString, s: x}
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") { // the only inputs ParseInt may take
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return intVal(i)
			}
		}
		if d, err := strconv.ParseFloat(s, 64); err == nil {
			return dblVal(d)
		}
	case map[string]any:
		return fval{k: kMap, raw: v}
	case []any:
		return fval{k: kList, raw: v}
	}
	return unsure
}

func size(x fval) fval {
	switch x.k {
	case kString:
		return intVal(int64(utf8.RuneCountInString(x.s)))
	case kList:
		return intVal(int64(len(x.raw.([]any))))
	case kMap:
		return intVal(int64(len(x.raw.(map[string]any))))
	}
	return unsure
}

func isNum(k kind) bool { return k == kInt || k == kUint || k == kDouble }

// equal is CEL's ==: null equals only null, numbers compare across int,
// uint and double, other values of different types are unequal. Two
// lists or two maps are left to cel-go.
func equal(a, b fval) fval {
	switch {
	case a.k == kUnsure || b.k == kUnsure:
		return unsure
	case a.k == kNull || b.k == kNull:
		return boolVal(a.k == b.k)
	case isNum(a.k) && isNum(b.k):
		c, ok := numCompare(a, b)
		return boolVal(ok && c == 0) // NaN equals nothing
	case a.k != b.k:
		return valFals
	}
	switch a.k {
	case kBool:
		return boolVal(a.b == b.b)
	case kString:
		return boolVal(a.s == b.s)
	}
	return unsure
}

// compare is CEL's comparison operators.
func compare(op string, a, b fval) fval {
	switch op {
	case "_==_":
		return equal(a, b)
	case "_!=_":
		e := equal(a, b)
		if e.k != kBool {
			return unsure
		}
		return boolVal(!e.b)
	}
	var c int
	switch {
	case isNum(a.k) && isNum(b.k):
		var ok bool
		if c, ok = numCompare(a, b); !ok {
			return unsure // NaN cannot be ordered
		}
	case a.k == kString && b.k == kString:
		c = strings.Compare(a.s, b.s)
	case a.k == kBool && b.k == kBool:
		c = boolCompare(a.b, b.b)
	default:
		return unsure // no such overload
	}
	switch op {
	case "_<_":
		return boolVal(c < 0)
	case "_<=_":
		return boolVal(c <= 0)
	case "_>_":
		return boolVal(c > 0)
	default: // "_>=_"
		return boolVal(c >= 0)
	}
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// numCompare orders two numbers as cel-go does (common/types/compare.go:
// a double against an int or uint is compared in float64); ok is false
// when either is NaN.
func numCompare(a, b fval) (int, bool) {
	if a.k == kDouble && math.IsNaN(a.asDbl()) || b.k == kDouble && math.IsNaN(b.asDbl()) {
		return 0, false
	}
	switch a.k {
	case kInt:
		switch b.k {
		case kInt:
			return cmp3(a.asInt() < b.asInt(), a.asInt() > b.asInt()), true
		case kUint:
			return intUint(a.asInt(), b.n), true
		default:
			return -doubleInt(b.asDbl(), a.asInt()), true
		}
	case kUint:
		switch b.k {
		case kInt:
			return -intUint(b.asInt(), a.n), true
		case kUint:
			return cmp3(a.n < b.n, a.n > b.n), true
		default:
			return -doubleUint(b.asDbl(), a.n), true
		}
	}
	switch b.k {
	case kInt:
		return doubleInt(a.asDbl(), b.asInt()), true
	case kUint:
		return doubleUint(a.asDbl(), b.n), true
	}
	return cmp3(a.asDbl() < b.asDbl(), a.asDbl() > b.asDbl()), true
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

func doubleInt(d float64, i int64) int {
	switch {
	case d < math.MinInt64:
		return -1
	case d > math.MaxInt64:
		return 1
	}
	return cmp3(d < float64(i), d > float64(i))
}

func doubleUint(d float64, u uint64) int {
	switch {
	case d < 0:
		return -1
	case d > math.MaxUint64:
		return 1
	}
	return cmp3(d < float64(u), d > float64(u))
}

func intUint(i int64, u uint64) int {
	if i < 0 || u > math.MaxInt64 {
		return -1
	}
	return cmp3(i < int64(u), i > int64(u))
}

// inSet is x in a list of constants. cel-go looks x up in a hash set
// holding each constant and its lossless int, uint and double forms;
// for numbers below 2^53 in magnitude that is numeric equality, beyond
// it is left to cel-go. A list or map is never in the set.
func inSet(x fval, set []fval) fval {
	switch x.k {
	case kUnsure, kList, kMap:
		return unsure
	case kInt:
		if x.asInt() <= -1<<53 || x.asInt() >= 1<<53 {
			return unsure
		}
	case kUint:
		if x.n >= 1<<53 {
			return unsure
		}
	case kDouble:
		if !(math.Abs(x.asDbl()) < 1<<53) {
			return unsure
		}
	}
	for _, k := range set {
		if e := equal(x, k); e.k == kBool && e.b {
			return valTrue
		}
	}
	return valFals
}

// inList is x in a list value: true when an element equals x (no
// element can make it an error), false when none does.
func inList(x, list fval) fval {
	if list.k != kList || x.k == kUnsure || x.k == kList || x.k == kMap {
		return unsure
	}
	sure := true
	for _, el := range list.raw.([]any) {
		e := equal(x, fromJSON(el))
		switch {
		case e.k != kBool:
			sure = false
		case e.b:
			return valTrue
		}
	}
	if !sure {
		return unsure
	}
	return valFals
}
