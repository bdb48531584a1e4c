package contract

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaURL is the base URI of a schema document without an $id; it only
// resolves the document's own internal references.
const schemaURL = "weir:///contract.schema.json"

// noLoader refuses every external schema: a contract is one
// self-contained document, so compiling it never touches the network or
// the disk.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not loaded (weir loads no schema over the network or from disk; put it under $defs)", url)
}

// compileSchema compiles doc (nil: no schema) with the drafts weir
// supports, format assertions on.
func compileSchema(doc []byte, path string) (*jsonschema.Schema, error) {
	if doc == nil {
		return nil, nil
	}
	label := "schema"
	if path != "" {
		label += " " + path
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("%s: not JSON: %w", label, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if d := sch.DraftVersion; d != 2019 && d != 2020 {
		return nil, fmt.Errorf("%s: draft %d is not supported ($schema must be draft 2019-09 or 2020-12)", label, d)
	}
	return sch, nil
}

// describeViolation renders a validation failure as the leaf cause's
// keyword location, its message and the instance location, e.g.
// "/properties/amount/type: got string, want number (at /amount)".
func describeViolation(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	out := ve.DetailedOutput()
	leaf, n := firstLeaf(out), countLeaves(out)
	msg := leaf.KeywordLocation
	if msg == "" {
		msg = "/"
	}
	if leaf.Error != nil {
		msg += ": " + leaf.Error.String()
	}
	msg += " (at " + instance(leaf.InstanceLocation) + ")"
	if n > 1 {
		msg += fmt.Sprintf(" and %d more", n-1)
	}
	return msg
}

func firstLeaf(u *jsonschema.OutputUnit) *jsonschema.OutputUnit {
	for len(u.Errors) > 0 {
		u = &u.Errors[0]
	}
	return u
}

func countLeaves(u *jsonschema.OutputUnit) int {
	if len(u.Errors) == 0 {
		return 1
	}
	n := 0
	for i := range u.Errors {
		n += countLeaves(&u.Errors[i])
	}
	return n
}

func instance(loc string) string {
	if loc == "" {
		return "the root"
	}
	return loc
}
