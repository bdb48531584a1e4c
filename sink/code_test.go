package sink

import "testing"

func TestCodeOrRefusedAndValid(t *testing.T) {
	for _, c := range []struct {
		in, want Code
		valid    bool
	}{
		{CodeUnknown, CodeSinkRefused, true},
		{CodeDecode, CodeDecode, true},
		{CodeOversize, CodeOversize, true},
		{Code(7), CodeSinkRefused, false},
	} {
		if got := c.in.OrRefused(); got != c.want {
			t.Errorf("%v.OrRefused() = %v, want %v", c.in, got, c.want)
		}
		if c.in.Valid() != c.valid {
			t.Errorf("%v.Valid() = %v", c.in, !c.valid)
		}
	}
	if len(Codes()) != 7 || Code(7).String() != "code(7)" {
		t.Errorf("Codes %v", Codes())
	}
}
