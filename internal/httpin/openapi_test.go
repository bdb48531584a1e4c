package httpin

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// docs/openapi.yaml is a valid OpenAPI 3.1 document that describes
// exactly the routes the listener registers, every status they answer
// and every reason code.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.yaml does not validate: %v", err)
	}
	var described []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	var served []string
	for _, r := range Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	slices.Sort(described)
	slices.Sort(served)
	if !slices.Equal(described, served) {
		t.Fatalf("docs/openapi.yaml describes %v; the listener registers %v", described, served)
	}

	op := doc.Paths.Find(RouteRecords).Post
	for _, r := range Reasons() {
		st := r.Status()
		if r == ReasonNotFound {
			continue // another path's answer
		}
		if op.Responses.Status(st) == nil {
			t.Errorf("reason %s is answered %d, which docs/openapi.yaml does not list", r, st)
		}
	}
	if op.Responses.Status(200) == nil {
		t.Error("no 200 in docs/openapi.yaml")
	}
	enum := doc.Components.Schemas["Problem"].Value.Properties["reason"].Value.Enum
	var listed, reasons []string
	for _, e := range enum {
		listed = append(listed, e.(string))
	}
	for _, r := range Reasons() {
		reasons = append(reasons, string(r))
	}
	slices.Sort(listed)
	slices.Sort(reasons)
	if !slices.Equal(listed, reasons) {
		t.Errorf("Problem.reason lists %v; the reasons are %v", listed, reasons)
	}
	for code := range op.Responses.Map() {
		if n, err := strconv.Atoi(code); err == nil && n >= 400 && !slices.ContainsFunc(Reasons(), func(r Reason) bool { return r.Status() == n }) {
			t.Errorf("docs/openapi.yaml lists %s, which no reason is answered with", code)
		}
	}
}
