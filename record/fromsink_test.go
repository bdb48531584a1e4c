package record_test

import (
	"testing"

	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// TestFromSink is the table of the one mapping from a sink's refusal to
// the rejection every lane keeps.
func TestFromSink(t *testing.T) {
	cases := []struct {
		name  string
		in    sink.Rejection
		stage record.Stage
		want  record.Rejection
	}{
		{"unset code is sink-refused", sink.Rejection{Reason: "constraint"}, record.StageDrain,
			record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageDrain, Component: "pg", Error: "constraint"}},
		{"unknown code is sink-refused", sink.Rejection{Reason: "x", Code: sink.Code(99)}, record.StageSecondary,
			record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageSecondary, Component: "pg", Error: "x"}},
		{"decode kept", sink.Rejection{Reason: "not json", Code: sink.CodeDecode}, record.StageSecondary,
			record.Rejection{Code: record.CodeDecode, Stage: record.StageSecondary, Component: "pg", Error: "not json"}},
		{"oversize kept", sink.Rejection{Reason: "big", Code: sink.CodeOversize}, record.StageGate,
			record.Rejection{Code: record.CodeOversize, Stage: record.StageGate, Component: "pg", Error: "big"}},
		{"retry-exhausted kept", sink.Rejection{Reason: "timeout", Code: sink.CodeRetryExhausted}, record.StageSecondary,
			record.Rejection{Code: record.CodeRetryExhausted, Stage: record.StageSecondary, Component: "pg", Error: "timeout"}},
		{"sink-refused kept", sink.Rejection{Reason: "no", Code: sink.CodeSinkRefused}, record.StageDrain,
			record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageDrain, Component: "pg", Error: "no"}},
		{"contract decode", sink.Rejection{Reason: "bad json", Code: sink.CodeDecode, Contract: "orders@3", Rule: "decode"}, record.StageDrain,
			record.Rejection{Code: record.CodeDecode, Stage: record.StageCheck, Component: "orders@3", Rule: "decode", Error: "bad json"}},
		{"contract schema", sink.Rejection{Reason: "/id: required", Code: sink.CodeContract, Contract: "orders@3", Rule: "schema"}, record.StageSecondary,
			record.Rejection{Code: record.CodeContract, Stage: record.StageCheck, Component: "orders@3", Rule: "schema", Error: "/id: required"}},
		{"contract dq rule", sink.Rejection{Reason: "amount < 0", Code: sink.CodeDQ, Contract: "orders@3", Rule: "positive"}, record.StageGate,
			record.Rejection{Code: record.CodeDQ, Stage: record.StageCheck, Component: "orders@3", Rule: "positive", Error: "amount < 0"}},
		{"empty reason names the component", sink.Rejection{}, record.StageDrain,
			record.Rejection{Code: record.CodeSinkRefused, Stage: record.StageDrain, Component: "pg", Error: "rejected by pg"}},
		{"empty reason of a contract names the contract", sink.Rejection{Code: sink.CodeDQ, Contract: "c@1", Rule: "r"}, record.StageDrain,
			record.Rejection{Code: record.CodeDQ, Stage: record.StageCheck, Component: "c@1", Rule: "r", Error: "rejected by c@1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := record.FromSink(c.in, c.stage, "pg"); got != c.want {
				t.Fatalf("FromSink(%+v, %s)\n got %+v\nwant %+v", c.in, c.stage, got, c.want)
			}
		})
	}
}

// TestCodeNames pins every code's name and its parse: the names are what
// files, tables, metrics and --code show.
func TestCodeNames(t *testing.T) {
	want := map[record.Code]string{
		record.CodeUnknown: "unknown", record.CodeDecode: "decode", record.CodeContract: "contract",
		record.CodeDQ: "dq", record.CodeRetryExhausted: "retry-exhausted", record.CodeSinkRefused: "sink-refused",
		record.CodeOversize: "oversize",
	}
	if len(record.Codes()) != len(want) {
		t.Fatalf("%d codes, want %d", len(record.Codes()), len(want))
	}
	for _, c := range record.Codes() {
		if c.String() != want[c] {
			t.Errorf("code %d is %q, want %q", c, c.String(), want[c])
		}
		p, err := record.ParseCode(want[c])
		if err != nil || p != c {
			t.Errorf("ParseCode(%q) = %v, %v", want[c], p, err)
		}
	}
	if _, err := record.ParseCode("schema"); err == nil {
		t.Error("ParseCode(schema) succeeded; schema is a rule, its code is contract")
	}
}
