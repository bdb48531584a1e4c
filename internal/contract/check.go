package contract

import (
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Check judges one record: decode, schema, rules, then the dedup key of
// a record that passed. It never fails as a call; the outcome is in the
// Result. Safe for concurrent use.
func (c *Contract) Check(r *sink.Record) Result {
	doc, err := decode(r.Payload)
	if err != nil {
		return Result{Code: record.CodeDecode, Rule: "decode", Error: err.Error()}
	}
	if c.schema != nil && (c.fast == nil || !c.fast.accepts(doc)) {
		if err := c.schema.Validate(doc); err != nil {
			return Result{Code: record.CodeContract, Rule: "schema", Error: describeViolation(err)}
		}
	}
	var res Result
	if len(c.rules) > 0 {
		c.evalRules(doc, r, &res)
		if !res.Passed() {
			return res
		}
	}
	res.Key = c.key(doc, r.Payload)
	return res
}
